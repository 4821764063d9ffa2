//! What capacity admission shows, ready to show: the per-node plan of a request
//! ([`CapacityPlan`]) and the cluster's devices with who holds them ([`ClusterCapacity`]), each
//! with its words. Built by `plan.rs`, worded by `text.rs`; the UI derives nothing itself.
//! TypeScript bindings are generated from them with specta (`specta::Type`), through the
//! app's command list (src-tauri/src/bindings.rs), into `ui/src/bindings/index.ts`.

use serde::Serialize;

/// How KubeVirt hands a device resource (an extended resource name such as
/// `nvidia.com/GA102GL_A10`) to VMs, read from the KubeVirt CR's
/// `spec.configuration.permittedHostDevices` (REFERENCE "Host-device capacity"; KubeVirt
/// `staging/src/kubevirt.io/api/core/v1/types.go`, `PermittedHostDevices`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum DeviceClass {
    /// A `pciHostDevices` entry, advertised by KubeVirt's own device plugin: a whole PCI device
    /// (a GPU) passed through to one VM at a time, so a pool of N needs N of them.
    PciPassthrough,
    /// A `mediatedDevices` entry: a mediated device (a vGPU profile such as `GRID T4-1Q`).
    /// Several VMs share one card, up to the profile's limit, which the node reports as the
    /// resource's allocatable count.
    Mediated,
    /// A `usb` entry: a USB device of the node passed through to one VM.
    Usb,
    /// An entry with `externalResourceProvider: true`: a device plugin outside KubeVirt (an
    /// NVIDIA vGPU or SR-IOV plugin) advertises the resource. Also what every resource is when
    /// the KubeVirt CR sets no `permittedHostDevices` at all, since KubeVirt then checks no
    /// permit.
    External,
    /// Not listed, while `permittedHostDevices` is set: KubeVirt refuses to render the launcher
    /// pod of a VM asking for it ("… is not permitted in permittedHostDevices configuration"),
    /// so such a VM never starts.
    NotPermitted,
    /// The KubeVirt CR could not be read (RBAC), so the class is not known.
    Unknown,
}

impl DeviceClass {
    /// The class as the CLI and the app print it.
    pub fn label(self) -> &'static str {
        match self {
            DeviceClass::PciPassthrough => "PCI passthrough",
            DeviceClass::Mediated => "mediated (vGPU)",
            DeviceClass::Usb => "USB",
            DeviceClass::External => "external device plugin",
            DeviceClass::NotPermitted => "not permitted",
            DeviceClass::Unknown => "unknown",
        }
    }
}

/// One device resource a VM asks for: the `deviceName`s of its
/// `spec.template.spec.domain.devices.gpus[]` and `.hostDevices[]` entries, counted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct DeviceNeed {
    /// The extended-resource name (`deviceName`), e.g. `nvidia.com/TU104GL_Tesla_T4`.
    pub resource: String,
    /// How many of it one VM needs: one per entry naming it.
    pub per_vm: u32,
    /// How KubeVirt hands it out.
    pub class: DeviceClass,
    /// The class as the CLI and the app print it ([`DeviceClass::label`]).
    pub class_label: String,
    /// The entries asking for it, as `gpus/<name>` or `hostDevices/<name>`.
    pub entries: Vec<String>,
}

/// One device resource on one node, for one VM's needs: the rows of the per-node table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NodeDeviceRow {
    /// The extended-resource name.
    pub resource: String,
    /// How KubeVirt hands it out.
    pub class: DeviceClass,
    /// The class as the CLI and the app print it ([`DeviceClass::label`]).
    pub class_label: String,
    /// The node's `status.capacity[resource]` (devices present), if it reports the resource.
    pub capacity: Option<u32>,
    /// The node's `status.allocatable[resource]` (devices the scheduler may hand out); 0 when
    /// the node does not report the resource.
    pub allocatable: u32,
    /// Devices held on the node now: launcher pods that are not Succeeded or Failed (migration
    /// targets included), or, without a visible launcher pod, running VMIs placed there.
    pub held: u32,
    /// `allocatable - held`, never below 0.
    pub free: u32,
    /// How many one VM needs.
    pub per_vm: u32,
    /// How many the whole request needs: `per_vm` × the number of VMs asked for.
    pub needed: u32,
}

/// One node in a capacity plan: its rows, whether the VM may be scheduled there, and how many
/// whole VMs it can hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NodePlan {
    /// Node name.
    pub node: String,
    /// Why the VM cannot be scheduled on this node (cordoned, an untolerated taint, a
    /// nodeSelector or required node affinity that does not match); `null` when it can.
    pub excluded: Option<String>,
    /// One row per resource the VM needs.
    pub rows: Vec<NodeDeviceRow>,
    /// Whole VMs this node can hold now, all of each VM's devices on it (0 when excluded).
    pub fits: u32,
    /// How many of the VMs asked for the plan puts on this node.
    pub planned: u32,
}

/// Whether `size` VMs like one golden VM (or one pool member) can be placed now, node by node
/// (SPEC "GPU and host-device capacity admission"). A check, not a reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct CapacityPlan {
    /// Namespace of the VM.
    pub namespace: String,
    /// The VM whose devices are counted (the golden VM of a pool, or the member to start).
    pub vm: String,
    /// How many VMs like it are asked for.
    pub size: u32,
    /// What one VM asks for; empty when it asks for no device (then nothing is read from the
    /// cluster and it is admitted).
    pub needs: Vec<DeviceNeed>,
    /// Every node, sorted by name; empty when `needs` is.
    pub nodes: Vec<NodePlan>,
    /// How many such VMs the schedulable nodes can hold now (the sum of each node's whole-VM
    /// count; exact for identical VMs, see [`crate::capacity`]).
    pub placeable: u32,
    /// `min(placeable, size)`: how many of the VMs asked for fit.
    pub fits: u32,
    /// Whether at least one such VM can start now.
    pub fits_one: bool,
    /// Whether all `size` fit and every resource is permitted.
    pub admitted: bool,
    /// Resources the VM asks for that the KubeVirt CR does not permit.
    pub not_permitted: Vec<String>,
    /// What the numbers could not take into account (a list RBAC refused, an affinity term
    /// that is not a plain label match), each as a sentence.
    pub notes: Vec<String>,
    /// The plan in words, as the CLI and the app say it.
    pub words: PlanWords,
}

