//! The cluster as admission sees it: narrow shapes of the API objects it reads (only the
//! fields it uses; everything else is skipped while parsing), and [`ClusterDevices`], the
//! snapshot the arithmetic works on. Building the snapshot is pure, so the rules about what
//! counts as held are unit-tested without a cluster.
//!
//! What counts as held on a node (REFERENCE "Host-device capacity"; Kubernetes' scheduler
//! counts every pod bound to a node that is not in a terminal phase, `pkg/scheduler/framework`
//! `NodeInfo`; KubeVirt puts one unit per `gpus[]` / `hostDevices[]` entry into the launcher
//! pod's `compute` container, `pkg/virt-controller/services/template.go`, `requestResource`):
//! - each virt-launcher pod (label `kubevirt.io=virt-launcher`) bound to the node
//!   (`spec.nodeName`) whose `status.phase` is neither `Succeeded` nor `Failed`, with the
//!   limits (else requests) of its `compute` container; a live-migration target pod is such a
//!   pod, so it counts on its node while the source pod still counts on its own;
//! - where no launcher pod of a VMI is visible (label `kubevirt.io/created-by=<VMI uid>`), the
//!   `deviceName` entries of the VMI itself, when it has `status.nodeName` and its phase is
//!   neither `Succeeded` nor `Failed`.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::model::{DeviceClass, PermittedDevice};

/// Label of every virt-launcher pod: `kubevirt.io=virt-launcher` (KubeVirt `v1.AppLabel`).
pub const LAUNCHER_LABEL: &str = "kubevirt.io";
/// Value of [`LAUNCHER_LABEL`] on virt-launcher pods.
pub const LAUNCHER_VALUE: &str = "virt-launcher";
/// Label naming the VMI (its UID) a launcher pod runs (KubeVirt `v1.CreatedByLabel`).
pub const CREATED_BY_LABEL: &str = "kubevirt.io/created-by";
/// Label of a live-migration target pod (KubeVirt `v1.MigrationJobLabel`).
pub const MIGRATION_JOB_LABEL: &str = "kubevirt.io/migrationJobUID";
/// The node label virt-handler sets to `"true"` where it runs and takes VMs; KubeVirt adds it
/// to every launcher pod's nodeSelector (`v1.NodeSchedulable`).
pub const SCHEDULABLE_LABEL: &str = "kubevirt.io/schedulable";

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

/// What the KubeVirt CR says about device permits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permits {
    /// The permitted resources (`permittedHostDevices` is set; it may list none).
    Listed(Vec<PermittedDevice>),
    /// `permittedHostDevices` is not set: KubeVirt checks no permit (a resource then comes
    /// from a device plugin outside KubeVirt, if from anywhere).
    Unchecked,
    /// No KubeVirt CR exists.
    Missing,
    /// The KubeVirt CR could not be read: why.
    Unknown(String),
}

impl Permits {
    /// Reads the permits of the first KubeVirt CR (a cluster has one).
    pub fn from_crs(crs: &[KubeVirtObject]) -> Permits {
        let Some(cr) = crs.first() else {
            return Permits::Missing;
        };
        let Some(permitted) = &cr.spec.configuration.permitted_host_devices else {
            return Permits::Unchecked;
        };
        let mut listed = Vec::new();
        let lists = [
            (&permitted.pci_host_devices, DeviceClass::PciPassthrough),
            (&permitted.mediated_devices, DeviceClass::Mediated),
            (&permitted.usb, DeviceClass::Usb),
        ];
        for (entries, class) in lists {
            for entry in entries.iter().filter(|e| !e.resource_name.is_empty()) {
                let selector = match class {
                    DeviceClass::PciPassthrough => Some(entry.pci_vendor_selector.clone()),
                    DeviceClass::Mediated => Some(entry.mdev_name_selector.clone()),
                    _ => (!entry.selectors.is_empty())
                        .then(|| Value::Array(entry.selectors.clone()).to_string()),
                }
                .filter(|s| !s.is_empty());
                listed.push(PermittedDevice {
                    resource: entry.resource_name.clone(),
                    class: if entry.external_resource_provider {
                        DeviceClass::External
                    } else {
                        class
                    },
                    selector,
                });
            }
        }
        Permits::Listed(listed)
    }

