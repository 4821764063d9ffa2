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
//!
//! The parts: [`shapes`] are the narrow API objects, [`permits`] what the KubeVirt CR permits;
//! this file turns them into the snapshot.

mod permits;
mod shapes;

pub use permits::Permits;
pub use shapes::{
    Container, DeviceEntry, Devices, Domain, KubeVirtConfiguration, KubeVirtObject, KubeVirtSpec,
    Meta, MigrationState, NodeObject, NodeSpec, NodeStatus, Permit, PermittedHostDevices,
    PodObject, PodSpec, PodStatus, Resources, Taint, VmiObject, VmiSpec, VmiStatus,
};

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

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