/// A capacity plan in words: the sentences the CLI prints and the app shows, written once
/// (`crate::capacity::plan_words`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PlanWords {
    /// What each VM asks for, with how KubeVirt hands each device out: `each VM needs 1
    /// nvidia.com/T4 (PCI passthrough), all on one node`; that it asks for none, else.
    pub needs: String,
    /// Whether the request fits: `fits: all 3 you ask for can be placed (room for 3 such VMs
    /// now: node-a 3)`, `does not fit: fits 3 of the 4 you ask for (…)`, or why none can start.
    pub verdict: String,
    /// What to do when the request does not fit (a pool create would be refused); `null` when
    /// it fits.
    pub fix: Option<String>,
    /// That admission is a check, not a reservation (SPEC: "say so").
    pub caveat: String,
}

/// A resource the KubeVirt CR permits (`spec.configuration.permittedHostDevices`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PermittedDevice {
    /// The extended-resource name (`resourceName`).
    pub resource: String,
    /// Its class.
    pub class: DeviceClass,
    /// What selects the devices: `pciVendorSelector` (`10DE:1EB8`), `mdevNameSelector`
    /// (`GRID T4-1Q`) or the USB selectors, as written.
    pub selector: Option<String>,
}

/// Who holds devices on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct DeviceHolder {
    /// Namespace of the VM.
    pub namespace: String,
    /// The VM (its VMI's name).
    pub vm: String,
    /// The pool the VM belongs to (its `corral.dev/vdi-pool` label), if any and readable.
    pub pool: Option<String>,
    /// How many of the resource it holds.
    pub count: u32,
    /// The virt-launcher pod that holds them; `null` when counted from the VMI (no launcher
    /// pod visible).
    pub pod: Option<String>,
    /// Whether the pod is a live-migration target (it holds devices on its node while the
    /// source still holds its own).
    pub migration_target: bool,
}

/// One device resource on one node, cluster-wide: what is there and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NodeResource {
    /// The extended-resource name.
    pub resource: String,
    /// How KubeVirt hands it out.
    pub class: DeviceClass,
    /// `status.capacity[resource]`, if reported.
    pub capacity: Option<u32>,
    /// `status.allocatable[resource]` (0 when not reported).
    pub allocatable: u32,
    /// Held now (see [`NodeDeviceRow::held`]).
    pub held: u32,
    /// `allocatable - held`, never below 0.
    pub free: u32,
    /// Who holds them, largest first.
    pub holders: Vec<DeviceHolder>,
    /// The class as the CLI and the app print it ([`DeviceClass::label`]).
    pub class_label: String,
    /// Who holds them, in words: `ns/desk-1 (pool sec) ×2 [migration target]`, `nobody`.
    pub holders_text: String,
}

/// One node's devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    /// Node name.
    pub node: String,
    /// `spec.unschedulable`: nothing new is scheduled there.
    pub cordoned: bool,
    /// Taints with effect `NoSchedule` or `NoExecute`, as `key[=value]:Effect`.
    pub taints: Vec<String>,
    /// Whether the node carries `kubevirt.io/schedulable=true` (virt-handler runs there and
    /// takes VMs).
    pub kubevirt_schedulable: bool,
    /// Its device resources (permitted ones, and other extended resources it reports or that
    /// are held there), sorted by name; nodes without any have none.
    pub resources: Vec<NodeResource>,
    /// Why nothing new is scheduled there (`cordoned, not kubevirt.io/schedulable, taint
    /// gpu=reserved:NoSchedule`); `null` when VMs may be.
    pub condition: Option<String>,
}

/// The cluster's devices, node by node, and who holds them: the Capacity view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ClusterCapacity {
    /// Every node, sorted by name.
    pub nodes: Vec<NodeCapacity>,
    /// What the KubeVirt CR permits; empty when it permits nothing or could not be read.
    pub permitted: Vec<PermittedDevice>,
    /// What the numbers could not take into account, each as a sentence.
    pub notes: Vec<String>,
    /// Each device resource summed over the nodes that report it, sorted by name.
    pub totals: Vec<ResourceTotal>,
    /// Why there is nothing to show, a sentence (`The cluster reports no nodes.`, `None of the 3
    /// nodes reports a GPU or host device.`); `null` when some node has a device resource.
    pub empty: Option<String>,
    /// The nodes without any device resource, in words (`without devices: n1, n2`); `null`
    /// when there are none.
    pub without_devices: Option<String>,
}

/// One device resource summed over the nodes that report it (the Capacity view's totals).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ResourceTotal {
    /// The extended-resource name.
    pub resource: String,
    /// The class as the CLI and the app print it ([`DeviceClass::label`]).
    pub class_label: String,
    /// Allocatable on all nodes.
    pub allocatable: u32,
    /// Held on all nodes.
    pub held: u32,
    /// Free on all nodes.
    pub free: u32,
    /// How many nodes report it.
    pub nodes: u32,
    /// In words: `3 free of 6 on 2 nodes`.
    pub text: String,
}
