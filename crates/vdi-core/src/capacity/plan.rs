//! The arithmetic: what one VM asks for ([`Demand`]), how many such VMs the nodes can hold
//! ([`plan`]), and every node's devices with who holds them ([`cluster_view`]). Pure: no
//! request, no clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use serde_json::Value;

use super::objects::{ClusterDevices, Devices, SCHEDULABLE_LABEL, is_device_resource};
use super::rules::PlacementRules;
use super::text::{
    cluster_empty, holders_text, node_condition, plan_words, total_text, without_devices,
};
use super::view::{
    CapacityPlan, ClusterCapacity, DeviceClass, DeviceHolder, DeviceNeed, NodeCapacity,
    NodeDeviceRow, NodePlan, NodeResource, PlanWords, ResourceTotal,
};
use crate::resources::VirtualMachine;

/// One resource a VM asks for, before it is classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The extended-resource name (`deviceName`).
    pub resource: String,
    /// How many one VM needs (one per entry).
    pub per_vm: u32,
    /// The entries, as `gpus/<name>` or `hostDevices/<name>`.
    pub entries: Vec<String>,
}

/// What one VM asks of a node: its devices and where it may be scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// Namespace of the VM.
    pub namespace: String,
    /// The VM's name.
    pub vm: String,
    /// Its device resources, sorted by name.
    pub asked: Vec<Asked>,
    /// Its scheduling rules.
    pub rules: PlacementRules,
    /// Whether devices the VM itself holds now (a member still stopping) are left out of
    /// what is held, since they are freed before it starts again.
    pub ignore_own: bool,
    /// What could not be read from the template.
    pub notes: Vec<String>,
}

impl Demand {
    /// The demand of a VMI spec (a VM's `spec.template.spec`): its `domain.devices.gpus[]`
    /// and `hostDevices[]` counted by `deviceName` (several entries naming one resource count
    /// several; DRA-claimed entries, which have no `deviceName`, are not extended resources
    /// and are left out), and its scheduling rules.
    pub fn from_spec(namespace: &str, vm: &str, spec: &Value) -> Demand {
        let (rules, mut notes) = PlacementRules::from_spec(spec);
        let devices: Devices = match spec.pointer("/domain/devices") {
            None | Some(Value::Null) => Devices::default(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                notes.push(format!(
                    "the devices of VM \"{vm}\" could not be read ({e}); none were counted"
                ));
                Devices::default()
            }),
        };
        let mut asked: BTreeMap<String, Asked> = BTreeMap::new();
        let entries = devices
            .gpus
            .iter()
            .map(|e| ("gpus", e))
            .chain(devices.host_devices.iter().map(|e| ("hostDevices", e)));
        let mut dra = 0;
        for (list, entry) in entries {
            if entry.device_name.is_empty() {
                dra += 1;
                continue;
            }
            let slot = asked
                .entry(entry.device_name.clone())
                .or_insert_with(|| Asked {
                    resource: entry.device_name.clone(),
                    per_vm: 0,
                    entries: Vec::new(),
                });
            slot.per_vm += 1;
            slot.entries.push(format!("{list}/{}", entry.name));
        }
        if dra > 0 {
            notes.push(format!(
                "{dra} device entr{} of VM \"{vm}\" name no deviceName (claimed through DRA): \
                 not extended resources, so not counted",
                if dra == 1 { "y" } else { "ies" }
            ));
        }
        Demand {
            namespace: namespace.to_owned(),
            vm: vm.to_owned(),
            asked: asked.into_values().collect(),
            rules,
            ignore_own: false,
            notes,
        }
    }

    /// The demand of a VirtualMachine: that of its `spec.template.spec`.
    pub fn of_vm(vm: &VirtualMachine) -> Demand {
        let spec = vm
            .spec
            .template
            .as_ref()
            .and_then(|t| t.get("spec"))
            .cloned()
            .unwrap_or(Value::Null);
        let namespace = vm.metadata.namespace.clone().unwrap_or_default();
        let name = vm.metadata.name.clone().unwrap_or_default();
        Demand::from_spec(&namespace, &name, &spec)
    }

    /// Whether the VM asks for any device resource (else there is nothing to admit).
    pub fn asks_for_devices(&self) -> bool {
        !self.asked.is_empty()
    }
}

