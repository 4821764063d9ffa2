//! The arithmetic, case by case: demands read from VM specs, plans node by node, and the
//! cluster view.

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
    let mut member = Demand::from_spec("ns", "pool-1", &vm_spec(json!({ "gpus": gpus(1, GPU) })));
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
