//! Narrow shapes of the API objects admission reads — nodes, virt-launcher pods, VMIs and the
//! KubeVirt CR — with only the fields it uses (everything else is skipped while parsing, and a
//! `null` reads as absent).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// `null` in the JSON reads as the default, like an absent field.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// The `metadata` fields admission reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// `name`.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `namespace` (empty for cluster-scoped objects).
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    /// `uid`.
    #[serde(default, deserialize_with = "nullable")]
    pub uid: String,
    /// `labels`.
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
}

/// A Node (core/v1): labels, `spec.unschedulable`, `spec.taints`, `status.capacity` and
/// `status.allocatable`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeObject {
    /// Metadata.
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: Meta,
    /// Spec.
    #[serde(default, deserialize_with = "nullable")]
    pub spec: NodeSpec,
    /// Status.
    #[serde(default, deserialize_with = "nullable")]
    pub status: NodeStatus,
}

/// `Node.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeSpec {
    /// `unschedulable` (`kubectl cordon` sets it).
    #[serde(default, deserialize_with = "nullable")]
    pub unschedulable: bool,
    /// `taints`.
    #[serde(default, deserialize_with = "nullable")]
    pub taints: Vec<Taint>,
}

/// A node taint: `key[=value]:effect`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Taint {
    /// `key`.
    #[serde(default, deserialize_with = "nullable")]
    pub key: String,
    /// `value` (empty when absent).
    #[serde(default, deserialize_with = "nullable")]
    pub value: String,
    /// `effect`: `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[serde(default, deserialize_with = "nullable")]
    pub effect: String,
}

impl Taint {
    /// Whether the scheduler keeps new pods off the node unless they tolerate it: effects
    /// `NoSchedule` and `NoExecute` (`PreferNoSchedule` is only a preference).
    pub fn repels(&self) -> bool {
        matches!(self.effect.as_str(), "NoSchedule" | "NoExecute")
    }

    /// `key[=value]:Effect`, as kubectl writes taints.
    pub fn describe(&self) -> String {
        if self.value.is_empty() {
            format!("{}:{}", self.key, self.effect)
        } else {
            format!("{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// `Node.status`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeStatus {
    /// `capacity`: resource name → quantity.
    #[serde(default, deserialize_with = "nullable")]
    pub capacity: BTreeMap<String, Value>,
    /// `allocatable`: resource name → quantity.
    #[serde(default, deserialize_with = "nullable")]
    pub allocatable: BTreeMap<String, Value>,
}

/// A Pod (core/v1): what a virt-launcher pod holds where.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodObject {
    /// Metadata.
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: Meta,
    /// Spec.
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PodSpec,
    /// Status.
    #[serde(default, deserialize_with = "nullable")]
    pub status: PodStatus,
}

/// `Pod.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// `nodeName`: where the pod is bound (empty while unscheduled).
    #[serde(default, deserialize_with = "nullable")]
    pub node_name: String,
    /// `containers`.
    #[serde(default, deserialize_with = "nullable")]
    pub containers: Vec<Container>,
}

/// A container's name and resources.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Container {
    /// `name` (`compute` in a launcher pod holds the devices).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `resources`.
    #[serde(default, deserialize_with = "nullable")]
    pub resources: Resources,
}

/// `resources.limits` and `resources.requests`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Resources {
    /// `limits`.
    #[serde(default, deserialize_with = "nullable")]
    pub limits: BTreeMap<String, Value>,
    /// `requests`.
    #[serde(default, deserialize_with = "nullable")]
    pub requests: BTreeMap<String, Value>,
}

/// `Pod.status`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodStatus {
    /// `phase`: `Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`.
    #[serde(default, deserialize_with = "nullable")]
    pub phase: String,
}

/// A VirtualMachineInstance (kubevirt.io/v1): its devices, node and phase.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct VmiObject {
    /// Metadata.
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: Meta,
    /// Spec.
    #[serde(default, deserialize_with = "nullable")]
    pub spec: VmiSpec,
    /// Status.
    #[serde(default, deserialize_with = "nullable")]
    pub status: VmiStatus,
}

/// `VirtualMachineInstance.spec` (the same shape as a VM's `spec.template.spec`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct VmiSpec {
    /// `domain`.
    #[serde(default, deserialize_with = "nullable")]
    pub domain: Domain,
}

