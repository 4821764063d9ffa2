//! The emulator's own narrow views of KubeVirt objects: every field kept as JSON, so that the
//! emulator copies specs without knowing them. Deliberately separate from vdi-core's types, so
//! that a mistake in one is not mirrored in the other.

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `kubevirt.io/v1` VirtualMachine.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachine",
    plural = "virtualmachines",
    namespaced,
    status = "Value",
    schema = "disabled"
)]
pub struct VmSpec {
    /// All of `spec`.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// `kubevirt.io/v1` VirtualMachineInstance.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstance",
    plural = "virtualmachineinstances",
    namespaced,
    status = "Value",
    schema = "disabled"
)]
pub struct VmiSpec {
    /// All of `spec`.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// `clone.kubevirt.io/v1beta1` VirtualMachineClone.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default)]
#[kube(
    group = "clone.kubevirt.io",
    version = "v1beta1",
    kind = "VirtualMachineClone",
    plural = "virtualmachineclones",
    namespaced,
    status = "Value",
    schema = "disabled"
)]
pub struct CloneSpec {
    /// All of `spec`.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// The run strategy of a VM spec: `runStrategy`, else the deprecated `running` boolean
/// (`true` → `Always`, `false` → `Halted`), else `Halted`.
pub fn run_strategy(spec: &Map<String, Value>) -> String {
    if let Some(s) = spec.get("runStrategy").and_then(Value::as_str) {
        return s.to_owned();
    }
    match spec.get("running").and_then(Value::as_bool) {
        Some(true) => "Always".to_owned(),
        _ => "Halted".to_owned(),
    }
}
