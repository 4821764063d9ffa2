//! The capacity words, case by case: the per-node table, the verdict, the refusals and the
//! sentences the views carry.

use super::*;
use crate::capacity::{DeviceClass, NodeDeviceRow, NodeResource};

fn need(resource: &str, per_vm: u32) -> DeviceNeed {
    DeviceNeed {
        resource: resource.into(),
        per_vm,
        class: DeviceClass::PciPassthrough,
        class_label: "PCI passthrough".into(),
        entries: vec!["gpus/gpu0".into()],
    }
}

fn node(name: &str, allocatable: u32, held: u32, fits: u32, size: u32) -> NodePlan {
    NodePlan {
        node: name.into(),
        excluded: None,
        rows: vec![NodeDeviceRow {
            resource: "nvidia.com/T4".into(),
            class: DeviceClass::PciPassthrough,
            class_label: "PCI passthrough".into(),
            capacity: Some(allocatable + if allocatable > 0 { 2 } else { 0 }),
            allocatable,
            held,
            free: allocatable - held,
            per_vm: 1,
            needed: size,
        }],
        fits,
        planned: 0,
    }
}

fn issue_plan(size: u32) -> CapacityPlan {
    let mut c = node("node-c", 0, 0, 0, size);
    c.rows[0].capacity = None;
    let mut d = node("node-d", 2, 0, 0, size);
    d.excluded = Some("cordoned (spec.unschedulable)".into());
    CapacityPlan {
        namespace: "ns".into(),
        vm: "gold".into(),
        size,
        needs: vec![need("nvidia.com/T4", 1)],
        nodes: vec![
            node("node-a", 4, 1, 3, size),
            node("node-b", 0, 0, 0, size),
            c,
            d,
        ],
        placeable: 3,
        fits: 3.min(size),
        fits_one: true,
        admitted: size <= 3,
        not_permitted: vec![],
        notes: vec![],
        words: PlanWords::default(),
    }
}

#[test]
fn the_table_has_a_row_per_node_and_resource() {
    let table = plan_table(&issue_plan(4));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with(
            "  NODE    RESOURCE       CLASS            ALLOCATABLE  HELD  FREE  NEEDED  FITS"
        ),
        "{table}"
    );
    assert!(
        lines[1]
            .contains("node-a  nvidia.com/T4  PCI passthrough  4            1     3     4       3"),
        "{table}"
    );
    assert!(lines[4].ends_with("-"), "{table}");
    assert_eq!(
        lines[5],
        "  node-d: not schedulable for this VM: cordoned (spec.unschedulable)"
    );
}

#[test]
fn big_clusters_sum_up_the_nodes_without_the_device() {
    let mut plan = issue_plan(4);
    for i in 0..30 {
        let mut bare = node(&format!("plain-{i:02}"), 0, 0, 0, 4);
        bare.rows[0].capacity = None;
        plan.nodes.push(bare);
    }
    let table = plan_table(&plan);
    assert!(!table.contains("plain-"), "{table}");
    assert!(!table.contains("node-c "), "{table}");
    assert!(
        table.contains("node-b "),
        "it reports the resource (0): {table}"
    );
    assert!(
        table.contains("  and 31 more nodes without nvidia.com/T4\n"),
        "{table}"
    );
}

#[test]
fn refusals_name_the_room_and_the_fix() {
    let err = pool_refusal(&issue_plan(4), "gpupool");
    let text = err.to_string();
    assert!(
        text.starts_with(
            "pool \"gpupool\" cannot be placed: each of its 4 VMs needs 1 nvidia.com/T4 \
             (cloned from golden VM \"gold\"), every VM needs all of its devices on one \
             node, and the schedulable nodes have room for 3 now (node-a 3); nothing was \
             created\n  NODE"
        ),
        "{text}"
    );
    assert_eq!(err.kind(), ErrorKind::Refused);
    let fix = err.suggestion().unwrap();
    assert!(
        fix.starts_with("make the pool smaller (3 fit now)"),
        "{fix}"
    );
    assert!(fix.contains(NOT_A_RESERVATION));

    let mut full = issue_plan(1);
    full.nodes[0].rows[0].held = 4;
    full.nodes[0].rows[0].free = 0;
    full.nodes[0].fits = 0;
    full.placeable = 0;
    let err = start_refusal(&full, "gpupool-2");
    assert_eq!(
        err.to_string(),
        "no node has a free nvidia.com/T4 for gpupool-2: node-a 0 of 4 free, node-d 2 of 2 \
         free (not schedulable: cordoned (spec.unschedulable)), node-b 0 of 0 free, 1 other \
         node has none; nothing was claimed"
    );
    assert_eq!(err.kind(), ErrorKind::Refused);

    let mut forbidden = issue_plan(2);
    forbidden.needs[0].class = DeviceClass::NotPermitted;
    forbidden.not_permitted = vec!["nvidia.com/T4".into()];
    let text = pool_refusal(&forbidden, "gpupool").to_string();
    assert!(
        text.starts_with(
            "pool \"gpupool\" cannot be created: golden VM \"gold\" asks for nvidia.com/T4 \
             (gpus/gpu0), which the KubeVirt CR does not permit"
        ),
        "{text}"
    );
    assert!(text.contains("refuse to start every member"), "{text}");
}