/// The plan of a VM that asks for no device: admitted, with nothing read.
pub fn plan_without_devices(demand: &Demand, size: u32) -> CapacityPlan {
    worded(CapacityPlan {
        namespace: demand.namespace.clone(),
        vm: demand.vm.clone(),
        size,
        needs: Vec::new(),
        nodes: Vec::new(),
        placeable: size,
        fits: size,
        fits_one: true,
        admitted: true,
        not_permitted: Vec::new(),
        notes: demand.notes.clone(),
        words: PlanWords::default(),
    })
}

/// `plan` with its words ([`plan_words`]), which are said from its numbers.
fn worded(mut plan: CapacityPlan) -> CapacityPlan {
    plan.words = plan_words(&plan);
    plan
}

/// How many VMs like `demand` the cluster can place now, node by node, for a request of
/// `size`.
///
/// Per schedulable node, the whole-VM count is the smallest `free / per_vm` over the VM's
/// resources (all of a VM's devices on one node); `placeable` is their sum over the nodes.
/// Every VM of a pool is a clone of one golden VM, so they are identical and nodes do not
/// share devices: this sum is exact for any number of device types, not an estimate. The
/// `planned` placement puts the VMs one at a time on the node with the most whole VMs left
/// (ties by name), which spreads them as a least-allocated scheduler would; the scheduler may
/// choose other nodes, never more per node than `fits`. A resource that is not permitted
/// makes `fits` 0 and refuses the request whatever the nodes hold.
pub fn plan(devices: &ClusterDevices, demand: &Demand, size: u32) -> CapacityPlan {
    if !demand.asks_for_devices() {
        return plan_without_devices(demand, size);
    }
    let mut notes = demand.notes.clone();
    notes.extend(devices.notes.iter().cloned());
    let needs: Vec<DeviceNeed> = demand
        .asked
        .iter()
        .map(|a| {
            let class = devices.permits.class_of(&a.resource);
            DeviceNeed {
                resource: a.resource.clone(),
                per_vm: a.per_vm,
                class,
                class_label: class.label().to_owned(),
                entries: a.entries.clone(),
            }
        })
        .collect();
    let not_permitted: Vec<String> = needs
        .iter()
        .filter(|n| n.class == DeviceClass::NotPermitted)
        .map(|n| n.resource.clone())
        .collect();

    let own = demand
        .ignore_own
        .then_some((demand.namespace.as_str(), demand.vm.as_str()));
    let held = devices.held_by_node(own);
    let mut unjudged = Vec::new();
    let mut nodes: Vec<NodePlan> = devices
        .nodes
        .iter()
        .map(|node| {
            let verdict = demand.rules.judge(node);
            if verdict.unjudged {
                unjudged.push(node.name.clone());
            }
            let held_here = held.get(node.name.as_str());
            let rows: Vec<NodeDeviceRow> = needs
                .iter()
                .map(|need| {
                    let allocatable = node.allocatable.get(&need.resource).copied().unwrap_or(0);
                    let held = held_here
                        .and_then(|h| h.get(need.resource.as_str()))
                        .copied()
                        .unwrap_or(0);
                    NodeDeviceRow {
                        resource: need.resource.clone(),
                        class: need.class,
                        class_label: need.class_label.clone(),
                        capacity: node.capacity.get(&need.resource).copied(),
                        allocatable,
                        held,
                        free: allocatable.saturating_sub(held),
                        per_vm: need.per_vm,
                        needed: need.per_vm.saturating_mul(size),
                    }
                })
                .collect();
            let excluded = (!verdict.reasons.is_empty()).then(|| verdict.reasons.join("; "));
            let fits = if excluded.is_some() {
                0
            } else {
                rows.iter()
                    .map(|r| r.free / r.per_vm.max(1))
                    .min()
                    .unwrap_or(0)
            };
            NodePlan {
                node: node.name.clone(),
                excluded,
                rows,
                fits,
                planned: 0,
            }
        })
        .collect();
    if !unjudged.is_empty() {
        notes.push(format!(
            "the required node affinity of VM \"{}\" uses Gt, Lt or matchFields, which admission \
             does not judge: {} node{} it might exclude {} counted ({})",
            demand.vm,
            unjudged.len(),
            if unjudged.len() == 1 { "" } else { "s" },
            if unjudged.len() == 1 { "is" } else { "are" },
            unjudged.join(", ")
        ));
    }

    let placeable = nodes.iter().fold(0u32, |sum, n| sum.saturating_add(n.fits));
    let permitted = not_permitted.is_empty();
    let fits = if permitted { placeable.min(size) } else { 0 };
    // One at a time onto the node with the most whole VMs left; ties by name.
    let mut heap: BinaryHeap<(u32, Reverse<usize>)> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.fits > 0)
        .map(|(i, n)| (n.fits, Reverse(i)))
        .collect();
    for _ in 0..fits {
        let Some((left, Reverse(i))) = heap.pop() else {
            break;
        };
        nodes[i].planned += 1;
        if left > 1 {
            heap.push((left - 1, Reverse(i)));
        }
    }
    worded(CapacityPlan {
        namespace: demand.namespace.clone(),
        vm: demand.vm.clone(),
        size,
        needs,
        nodes,
        placeable,
        fits,
        fits_one: permitted && placeable >= 1,
        admitted: permitted && placeable >= size,
        not_permitted,
        notes,
        words: PlanWords::default(),
    })
}