    /// How KubeVirt hands `resource` out: the class of its permit (an external provider wins
    /// when several entries name it); `NotPermitted` when the list does not name it or there
    /// is no KubeVirt CR; `External` when permits are not checked; `Unknown` when unreadable.
    pub fn class_of(&self, resource: &str) -> DeviceClass {
        match self {
            Permits::Listed(listed) => listed
                .iter()
                .filter(|p| p.resource == resource)
                .map(|p| p.class)
                .min_by_key(|class| (*class != DeviceClass::External, *class))
                .unwrap_or(DeviceClass::NotPermitted),
            Permits::Unchecked => DeviceClass::External,
            Permits::Missing => DeviceClass::NotPermitted,
            Permits::Unknown(_) => DeviceClass::Unknown,
        }
    }

    /// The permitted resources (empty unless [`Permits::Listed`]).
    pub fn listed(&self) -> &[PermittedDevice] {
        match self {
            Permits::Listed(listed) => listed,
            _ => &[],
        }
    }
}

/// A count from a Kubernetes quantity (`"4"`, `4`, `"2k"`, `"1Ki"`); `None` when it is not a
/// whole, non-negative number. Extended resources are whole numbers; counts above `u32::MAX`
/// are capped.
pub fn parse_count(quantity: &Value) -> Option<u32> {
    let text = match quantity {
        Value::Number(n) => return n.as_u64().map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "m" => 1e-3,
        _ => return None,
    };
    let value = number.parse::<f64>().ok()? * multiplier;
    if !value.is_finite() || value < 0.0 || value.fract() != 0.0 {
        return None;
    }
    Some(if value >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        value as u32
    })
}

/// Whether `resource` is an extended resource that can be a device: a name with a domain
/// (`vendor.com/thing`) outside Kubernetes' own (`kubernetes.io`, `*.kubernetes.io`) and
/// KubeVirt's node devices (`devices.kubevirt.io/kvm`, `tun`, `vhost-net`, `sev`, which
/// every launcher pod asks for).
pub fn is_device_resource(resource: &str) -> bool {
    let Some((domain, _)) = resource.split_once('/') else {
        return false;
    };
    !(domain == "kubernetes.io"
        || domain.ends_with(".kubernetes.io")
        || domain == "devices.kubevirt.io"
        || domain.starts_with("requests.")
        || domain.starts_with("limits."))
}

/// Resource name → count, for names with a domain whose quantity is a whole number.
fn counts_of(map: &BTreeMap<String, Value>) -> BTreeMap<String, u32> {
    map.iter()
        .filter(|(name, _)| name.contains('/'))
        .filter_map(|(name, q)| parse_count(q).map(|n| (name.clone(), n)))
        .collect()
}