#[test]
fn the_verdict_says_how_many_of_how_many() {
    assert_eq!(
        verdict(&issue_plan(4)),
        "does not fit: fits 3 of the 4 you ask for (room for 3 such VMs now: node-a 3)"
    );
    assert_eq!(
        verdict(&issue_plan(3)),
        "fits: all 3 you ask for can be placed (room for 3 such VMs now: node-a 3)"
    );
    assert_eq!(
        needs_text(&[need("a.com/x", 1), need("b.com/y", 2)]),
        "1 a.com/x and 2 b.com/y"
    );
}

#[test]
fn a_plan_carries_its_words_the_same_the_cli_prints() {
    let short = issue_plan(4);
    let words = plan_words(&short);
    assert_eq!(
        words.needs,
        "each VM needs 1 nvidia.com/T4 (PCI passthrough), all on one node"
    );
    assert_eq!(words.verdict, verdict(&short));
    let fix = words.fix.unwrap();
    assert_eq!(
        fix,
        "make the pool smaller (3 fit now), free devices (the app's Capacity view or \
         corral-vdi capacity shows who holds them), or add nodes with the device"
    );
    let mut one = issue_plan(4);
    one.placeable = 1;
    let fix_one = plan_words(&one).fix.unwrap();
    assert!(
        fix_one.starts_with("make the pool smaller (1 fits now), "),
        "{fix_one}"
    );
    // The refusal of the create says the same fix, then the caveat.
    assert_eq!(
        pool_refusal(&short, "p").suggestion().unwrap(),
        format!("{fix}; {NOT_A_RESERVATION}")
    );
    assert_eq!(words.caveat, NOT_A_RESERVATION);
    assert_eq!(plan_words(&issue_plan(3)).fix, None);

    let mut two = issue_plan(3);
    two.needs.push(DeviceNeed {
        class: DeviceClass::Mediated,
        ..need("nvidia.com/GRID_T4-1Q", 2)
    });
    assert_eq!(
        plan_words(&two).needs,
        "each VM needs 1 nvidia.com/T4 (PCI passthrough) and 2 nvidia.com/GRID_T4-1Q \
         (mediated (vGPU)), all on one node"
    );
    let mut none = issue_plan(1);
    none.needs.clear();
    assert_eq!(
        plan_words(&none).needs,
        "VM \"gold\" asks for no GPU or host device"
    );
    let mut forbidden = issue_plan(2);
    forbidden.not_permitted = vec!["nvidia.com/T4".into()];
    forbidden.admitted = false;
    assert_eq!(plan_words(&forbidden).fix.as_deref(), Some(PERMIT_FIX));
}

fn holder(vm: &str, pool: Option<&str>, count: u32, target: bool) -> DeviceHolder {
    DeviceHolder {
        namespace: "ns".into(),
        vm: vm.into(),
        pool: pool.map(str::to_owned),
        count,
        pod: Some(format!("virt-launcher-{vm}-abcde")),
        migration_target: target,
    }
}

fn capacity_node(name: &str, resources: usize) -> NodeCapacity {
    NodeCapacity {
        node: name.into(),
        cordoned: false,
        taints: vec![],
        kubevirt_schedulable: true,
        resources: (0..resources)
            .map(|_| NodeResource {
                resource: "nvidia.com/T4".into(),
                class: DeviceClass::PciPassthrough,
                capacity: Some(2),
                allocatable: 2,
                held: 0,
                free: 2,
                holders: vec![],
                class_label: "PCI passthrough".into(),
                holders_text: "nobody".into(),
            })
            .collect(),
        condition: None,
    }
}

#[test]
fn the_cluster_view_says_who_holds_what_and_why_a_node_takes_nothing() {
    assert_eq!(holders_text(&[]), "nobody");
    let mut from_vmi = holder("x", None, 2, true);
    from_vmi.pod = None;
    assert_eq!(
        holders_text(&[holder("sec-1", Some("sec"), 1, false), from_vmi]),
        "ns/sec-1 (pool sec), ns/x ×2 [migration target] [from its VMI]"
    );

    let mut node = capacity_node("n1", 0);
    assert_eq!(node_condition(&node), None);
    node.cordoned = true;
    node.kubevirt_schedulable = false;
    node.taints = vec!["gpu=reserved:NoSchedule".into()];
    assert_eq!(
        node_condition(&node).as_deref(),
        Some("cordoned, not kubevirt.io/schedulable, taint gpu=reserved:NoSchedule")
    );

    assert_eq!(
        cluster_empty(&[]).as_deref(),
        Some("The cluster reports no nodes.")
    );
    assert_eq!(
        cluster_empty(&[capacity_node("n1", 0)]).as_deref(),
        Some("The cluster's one node reports no GPU or host device.")
    );
    let bare = [capacity_node("n1", 0), capacity_node("n2", 0)];
    assert_eq!(
        cluster_empty(&bare).as_deref(),
        Some("None of the 2 nodes reports a GPU or host device.")
    );
    let mut cordoned = capacity_node("n3", 0);
    cordoned.condition = Some("cordoned".into());
    let mixed = [capacity_node("n1", 1), capacity_node("n2", 0), cordoned];
    assert_eq!(cluster_empty(&mixed), None);
    assert_eq!(
        without_devices(&mixed).as_deref(),
        Some("without devices: n2, n3 (cordoned)")
    );
    assert_eq!(without_devices(&[capacity_node("n1", 1)]), None);
    assert_eq!(total_text(3, 6, 2), "3 free of 6 on 2 nodes");
    assert_eq!(total_text(0, 1, 1), "0 free of 1 on 1 node");
}