/// Every node's device resources and who holds them (the Capacity view): the resources the
/// KubeVirt CR permits and every other device-like extended resource a node reports or that
/// is held there ([`super::objects::is_device_resource`]). `pools` maps (namespace, VM) to the
/// VM's pool, for the holders.
pub fn cluster_view(
    devices: &ClusterDevices,
    pools: &HashMap<(String, String), String>,
) -> ClusterCapacity {
    let permitted: BTreeSet<&str> = devices
        .permits
        .listed()
        .iter()
        .map(|p| p.resource.as_str())
        .collect();
    let shown = |resource: &str| permitted.contains(resource) || is_device_resource(resource);
    let mut holds_by_node: HashMap<&str, Vec<&super::objects::Hold>> = HashMap::new();
    for hold in &devices.holds {
        holds_by_node
            .entry(hold.node.as_str())
            .or_default()
            .push(hold);
    }
    let nodes = devices
        .nodes
        .iter()
        .map(|node| {
            let holds = holds_by_node.remove(node.name.as_str()).unwrap_or_default();
            let mut names: BTreeSet<&str> = node
                .allocatable
                .keys()
                .chain(node.capacity.keys())
                .map(String::as_str)
                .filter(|r| shown(r))
                .collect();
            for hold in &holds {
                names.extend(
                    hold.resources
                        .keys()
                        .map(String::as_str)
                        .filter(|r| shown(r)),
                );
            }
            let resources = names
                .into_iter()
                .map(|resource| {
                    let mut holders: Vec<DeviceHolder> = holds
                        .iter()
                        .filter_map(|h| {
                            let count = *h.resources.get(resource)?;
                            Some(DeviceHolder {
                                namespace: h.namespace.clone(),
                                vm: h.vm.clone(),
                                pool: pools.get(&(h.namespace.clone(), h.vm.clone())).cloned(),
                                count,
                                pod: h.pod.clone(),
                                migration_target: h.migration_target,
                            })
                        })
                        .collect();
                    holders.sort_by(|a, b| {
                        b.count
                            .cmp(&a.count)
                            .then_with(|| (&a.namespace, &a.vm).cmp(&(&b.namespace, &b.vm)))
                    });
                    let held = holders
                        .iter()
                        .fold(0u32, |sum, h| sum.saturating_add(h.count));
                    let allocatable = node.allocatable.get(resource).copied().unwrap_or(0);
                    let class = devices.permits.class_of(resource);
                    NodeResource {
                        resource: resource.to_owned(),
                        class,
                        capacity: node.capacity.get(resource).copied(),
                        allocatable,
                        held,
                        free: allocatable.saturating_sub(held),
                        class_label: class.label().to_owned(),
                        holders_text: holders_text(&holders),
                        holders,
                    }
                })
                .collect();
            let mut view = NodeCapacity {
                node: node.name.clone(),
                cordoned: node.unschedulable,
                taints: node
                    .taints
                    .iter()
                    .filter(|t| t.repels())
                    .map(|t| t.describe())
                    .collect(),
                kubevirt_schedulable: node.labels.get(SCHEDULABLE_LABEL).map(String::as_str)
                    == Some("true"),
                resources,
                condition: None,
            };
            view.condition = node_condition(&view);
            view
        })
        .collect::<Vec<_>>();
    let mut notes = devices.notes.clone();
    let orphans: usize = holds_by_node.values().map(Vec::len).sum();
    if orphans > 0 {
        notes.push(format!(
            "{orphans} holder{} on nodes that are not listed (deleted nodes?) not shown",
            if orphans == 1 { " is" } else { "s are" }
        ));
    }
    ClusterCapacity {
        totals: resource_totals(&nodes),
        empty: cluster_empty(&nodes),
        without_devices: without_devices(&nodes),
        nodes,
        permitted: devices.permits.listed().to_vec(),
        notes,
    }
}