/// `domain`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Domain {
    /// `devices`.
    #[serde(default, deserialize_with = "nullable")]
    pub devices: Devices,
}

/// `domain.devices`: the entries that ask for extended resources.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Devices {
    /// `gpus[]`.
    #[serde(default, deserialize_with = "nullable")]
    pub gpus: Vec<DeviceEntry>,
    /// `hostDevices[]`.
    #[serde(default, deserialize_with = "nullable")]
    pub host_devices: Vec<DeviceEntry>,
}

/// One `gpus[]` or `hostDevices[]` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceEntry {
    /// `name` (the device's name in the VM).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `deviceName`: the extended-resource name; empty for a DRA-claimed device.
    #[serde(default, deserialize_with = "nullable")]
    pub device_name: String,
}

impl Devices {
    /// Resource name → how many entries name it (`gpus[]` and `hostDevices[]` together);
    /// entries without a `deviceName` (DRA claims) are left out.
    pub fn counts(&self) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for entry in self.gpus.iter().chain(&self.host_devices) {
            if !entry.device_name.is_empty() {
                *counts.entry(entry.device_name.clone()).or_insert(0u32) += 1;
            }
        }
        counts
    }
}

/// `VirtualMachineInstance.status`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiStatus {
    /// `nodeName`: where the VMI runs (empty before it is scheduled).
    #[serde(default, deserialize_with = "nullable")]
    pub node_name: String,
    /// `phase`: `Pending`, `Scheduling`, `Scheduled`, `Running`, `Succeeded`, `Failed`, ….
    #[serde(default, deserialize_with = "nullable")]
    pub phase: String,
    /// `migrationState`, during and after a live migration.
    #[serde(default, deserialize_with = "nullable")]
    pub migration_state: MigrationState,
}

/// `VirtualMachineInstance.status.migrationState`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationState {
    /// `targetPod`: the launcher pod the VMI migrates to.
    #[serde(default, deserialize_with = "nullable")]
    pub target_pod: String,
    /// `completed`.
    #[serde(default, deserialize_with = "nullable")]
    pub completed: bool,
}

/// The KubeVirt CR (kubevirt.io/v1 `KubeVirt`): its permitted host devices.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct KubeVirtObject {
    /// Metadata.
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: Meta,
    /// Spec.
    #[serde(default, deserialize_with = "nullable")]
    pub spec: KubeVirtSpec,
}

/// `KubeVirt.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct KubeVirtSpec {
    /// `configuration`.
    #[serde(default, deserialize_with = "nullable")]
    pub configuration: KubeVirtConfiguration,
}

/// `KubeVirt.spec.configuration`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtConfiguration {
    /// `permittedHostDevices`; absent means KubeVirt checks no permit.
    #[serde(default)]
    pub permitted_host_devices: Option<PermittedHostDevices>,
}

/// `permittedHostDevices`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermittedHostDevices {
    /// `pciHostDevices[]`.
    #[serde(default, deserialize_with = "nullable")]
    pub pci_host_devices: Vec<Permit>,
    /// `mediatedDevices[]`.
    #[serde(default, deserialize_with = "nullable")]
    pub mediated_devices: Vec<Permit>,
    /// `usb[]`.
    #[serde(default, deserialize_with = "nullable")]
    pub usb: Vec<Permit>,
}

/// One permitted device entry (any of the three lists).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit {
    /// `resourceName`: the extended-resource name VMs ask for.
    #[serde(default, deserialize_with = "nullable")]
    pub resource_name: String,
    /// `pciVendorSelector` (`pciHostDevices`), e.g. `10DE:1EB8`.
    #[serde(default, deserialize_with = "nullable")]
    pub pci_vendor_selector: String,
    /// `mdevNameSelector` (`mediatedDevices`), e.g. `GRID T4-1Q`.
    #[serde(default, deserialize_with = "nullable")]
    pub mdev_name_selector: String,
    /// `selectors` (`usb`), kept as written.
    #[serde(default, deserialize_with = "nullable")]
    pub selectors: Vec<Value>,
    /// `externalResourceProvider`: a device plugin outside KubeVirt advertises it.
    #[serde(default, deserialize_with = "nullable")]
    pub external_resource_provider: bool,
}