/// One node, as admission sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeDevices {
    /// Node name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its taints (all effects).
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.capacity`, extended resources only.
    pub capacity: BTreeMap<String, u32>,
    /// `status.allocatable`, extended resources only.
    pub allocatable: BTreeMap<String, u32>,
}

/// Devices one VM holds on one node: through a launcher pod, or (none visible) its VMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The node.
    pub node: String,
    /// Namespace of the VMI.
    pub namespace: String,
    /// The VMI (and VM) name.
    pub vm: String,
    /// Extended resource → count held.
    pub resources: BTreeMap<String, u32>,
    /// The launcher pod; `None` when counted from the VMI.
    pub pod: Option<String>,
    /// Whether the pod is a live-migration target.
    pub migration_target: bool,
}

/// Everything admission needs to know about the cluster's devices, read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDevices {
    /// The KubeVirt CR's permits.
    pub permits: Permits,
    /// Every node, sorted by name.
    pub nodes: Vec<NodeDevices>,
    /// What is held, pod by pod (or VMI by VMI).
    pub holds: Vec<Hold>,
    /// What could not be read, as sentences for the result's notes.
    pub notes: Vec<String>,
}

/// The VMI name of a launcher pod named `virt-launcher-<vmi>-<suffix>` (KubeVirt names them
/// so), else the pod's name.
fn vmi_of_pod_name(pod: &str) -> String {
    pod.strip_prefix("virt-launcher-")
        .and_then(|rest| rest.rsplit_once('-'))
        .map_or_else(|| pod.to_owned(), |(vmi, _)| vmi.to_owned())
}

/// Whether a pod or VMI phase is terminal: it holds nothing any more.
fn finished(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

impl ClusterDevices {
    /// Builds the snapshot from what was read. `kubevirts`, `pods` and `vmis` are `Err(why)`
    /// when the list could not be read (RBAC): permits are then unknown, and held devices are
    /// counted from what could be read, each gap said in [`ClusterDevices::notes`].
    pub fn from_objects(
        kubevirts: Result<Vec<KubeVirtObject>, String>,
        nodes: Vec<NodeObject>,
        pods: Result<Vec<PodObject>, String>,
        vmis: Result<Vec<VmiObject>, String>,
    ) -> ClusterDevices {
        let mut notes = Vec::new();
        let permits = match kubevirts {
            Ok(crs) => {
                let permits = Permits::from_crs(&crs);
                match permits {
                    Permits::Missing => notes.push(
                        "no KubeVirt CR was found, so no device is permitted (is KubeVirt \
                         installed?)"
                            .to_owned(),
                    ),
                    Permits::Unchecked => notes.push(
                        "the KubeVirt CR sets no spec.configuration.permittedHostDevices, so \
                         KubeVirt checks no permit: every device resource is taken to come from \
                         a device plugin outside KubeVirt"
                            .to_owned(),
                    ),
                    _ => {}
                }
                permits
            }
            Err(why) => {
                notes.push(format!(
                    "the KubeVirt CR could not be read ({why}), so whether each device is \
                     permitted is unknown"
                ));
                Permits::Unknown(why)
            }
        };

        let mut nodes: Vec<NodeDevices> = nodes
            .into_iter()
            .map(|n| NodeDevices {
                name: n.metadata.name,
                labels: n.metadata.labels,
                taints: n.spec.taints,
                unschedulable: n.spec.unschedulable,
                capacity: counts_of(&n.status.capacity),
                allocatable: counts_of(&n.status.allocatable),
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));

        let vmis = match vmis {
            Ok(vmis) => Some(vmis),
            Err(why) => {
                notes.push(format!(
                    "VirtualMachineInstances could not be listed ({why}): devices of a VMI \
                     without a visible launcher pod are not counted"
                ));
                None
            }
        };
        let vmi_by_uid: HashMap<&str, &VmiObject> = vmis
            .iter()
            .flatten()
            .filter(|v| !v.metadata.uid.is_empty())
            .map(|v| (v.metadata.uid.as_str(), v))
            .collect();

        let mut holds = Vec::new();
        let mut covered: HashSet<String> = HashSet::new();
        match pods {
            Ok(pods) => {
                for pod in pods {
                    if pod.metadata.labels.get(LAUNCHER_LABEL).map(String::as_str)
                        != Some(LAUNCHER_VALUE)
                    {
                        continue;
                    }
                    let created_by = pod.metadata.labels.get(CREATED_BY_LABEL).cloned();
                    if let Some(uid) = &created_by {
                        covered.insert(uid.clone());
                    }
                    if pod.spec.node_name.is_empty() || finished(&pod.status.phase) {
                        continue;
                    }
                    let resources = launcher_resources(&pod.spec.containers);
                    if resources.is_empty() {
                        continue;
                    }
                    let vmi = created_by.as_deref().and_then(|uid| vmi_by_uid.get(uid));
                    let vm = vmi.map_or_else(
                        || {
                            pod.metadata
                                .labels
                                .get("vm.kubevirt.io/name")
                                .cloned()
                                .unwrap_or_else(|| vmi_of_pod_name(&pod.metadata.name))
                        },
                        |v| v.metadata.name.clone(),
                    );
                    let migration_target = pod.metadata.labels.contains_key(MIGRATION_JOB_LABEL)
                        || vmi.is_some_and(|v| {
                            let state = &v.status.migration_state;
                            state.target_pod == pod.metadata.name && !state.completed
                        });
                    holds.push(Hold {
                        node: pod.spec.node_name,
                        namespace: pod.metadata.namespace,
                        vm,
                        resources,
                        pod: Some(pod.metadata.name),
                        migration_target,
                    });
                }
            }
            Err(why) => notes.push(format!(
                "virt-launcher pods could not be listed ({why}): what each node holds is \
                 counted from the VMIs' devices and nodes"
            )),
        }
        for vmi in vmis.iter().flatten() {
            if vmi.status.node_name.is_empty()
                || finished(&vmi.status.phase)
                || covered.contains(&vmi.metadata.uid)
            {
                continue;
            }
            let resources = vmi.spec.domain.devices.counts();
            if resources.is_empty() {
                continue;
            }
            holds.push(Hold {
                node: vmi.status.node_name.clone(),
                namespace: vmi.metadata.namespace.clone(),
                vm: vmi.metadata.name.clone(),
                resources,
                pod: None,
                migration_target: false,
            });
        }
        ClusterDevices {
            permits,
            nodes,
            holds,
            notes,
        }
    }

    /// Node → resource → count held, leaving out the holds of `except` (namespace, VM).
    pub fn held_by_node(&self, except: Option<(&str, &str)>) -> HashMap<&str, BTreeMap<&str, u32>> {
        let mut held: HashMap<&str, BTreeMap<&str, u32>> = HashMap::new();
        for hold in &self.holds {
            if except == Some((hold.namespace.as_str(), hold.vm.as_str())) {
                continue;
            }
            let node = held.entry(hold.node.as_str()).or_default();
            for (resource, count) in &hold.resources {
                let slot = node.entry(resource.as_str()).or_insert(0);
                *slot = slot.saturating_add(*count);
            }
        }
        held
    }
}

/// The extended resources a launcher pod holds: its `compute` container's limits (requests
/// where a limit is missing); a pod without a `compute` container counts all its containers.
fn launcher_resources(containers: &[Container]) -> BTreeMap<String, u32> {
    let compute: Vec<&Container> = match containers.iter().find(|c| c.name == "compute") {
        Some(c) => vec![c],
        None => containers.iter().collect(),
    };
    let mut out = BTreeMap::new();
    for container in compute {
        let mut counts = counts_of(&container.resources.requests);
        counts.extend(counts_of(&container.resources.limits));
        for (resource, count) in counts {
            let slot = out.entry(resource).or_insert(0u32);
            *slot = slot.saturating_add(count);
        }
    }
    out.retain(|_, count| *count > 0);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quantities_parse_as_whole_counts() {
        assert_eq!(parse_count(&json!("4")), Some(4));
        assert_eq!(parse_count(&json!(6)), Some(6));
        assert_eq!(parse_count(&json!("2k")), Some(2000));
        assert_eq!(parse_count(&json!("1Ki")), Some(1024));
        assert_eq!(parse_count(&json!("3000m")), Some(3));
        assert_eq!(parse_count(&json!("1500m")), None);
        assert_eq!(parse_count(&json!("-1")), None);
        assert_eq!(parse_count(&json!("lots")), None);
        assert_eq!(parse_count(&json!(null)), None);
    }

    #[test]
    fn device_resources_are_extended_resources_outside_kubernetes_and_kubevirt_nodes() {
        assert!(is_device_resource("nvidia.com/TU104GL_Tesla_T4"));
        assert!(is_device_resource("intel.com/sriov_netdevice"));
        assert!(!is_device_resource("cpu"));
        assert!(!is_device_resource("hugepages-2Mi"));
        assert!(!is_device_resource("devices.kubevirt.io/kvm"));
        assert!(!is_device_resource("kubernetes.io/batch"));
        assert!(!is_device_resource("example.kubernetes.io/thing"));
    }

    fn kubevirt(permitted: Value) -> Vec<KubeVirtObject> {
        vec![
            serde_json::from_value(json!({
                "metadata": { "name": "kubevirt", "namespace": "kubevirt" },
                "spec": { "configuration": { "permittedHostDevices": permitted } }
            }))
            .unwrap(),
        ]
    }

    #[test]
    fn permits_classify_each_resource() {
        let permits = Permits::from_crs(&kubevirt(json!({
            "pciHostDevices": [
                { "pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/T4" },
                { "pciVendorSelector": "10DE:2236", "resourceName": "nvidia.com/A10",
                  "externalResourceProvider": true },
            ],
            "mediatedDevices": [{ "mdevNameSelector": "GRID T4-1Q", "resourceName": "nvidia.com/GRID_T4-1Q" }],
            "usb": [{ "resourceName": "kubevirt.io/storage", "selectors": [{ "vendor": "46f4", "product": "0001" }] }],
        })));
        assert_eq!(
            permits.class_of("nvidia.com/T4"),
            DeviceClass::PciPassthrough
        );
        assert_eq!(permits.class_of("nvidia.com/A10"), DeviceClass::External);
        assert_eq!(
            permits.class_of("nvidia.com/GRID_T4-1Q"),
            DeviceClass::Mediated
        );
        assert_eq!(permits.class_of("kubevirt.io/storage"), DeviceClass::Usb);
        assert_eq!(
            permits.class_of("nvidia.com/V100"),
            DeviceClass::NotPermitted
        );
        assert_eq!(
            permits.listed()[0].selector.as_deref(),
            Some("10DE:1EB8"),
            "{permits:?}"
        );

        let unset: Vec<KubeVirtObject> =
            vec![serde_json::from_value(json!({ "spec": { "configuration": {} } })).unwrap()];
        assert_eq!(
            Permits::from_crs(&unset).class_of("x.com/y"),
            DeviceClass::External
        );
        assert_eq!(
            Permits::from_crs(&[]).class_of("x.com/y"),
            DeviceClass::NotPermitted
        );
        assert_eq!(
            Permits::Unknown("forbidden".into()).class_of("x.com/y"),
            DeviceClass::Unknown
        );
    }

    fn pod(name: &str, uid: &str, node: &str, phase: &str, gpus: u32, extra: Value) -> PodObject {
        let mut labels = json!({ LAUNCHER_LABEL: LAUNCHER_VALUE, CREATED_BY_LABEL: uid });
        if let (Some(labels), Some(extra)) = (labels.as_object_mut(), extra.as_object()) {
            labels.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": "ns", "labels": labels },
            "spec": { "nodeName": node, "containers": [
                { "name": "compute", "resources": {
                    "limits": { "nvidia.com/T4": gpus.to_string(), "devices.kubevirt.io/kvm": "1", "cpu": "2" } } },
                { "name": "guest-console-log", "resources": { "limits": { "nvidia.com/T4": "9" } } },
            ] },
            "status": { "phase": phase },
        }))
        .unwrap()
    }

    fn vmi(name: &str, uid: &str, node: &str, phase: &str, gpus: usize) -> VmiObject {
        let entries: Vec<Value> = (0..gpus)
            .map(|i| json!({ "name": format!("gpu{i}"), "deviceName": "nvidia.com/T4" }))
            .collect();
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": "ns", "uid": uid },
            "spec": { "domain": { "devices": { "gpus": entries } } },
            "status": { "nodeName": node, "phase": phase },
        }))
        .unwrap()
    }

    fn held(devices: &ClusterDevices, node: &str) -> u32 {
        devices
            .held_by_node(None)
            .get(node)
            .and_then(|r| r.get("nvidia.com/T4").copied())
            .unwrap_or(0)
    }

    #[test]
    fn launcher_pods_hold_their_compute_limits_until_they_finish() {
        let pods = vec![
            pod(
                "virt-launcher-a-x1",
                "u1",
                "node-a",
                "Running",
                1,
                json!({}),
            ),
            pod(
                "virt-launcher-b-x2",
                "u2",
                "node-a",
                "Pending",
                2,
                json!({}),
            ),
            pod(
                "virt-launcher-c-x3",
                "u3",
                "node-a",
                "Succeeded",
                1,
                json!({}),
            ),
            pod("virt-launcher-d-x4", "u4", "node-a", "Failed", 1, json!({})),
            pod("virt-launcher-e-x5", "u5", "", "Pending", 1, json!({})),
            // A migration: the source still runs on node-a, the target is already on node-b.
            pod(
                "virt-launcher-m-src",
                "um",
                "node-a",
                "Running",
                1,
                json!({}),
            ),
            pod(
                "virt-launcher-m-dst",
                "um",
                "node-b",
                "Running",
                1,
                json!({ MIGRATION_JOB_LABEL: "job" }),
            ),
        ];
        let devices = ClusterDevices::from_objects(Ok(vec![]), vec![], Ok(pods), Ok(vec![]));
        assert_eq!(held(&devices, "node-a"), 1 + 2 + 1, "{:?}", devices.holds);
        assert_eq!(held(&devices, "node-b"), 1);
        let target = devices
            .holds
            .iter()
            .find(|h| h.pod.as_deref() == Some("virt-launcher-m-dst"))
            .unwrap();
        assert!(target.migration_target);
        assert_eq!(target.vm, "m");
        let kvm = devices
            .holds
            .iter()
            .any(|h| h.resources.contains_key("devices.kubevirt.io/kvm"));
        assert!(kvm, "every extended resource of compute is kept");
        assert!(
            devices
                .holds
                .iter()
                .all(|h| !h.resources.contains_key("cpu")),
            "standard resources are not"
        );
    }

    #[test]
    fn vmis_count_only_where_no_launcher_pod_is_visible() {
        let pods = vec![
            pod(
                "virt-launcher-a-x1",
                "u1",
                "node-a",
                "Running",
                1,
                json!({}),
            ),
            pod(
                "virt-launcher-c-x3",
                "u3",
                "node-a",
                "Succeeded",
                1,
                json!({}),
            ),
        ];
        let vmis = vec![
            vmi("a", "u1", "node-a", "Running", 1), // has its pod: counted once
            vmi("b", "u2", "node-a", "Running", 2), // no pod visible: counted from the VMI
            vmi("c", "u3", "node-a", "Running", 1), // its only pod finished: not counted
            vmi("d", "u4", "", "Pending", 1),       // not scheduled yet
            vmi("e", "u5", "node-a", "Succeeded", 1), // finished
        ];
        let devices = ClusterDevices::from_objects(Ok(vec![]), vec![], Ok(pods), Ok(vmis.clone()));
        assert_eq!(held(&devices, "node-a"), 3, "{:?}", devices.holds);
        let b = devices.holds.iter().find(|h| h.vm == "b").unwrap();
        assert_eq!(b.pod, None);

        // Without the pods (RBAC), every scheduled, unfinished VMI counts, and a note says so.
        let devices =
            ClusterDevices::from_objects(Ok(vec![]), vec![], Err("forbidden".into()), Ok(vmis));
        assert_eq!(held(&devices, "node-a"), 1 + 2 + 1);
        assert!(
            devices.notes[1].contains("virt-launcher pods could not be listed (forbidden)"),
            "{:?}",
            devices.notes
        );
        assert_eq!(
            devices.held_by_node(Some(("ns", "b")))["node-a"]["nvidia.com/T4"],
            2,
            "a VM's own holds can be left out"
        );
    }

    #[test]
    fn nodes_keep_their_extended_resources() {
        let node: NodeObject = serde_json::from_value(json!({
            "metadata": { "name": "node-a", "labels": { SCHEDULABLE_LABEL: "true" } },
            "spec": { "unschedulable": true, "taints": [{ "key": "gpu", "value": "yes", "effect": "NoSchedule" }] },
            "status": { "capacity": { "cpu": "16", "nvidia.com/T4": "6" },
                        "allocatable": { "cpu": "16", "nvidia.com/T4": "4" } },
        }))
        .unwrap();
        let devices = ClusterDevices::from_objects(Ok(vec![]), vec![node], Ok(vec![]), Ok(vec![]));
        let n = &devices.nodes[0];
        assert!(n.unschedulable);
        assert_eq!(n.taints[0].describe(), "gpu=yes:NoSchedule");
        assert_eq!(n.capacity.get("nvidia.com/T4"), Some(&6));
        assert_eq!(n.allocatable.get("nvidia.com/T4"), Some(&4));
        assert!(!n.allocatable.contains_key("cpu"));
        assert!(
            devices.notes[0].contains("no KubeVirt CR"),
            "{:?}",
            devices.notes
        );
    }
}