/// Each device resource summed over the nodes that report it, sorted by name (the class is
/// that of its first node: one resource has one class cluster-wide).
fn resource_totals(nodes: &[NodeCapacity]) -> Vec<ResourceTotal> {
    let mut totals: BTreeMap<&str, ResourceTotal> = BTreeMap::new();
    for resource in nodes.iter().flat_map(|n| &n.resources) {
        let total = totals
            .entry(resource.resource.as_str())
            .or_insert_with(|| ResourceTotal {
                resource: resource.resource.clone(),
                class_label: resource.class_label.clone(),
                allocatable: 0,
                held: 0,
                free: 0,
                nodes: 0,
                text: String::new(),
            });
        total.allocatable = total.allocatable.saturating_add(resource.allocatable);
        total.held = total.held.saturating_add(resource.held);
        total.free = total.free.saturating_add(resource.free);
        total.nodes += 1;
    }
    totals
        .into_values()
        .map(|mut t| {
            t.text = total_text(t.free, t.allocatable, t.nodes);
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::objects::{
        CREATED_BY_LABEL, KubeVirtObject, LAUNCHER_LABEL, LAUNCHER_VALUE, MIGRATION_JOB_LABEL,
        NodeObject, PodObject, VmiObject,
    };
    use super::*;

    const GPU: &str = "nvidia.com/TEST_GPU";
    const NIC: &str = "intel.com/TEST_NIC";

    fn permits(pci: &[&str], mediated: &[&str]) -> Vec<KubeVirtObject> {
        let entry = |r: &&str| json!({ "resourceName": r });
        vec![
            serde_json::from_value(
                json!({ "spec": { "configuration": { "permittedHostDevices": {
                "pciHostDevices": pci.iter().map(entry).collect::<Vec<_>>(),
                "mediatedDevices": mediated.iter().map(entry).collect::<Vec<_>>(),
            } } } }),
            )
            .unwrap(),
        ]
    }

    fn node(name: &str, capacity: Value, allocatable: Value) -> NodeObject {
        serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { SCHEDULABLE_LABEL: "true" } },
            "status": { "capacity": capacity, "allocatable": allocatable },
        }))
        .unwrap()
    }

    fn launcher(name: &str, node: &str, phase: &str, limits: Value, extra: Value) -> PodObject {
        let mut labels =
            json!({ LAUNCHER_LABEL: LAUNCHER_VALUE, CREATED_BY_LABEL: format!("uid-{name}") });
        if let (Some(l), Some(e)) = (labels.as_object_mut(), extra.as_object()) {
            l.extend(e.clone());
        }
        serde_json::from_value(json!({
            "metadata": { "name": format!("virt-launcher-{name}-abcde"), "namespace": "ns", "labels": labels },
            "spec": { "nodeName": node, "containers": [{ "name": "compute", "resources": { "limits": limits } }] },
            "status": { "phase": phase },
        }))
        .unwrap()
    }

    fn vm_spec(devices: Value) -> Value {
        json!({ "domain": { "devices": devices } })
    }

    fn gpus(n: usize, resource: &str) -> Vec<Value> {
        (0..n)
            .map(|i| json!({ "name": format!("gpu{i}"), "deviceName": resource }))
            .collect()
    }

    /// The issue's cluster: node a has 4 allocatable of 6 present, one held by a running VMI;
    /// node b reports 0; node c has no such resource.
    fn issue_cluster() -> ClusterDevices {
        ClusterDevices::from_objects(
            Ok(permits(&[GPU], &[])),
            vec![
                node("node-a", json!({ GPU: "6" }), json!({ GPU: "4" })),
                node("node-b", json!({ GPU: "0" }), json!({ GPU: "0" })),
                node("node-c", json!({}), json!({})),
            ],
            Ok(vec![launcher(
                "busy",
                "node-a",
                "Running",
                json!({ GPU: "1" }),
                json!({}),
            )]),
            Ok(vec![]),
        )
    }

    fn one_gpu() -> Demand {
        Demand::from_spec("ns", "gold", &vm_spec(json!({ "gpus": gpus(1, GPU) })))
    }

    fn row<'a>(plan: &'a CapacityPlan, node: &str) -> &'a NodeDeviceRow {
        &plan.nodes.iter().find(|n| n.node == node).unwrap().rows[0]
    }

    #[test]
    fn a_pool_of_four_is_refused_and_three_admitted() {
        let devices = issue_cluster();
        let four = plan(&devices, &one_gpu(), 4);
        assert!(!four.admitted);
        assert_eq!((four.placeable, four.fits), (3, 3));
        let a = row(&four, "node-a");
        assert_eq!(
            (a.capacity, a.allocatable, a.held, a.free, a.needed),
            (Some(6), 4, 1, 3, 4)
        );
        assert_eq!(row(&four, "node-b").free, 0);
        assert_eq!(
            (row(&four, "node-c").capacity, row(&four, "node-c").free),
            (None, 0)
        );
        assert_eq!(four.needs[0].class, DeviceClass::PciPassthrough);

        let three = plan(&devices, &one_gpu(), 3);
        assert!(three.admitted && three.fits_one);
        let planned: Vec<(String, u32)> = three
            .nodes
            .iter()
            .map(|n| (n.node.clone(), n.planned))
            .collect();
        assert_eq!(
            planned,
            [
                ("node-a".into(), 3),
                ("node-b".into(), 0),
                ("node-c".into(), 0)
            ]
        );
    }

    #[test]
    fn allocatable_counts_not_capacity() {
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[GPU], &[])),
            vec![node("node-a", json!({ GPU: "6" }), json!({ GPU: "4" }))],
            Ok(vec![]),
            Ok(vec![]),
        );
        assert!(plan(&devices, &one_gpu(), 4).admitted);
        assert!(!plan(&devices, &one_gpu(), 5).admitted);
    }

    #[test]
    fn all_devices_of_a_vm_must_be_on_one_node() {
        // Two free on the cluster, but one per node: a VM needing two fits nowhere.
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[GPU], &[])),
            vec![
                node("node-a", json!({}), json!({ GPU: "1" })),
                node("node-b", json!({}), json!({ GPU: "1" })),
            ],
            Ok(vec![]),
            Ok(vec![]),
        );
        let two = Demand::from_spec(
            "ns",
            "gold",
            &vm_spec(json!({ "gpus": gpus(1, GPU), "hostDevices": gpus(1, GPU) })),
        );
        assert_eq!(two.asked[0].per_vm, 2, "entries of one name count several");
        assert_eq!(two.asked[0].entries, ["gpus/gpu0", "hostDevices/gpu0"]);
        let p = plan(&devices, &two, 1);
        assert!(!p.fits_one && !p.admitted);
        assert_eq!(p.placeable, 0);
        assert_eq!(row(&p, "node-a").needed, 2);
    }

    #[test]
    fn several_device_types_take_the_scarcest_per_node() {
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[GPU, NIC], &[])),
            vec![
                node("node-a", json!({}), json!({ GPU: "4", NIC: "1" })),
                node("node-b", json!({}), json!({ GPU: "1", NIC: "8" })),
                node("node-c", json!({}), json!({ GPU: "3", NIC: "3" })),
            ],
            Ok(vec![]),
            Ok(vec![]),
        );
        let both = Demand::from_spec(
            "ns",
            "gold",
            &vm_spec(json!({ "gpus": gpus(1, GPU), "hostDevices": gpus(1, NIC) })),
        );
        let p = plan(&devices, &both, 5);
        let fits: Vec<u32> = p.nodes.iter().map(|n| n.fits).collect();
        assert_eq!(fits, [1, 1, 3]);
        assert_eq!(p.placeable, 5);
        assert!(p.admitted);
        let planned: Vec<u32> = p.nodes.iter().map(|n| n.planned).collect();
        assert_eq!(planned, [1, 1, 3]);
        assert!(!plan(&devices, &both, 6).admitted);
    }

    #[test]
    fn a_resource_not_permitted_refuses_whatever_the_nodes_hold() {
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[], &[])),
            vec![node("node-a", json!({}), json!({ GPU: "8" }))],
            Ok(vec![]),
            Ok(vec![]),
        );
        let p = plan(&devices, &one_gpu(), 1);
        assert_eq!(p.not_permitted, [GPU]);
        assert_eq!(p.needs[0].class, DeviceClass::NotPermitted);
        assert!(!p.admitted && !p.fits_one);
        assert_eq!((p.placeable, p.fits), (8, 0));
    }

    #[test]
    fn finished_launchers_free_and_migration_targets_hold() {
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[GPU], &[])),
            vec![
                node("node-a", json!({}), json!({ GPU: "2" })),
                node("node-b", json!({}), json!({ GPU: "2" })),
            ],
            Ok(vec![
                launcher(
                    "done",
                    "node-a",
                    "Succeeded",
                    json!({ GPU: "2" }),
                    json!({}),
                ),
                launcher("src", "node-a", "Running", json!({ GPU: "1" }), json!({})),
                launcher(
                    "dst",
                    "node-b",
                    "Running",
                    json!({ GPU: "1" }),
                    json!({ MIGRATION_JOB_LABEL: "m1" }),
                ),
            ]),
            Ok(vec![]),
        );
        let p = plan(&devices, &one_gpu(), 2);
        assert_eq!(row(&p, "node-a").held, 1, "the Succeeded pod holds nothing");
        assert_eq!(
            row(&p, "node-b").held,
            1,
            "the migration target holds its device"
        );
        assert!(p.admitted);
        assert!(!plan(&devices, &one_gpu(), 3).admitted);
    }

    #[test]
    fn mediated_profiles_put_several_vms_on_one_card() {
        let profile = "nvidia.com/GRID_T4-2Q";
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[], &[profile])),
            // One T4 card: 8 instances of the 2Q profile.
            vec![node(
                "node-a",
                json!({ profile: "8" }),
                json!({ profile: "8" }),
            )],
            Ok(vec![]),
            Ok(vec![]),
        );
        let vgpu = Demand::from_spec("ns", "gold", &vm_spec(json!({ "gpus": gpus(1, profile) })));
        let p = plan(&devices, &vgpu, 8);
        assert!(p.admitted);
        assert_eq!(p.needs[0].class, DeviceClass::Mediated);
        assert_eq!(p.nodes[0].planned, 8);
        assert!(!plan(&devices, &vgpu, 9).admitted);
    }

    #[test]
    fn cordoned_and_tainted_nodes_are_excluded_with_their_reason() {
        let mut cordoned = node("node-a", json!({}), json!({ GPU: "4" }));
        cordoned.spec.unschedulable = true;
        let mut tainted = node("node-b", json!({}), json!({ GPU: "4" }));
        tainted.spec.taints = vec![super::super::objects::Taint {
            key: "dedicated".into(),
            value: "ml".into(),
            effect: "NoSchedule".into(),
        }];
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[GPU], &[])),
            vec![cordoned, tainted],
            Ok(vec![]),
            Ok(vec![]),
        );
        let p = plan(&devices, &one_gpu(), 1);
        assert!(!p.fits_one);
        assert_eq!(
            p.nodes[0].excluded.as_deref(),
            Some("cordoned (spec.unschedulable)")
        );
        assert_eq!(
            p.nodes[1].excluded.as_deref(),
            Some("taint dedicated=ml:NoSchedule not tolerated")
        );
        assert_eq!(p.nodes[1].rows[0].free, 4, "the numbers are still shown");
        let tolerant = Demand::from_spec(
            "ns",
            "gold",
            &json!({ "tolerations": [{ "key": "dedicated", "operator": "Exists" }],
                     "domain": { "devices": { "gpus": gpus(1, GPU) } } }),
        );
        assert_eq!(plan(&devices, &tolerant, 4).placeable, 4);
    }

    #[test]
    fn a_vm_without_devices_needs_nothing() {
        let none = Demand::from_spec("ns", "plain", &vm_spec(json!({ "disks": [] })));
        assert!(!none.asks_for_devices());
        let p = plan(&issue_cluster(), &none, 500);
        assert!(p.admitted && p.nodes.is_empty() && p.needs.is_empty());
        let dra = Demand::from_spec(
            "ns",
            "dra",
            &vm_spec(
                json!({ "gpus": [{ "name": "g", "claimRequest": { "claimName": "c", "requestName": "r" } }] }),
            ),
        );
        assert!(!dra.asks_for_devices());
        assert!(dra.notes[0].contains("DRA"), "{:?}", dra.notes);
    }

    #[test]
    fn own_devices_of_a_stopping_member_are_left_out() {
        let mut devices = ClusterDevices::from_objects(
            Ok(permits(&[GPU], &[])),
            vec![node("node-a", json!({}), json!({ GPU: "1" }))],
            Ok(vec![]),
            Ok(vec![
                serde_json::from_value::<VmiObject>(json!({
                    "metadata": { "name": "pool-1", "namespace": "ns", "uid": "u" },
                    "spec": { "domain": { "devices": { "gpus": gpus(1, GPU) } } },
                    "status": { "nodeName": "node-a", "phase": "Running" },
                }))
                .unwrap(),
            ]),
        );
        let mut member =
            Demand::from_spec("ns", "pool-1", &vm_spec(json!({ "gpus": gpus(1, GPU) })));
        assert!(!plan(&devices, &member, 1).fits_one);
        member.ignore_own = true;
        assert!(plan(&devices, &member, 1).fits_one);
        devices.holds.clear();
        member.ignore_own = false;
        assert!(plan(&devices, &member, 1).fits_one);
    }

    #[test]
    fn the_cluster_view_lists_devices_and_holders() {
        let devices = ClusterDevices::from_objects(
            Ok(permits(&[GPU], &[])),
            vec![
                node(
                    "node-a",
                    json!({ GPU: "6", "nvidia.com/gpu": "2" }),
                    json!({ GPU: "4", "nvidia.com/gpu": "2", "cpu": "8", "devices.kubevirt.io/kvm": "1k" }),
                ),
                node("node-c", json!({}), json!({})),
            ],
            Ok(vec![launcher(
                "busy",
                "node-a",
                "Running",
                json!({ GPU: "1", "devices.kubevirt.io/kvm": "1" }),
                json!({}),
            )]),
            Ok(vec![]),
        );
        let pools = HashMap::from([(("ns".to_owned(), "busy".to_owned()), "p".to_owned())]);
        let view = cluster_view(&devices, &pools);
        let a = &view.nodes[0];
        let names: Vec<&str> = a.resources.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(names, ["nvidia.com/TEST_GPU", "nvidia.com/gpu"]);
        let gpu = &a.resources[0];
        assert_eq!((gpu.allocatable, gpu.held, gpu.free), (4, 1, 3));
        assert_eq!(gpu.holders[0].vm, "busy");
        assert_eq!(gpu.holders[0].pool.as_deref(), Some("p"));
        assert_eq!(
            gpu.holders[0].pod.as_deref(),
            Some("virt-launcher-busy-abcde")
        );
        assert_eq!(a.resources[1].class, DeviceClass::NotPermitted);
        assert!(a.kubevirt_schedulable);
        assert!(view.nodes[1].resources.is_empty());
        assert_eq!(view.permitted[0].resource, GPU);
    }
}
