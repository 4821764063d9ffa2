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
mod tests;
