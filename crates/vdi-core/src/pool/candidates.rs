//! Golden VM candidates for a new pool: the namespace's VMs that are no pool member, each with
//! its power state and what would make KubeVirt fail its clones (see
//! [`super::golden_problems`]), ready for a picker (the app's "New pool" dialog).

use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::golden_vm::golden_problems;
use crate::error::{Error, Result};
use crate::names::POOL_LABEL;
use crate::resources::VirtualMachine;

/// One VM that could be a golden VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct GoldenCandidate {
    /// VirtualMachine name.
    pub name: String,
    /// `status.printableStatus` as the cluster says it.
    pub power: String,
    /// Whether it runs (cloning it then needs an explicit "allow running": its disk would be
    /// only crash-consistent).
    pub running: bool,
    /// Problems that make a clone fail or stall, each with its fix; empty when it can be
    /// cloned (running aside).
    pub problems: Vec<String>,
}

/// The VMs of `namespace` without the pool label, sorted by name, with their problems.
///
/// Errors: the list was refused (403) or the cluster is unreachable.
pub async fn golden_candidates(client: &Client, namespace: &str) -> Result<Vec<GoldenCandidate>> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let list = vms
        .list(&ListParams::default().labels(&format!("!{POOL_LABEL}")))
        .await
        .map_err(|e| {
            Error::kube(
                format!("list VirtualMachines in namespace \"{namespace}\""),
                e,
            )
        })?;
    let mut candidates: Vec<GoldenCandidate> = list
        .items
        .iter()
        .map(|vm| {
            let power = vm.printable_status().to_owned();
            GoldenCandidate {
                name: vm.name_any(),
                running: power != "Stopped",
                problems: golden_problems(vm, namespace, true)
                    .into_iter()
                    .map(|p| format!("{} — {}", p.cause, p.fix))
                    .collect(),
                power,
            }
        })
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(candidates)
}
