//! Settings tests use to shape the emulation, read from the ConfigMap
//! `kubevirt/corral-sandbox-emulator` on every reconcile (absent keys keep their defaults):
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `startMillis` | time from VMI creation to `Running` | 800 |
//! | `stopMillis` | time a stopping VMI takes to go | 400 |
//! | `cloneStepMillis` | time a clone spends in each phase | 300 |
//! | `stallClones` | comma-separated clone target names that never leave their phase; `name:Phase` stalls once the clone reaches `Phase` (e.g. `pool-2:RestoreInProgress`), a bare name in its first phase | empty |
//! | `failClones` | comma-separated clone target names that go `Failed` | empty |
//!
//! A VM annotated `sandbox.corral.dev/unschedulable: "true"` never gets scheduled and shows
//! `ErrorUnschedulable`, as a VM that asks for more than any node has does on KubeVirt. A VM
//! annotated `sandbox.corral.dev/refuse-start: <reason>` has its start refused with a 409.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

/// Name of the knobs ConfigMap (in namespace `kubevirt`).
pub const CONFIG_MAP: &str = "corral-sandbox-emulator";
/// VM annotation whose value the emulated virt-api returns as a 409 on start.
pub const REFUSE_START_ANNOTATION: &str = "sandbox.corral.dev/refuse-start";
/// VM annotation that makes its VMI unschedulable.
pub const UNSCHEDULABLE_ANNOTATION: &str = "sandbox.corral.dev/unschedulable";
/// VM annotation listing (comma-separated) volumes whose snapshots are disabled.
pub const SNAPSHOT_DISABLED_ANNOTATION: &str = "sandbox.corral.dev/snapshot-disabled";
/// StorageClass name the emulator reports for every volume.
pub const STORAGE_CLASS: &str = "sandbox-local";

/// The emulation's current settings.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// VMI creation to `Running`.
    pub start: Duration,
    /// Stopping VMI to gone.
    pub stop: Duration,
    /// Time in each clone phase.
    pub clone_step: Duration,
    /// Clone targets that stall: `name` (in the first phase) or `name:Phase`.
    pub stall_clones: Vec<String>,
    /// Clone targets that fail.
    pub fail_clones: Vec<String>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            start: Duration::from_millis(800),
            stop: Duration::from_millis(400),
            clone_step: Duration::from_millis(300),
            stall_clones: Vec::new(),
            fail_clones: Vec::new(),
        }
    }
}

impl Knobs {
    /// Whether a clone of `target` now in `phase` stalls there: a bare entry stalls it in any
    /// phase after the first, `target:Phase` only in `Phase`.
    pub fn stalls(&self, target: &str, phase: &str) -> bool {
        self.stall_clones
            .iter()
            .any(|entry| match entry.split_once(':') {
                Some((name, at)) => name == target && at == phase,
                None => entry == target && !phase.is_empty(),
            })
    }

    /// Reads the ConfigMap; a missing one or a missing key keeps the default.
    pub async fn read(client: &Client) -> Knobs {
        let api: Api<ConfigMap> =
            Api::namespaced(client.clone(), crate::bootstrap::KUBEVIRT_NAMESPACE);
        let data = match api.get_opt(CONFIG_MAP).await {
            Ok(Some(cm)) => cm.data.unwrap_or_default(),
            _ => BTreeMap::new(),
        };
        let mut knobs = Knobs::default();
        let millis = |key: &str, default: Duration| {
            data.get(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(default, Duration::from_millis)
        };
        let list = |key: &str| -> Vec<String> {
            data.get(key)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        knobs.start = millis("startMillis", knobs.start);
        knobs.stop = millis("stopMillis", knobs.stop);
        knobs.clone_step = millis("cloneStepMillis", knobs.clone_step);
        knobs.stall_clones = list("stallClones");
        knobs.fail_clones = list("failClones");
        knobs
    }
}
