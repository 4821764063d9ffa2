//! Narrow typed views of the KubeVirt objects Corral VDI reads (kubevirt.io/v1).
//!
//! Only the fields we use are typed; everything else is kept in `other` so that nothing is lost
//! when an object is read. Writes are always patches that touch only fields we own.
//! Field names follow KubeVirt's `staging/src/kubevirt.io/api/core/v1/types.go`.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `VirtualMachine.spec` (kubevirt.io/v1): the fields Corral VDI reads.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachine",
    plural = "virtualmachines",
    namespaced,
    status = "VirtualMachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// `Always`, `RerunOnFailure`, `Manual`, `Halted` or `Once`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// Deprecated boolean form of the run strategy; never combined with `runStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// The VMI template (`metadata` and `spec`), kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    /// Every other field, kept as it came.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `VirtualMachine.status`: the fields Corral VDI reads.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    /// Human-readable power state: `Stopped`, `Provisioning`, `Starting`, `Running`, `Paused`,
    /// `Stopping`, `Terminating`, `CrashLoopBackOff`, `Migrating`, `Unknown`,
    /// `ErrorUnschedulable`, `ErrImagePull`, `ImagePullBackOff`, `ErrorPvcNotFound`,
    /// `DataVolumeError`, `WaitingForVolumeBinding`, `WaitingForReceiver`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    /// Whether the VMI is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Whether a VMI exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// Every other field, kept as it came.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `VirtualMachineInstance.spec` (kubevirt.io/v1): nothing of it is read (the broker keeps a
/// VMI's metadata only: which VMI runs a member now, by its uid); kept as it came.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstance",
    plural = "virtualmachineinstances",
    namespaced,
    schema = "disabled"
)]
pub struct VirtualMachineInstanceSpec {
    /// Every field, kept as it came.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Whether a VM with printableStatus `status` runs or is on its way to running (KubeVirt's
/// `Running`, `Starting`, `Provisioning`, `Migrating`), so that a claim has nothing to start
/// and a warm buffer counts it.
pub fn runs(status: &str) -> bool {
    matches!(
        status,
        "Running" | "Starting" | "Provisioning" | "Migrating"
    )
}

impl VirtualMachine {
    /// `status.printableStatus`, or `Unknown` when the VM has no status yet.
    pub fn printable_status(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.printable_status.as_deref())
            .unwrap_or("Unknown")
    }
}
