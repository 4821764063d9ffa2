//! GPU and host-device capacity against a real API server (the sandbox), with devices that are
//! only numbers: nodes this binary adds with extended resources in `status.allocatable`, the
//! KubeVirt CR's `permittedHostDevices`, and the launcher pods the emulator's scheduler makes
//! when a VM with devices starts (or the tests make themselves: a finished one, a migration
//! target). Every refusal is checked to change nothing (resourceVersions of everything in the
//! namespace before and after); admitted pools are started and land where the table said.
//!
//! These tests add nodes and change the KubeVirt CR cluster-wide, so this binary has its own
//! sandbox (as every test binary does), and each test uses node and resource names of its own
//! (`nvidia.com/<TEST>_GPU`, `<test>-a`), so they run in parallel without seeing each other's
//! devices.
//!
//! What comes from the emulator (not KubeVirt or the scheduler): placement on a node with the
//! free devices, the launcher pods and their phases, `ErrorUnschedulable` when none fits.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use corral_tests::{
    actor_as, add_node, client_as, cordon_node, eventually, golden_vm, grant_capacity_reader,
    grant_role, launcher_pod, namespace, permit_device, recording_client, wait_power,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use sandbox::devices::{DeviceNode, PermitKind};
use serde_json::{Value, json};
use vdi_core::Error;
use vdi_core::capacity::{CapacityPlan, DeviceClass, NOT_A_RESERVATION, cluster_capacity};
use vdi_core::claim::{ClaimOptions, UnassignOptions, assign, unassign};
use vdi_core::error::ErrorKind;
use vdi_core::names::{POOL_LABEL, lease_name};
use vdi_core::pool::{CreateOptions, CreatePool, capacity_preview, create_pool};

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Everything in `ns` a pool create or a claim could touch, by `kind/name`, with its
/// resourceVersion: VMs, VMIs, clone objects, Leases and pods.
async fn world(ns: &str) -> BTreeMap<String, String> {
    let admin = client_as("admin").await;
    let kinds = [
        resource("kubevirt.io", "v1", "VirtualMachine", "virtualmachines"),
        resource(
            "kubevirt.io",
            "v1",
            "VirtualMachineInstance",
            "virtualmachineinstances",
        ),
        resource(
            "clone.kubevirt.io",
            "v1beta1",
            "VirtualMachineClone",
            "virtualmachineclones",
        ),
        resource("coordination.k8s.io", "v1", "Lease", "leases"),
        resource("", "v1", "Pod", "pods"),
    ];
    let mut out = BTreeMap::new();
    for ar in kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
        for obj in api.list(&ListParams::default()).await.unwrap() {
            out.insert(
                format!("{}/{}", ar.kind, obj.name_any()),
                obj.resource_version().unwrap_or_default(),
            );
        }
    }
    out
}

/// Puts one `gpus[]` entry per resource in `resources` into a VM object's template.
fn with_gpus(vm: &mut Value, resources: &[&str]) {
    let gpus: Vec<Value> = resources
        .iter()
        .enumerate()
        .map(|(i, r)| json!({ "name": format!("gpu{i}"), "deviceName": r }))
        .collect();
    vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"] = json!(gpus);
}

/// A stopped golden VM `name` in `ns` asking for `resources` (one `gpus[]` entry each).
async fn golden_with(ns: &str, name: &str, resources: &[&str], tweak: impl FnOnce(&mut Value)) {
    golden_vm(ns, name, "Halted", |vm| {
        with_gpus(vm, resources);
        tweak(vm);
    })
    .await;
}

/// A VM `name` in `ns` asking for `resources`, in pool `pool` if given, with run strategy
/// `strategy`; waits for `power`.
async fn device_vm(
    ns: &str,
    name: &str,
    pool: Option<&str>,
    resources: &[&str],
    strategy: &str,
    power: &str,
) {
    let admin = client_as("admin").await;
    let mut object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns, "labels": {} },
        "spec": sandbox::bootstrap::golden_spec(strategy, name),
    });
    if let Some(pool) = pool {
        object["metadata"]["labels"][POOL_LABEL] = json!(pool);
    }
    with_gpus(&mut object, resources);
    let vm: DynamicObject = serde_json::from_value(object).unwrap();
    corral_tests::vms(&admin, ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();
    wait_power(ns, name, power).await;
}

/// The node the VMI `name` in `ns` runs on, once it is Running.
async fn running_on(ns: &str, name: &str) -> String {
    wait_power(ns, name, "Running").await;
    let admin = client_as("admin").await;
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        admin,
        ns,
        &resource(
            "kubevirt.io",
            "v1",
            "VirtualMachineInstance",
            "virtualmachineinstances",
        ),
    );
    let vmi = vmis.get(name).await.unwrap();
    vmi.data
        .pointer("/status/nodeName")
        .and_then(Value::as_str)
        .unwrap()
        .to_owned()
}

/// The launcher pods in `ns` (name → node, phase).
async fn launchers(ns: &str) -> BTreeMap<String, (String, String)> {
    let pods: Api<Pod> = Api::namespaced(client_as("admin").await, ns);
    pods.list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            (
                p.name_any(),
                (node.unwrap_or_default(), phase.unwrap_or_default()),
            )
        })
        .collect()
}

fn request(ns: &str, pool: &str, golden: &str, size: u32) -> CreatePool {
    CreatePool {
        namespace: ns.into(),
        name: pool.into(),
        golden: golden.into(),
        size,
        options: CreateOptions::default(),
    }
}

/// The (allocatable, held, free) of `node`'s first row in `plan`.
fn numbers(plan: &CapacityPlan, node: &str) -> (u32, u32, u32) {
    let n = plan
        .nodes
        .iter()
        .find(|n| n.node == node)
        .unwrap_or_else(|| panic!("node {node} in {plan:#?}"));
    (n.rows[0].allocatable, n.rows[0].held, n.rows[0].free)
}

fn node_plan<'a>(plan: &'a CapacityPlan, node: &str) -> &'a vdi_core::capacity::NodePlan {
    plan.nodes.iter().find(|n| n.node == node).unwrap()
}

/// A pool create that must be refused for capacity and change nothing; returns the message.
async fn refused_create(ns: &str, pool: &str, golden: &str, size: u32) -> String {
    let admin = client_as("admin").await;
    let before = world(ns).await;
    let err = create_pool(&admin, &request(ns, pool, golden, size), |_| {})
        .await
        .expect_err("capacity refuses it");
    assert_eq!(err.kind(), ErrorKind::Refused, "{err}");
    assert!(matches!(err, Error::Rejected { .. }), "{err:?}");
    assert!(
        err.suggestion()
            .is_some_and(|s| s.contains(NOT_A_RESERVATION) || s.contains("permittedHostDevices")),
        "{:?}",
        err.suggestion()
    );
    assert_eq!(world(ns).await, before, "a refusal changes nothing");
    err.to_string()
}

#[tokio::test]
async fn four_are_refused_three_admitted_and_started_where_the_table_said() {
    const GPU: &str = "nvidia.com/ISSUE_GPU";
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("issue-a").devices(GPU, 6, 4)).await;
    add_node(DeviceNode::new("issue-b").devices(GPU, 0, 0)).await;
    add_node(DeviceNode::new("issue-c")).await;
    let ns = namespace("cap-issue").await;
    let admin = client_as("admin").await;

    // One running VM holds one device: the emulator puts it on the only node with a free one.
    device_vm(&ns, "busy", None, &[GPU], "Always", "Running").await;
    assert_eq!(running_on(&ns, "busy").await, "issue-a");
    let pods = launchers(&ns).await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert!(
        pods.values()
            .all(|(node, phase)| node == "issue-a" && phase == "Running"),
        "{pods:?}"
    );

    golden_with(&ns, "gold", &[GPU], |_| {}).await;
    let four = capacity_preview(&admin, &ns, "gold", 4).await.unwrap();
    assert!(!four.admitted);
    assert_eq!(four.needs[0].class, DeviceClass::PciPassthrough);
    assert_eq!(numbers(&four, "issue-a"), (4, 1, 3));
    assert_eq!(node_plan(&four, "issue-a").rows[0].capacity, Some(6));
    assert_eq!(numbers(&four, "issue-b"), (0, 0, 0));
    assert_eq!(numbers(&four, "issue-c"), (0, 0, 0));
    assert_eq!(node_plan(&four, "issue-c").rows[0].capacity, None);
    assert_eq!((four.placeable, four.fits), (3, 3));

    let text = refused_create(&ns, "gpupool", "gold", 4).await;
    assert!(
        text.starts_with(
            "pool \"gpupool\" cannot be placed: each of its 4 VMs needs 1 nvidia.com/ISSUE_GPU \
             (cloned from golden VM \"gold\"), every VM needs all of its devices on one node, \
             and the schedulable nodes have room for 3 now (issue-a 3); nothing was created"
        ),
        "{text}"
    );
    let row = |node: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{node} ")))
            .unwrap_or_else(|| panic!("row of {node} in {text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        row("issue-a"),
        "issue-a nvidia.com/ISSUE_GPU PCI passthrough 4 1 3 4 3"
    );
    assert_eq!(
        row("issue-b"),
        "issue-b nvidia.com/ISSUE_GPU PCI passthrough 0 0 0 4 0"
    );
    assert_eq!(
        row("issue-c"),
        "issue-c nvidia.com/ISSUE_GPU PCI passthrough 0 0 0 4 0"
    );

    let three = capacity_preview(&admin, &ns, "gold", 3).await.unwrap();
    assert!(three.admitted);
    assert_eq!(node_plan(&three, "issue-a").planned, 3);
    let created = create_pool(&admin, &request(&ns, "gpupool", "gold", 3), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(created.members.len(), 3);

    // The members start (assign) and land on the nodes the table predicted.
    let actor = actor_as("admin").await;
    let mut placed: BTreeMap<String, u32> = BTreeMap::new();
    for i in 1..=3 {
        let claimed = assign(
            &actor,
            &ns,
            "gpupool",
            &format!("user-{i}"),
            &ClaimOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("claim {i}: {e}"));
        *placed
            .entry(running_on(&ns, &claimed.member).await)
            .or_default() += 1;
    }
    for (node, count) in &placed {
        assert!(
            *count <= node_plan(&three, node).fits,
            "{node} got {count}: {three:#?}"
        );
    }
    assert_eq!(placed, BTreeMap::from([("issue-a".to_owned(), 3)]));
    let now = capacity_preview(&admin, &ns, "gold", 1).await.unwrap();
    assert_eq!(numbers(&now, "issue-a"), (4, 4, 0));
    assert!(!now.fits_one);
}

#[tokio::test]
async fn a_vm_that_needs_two_devices_needs_them_on_one_node() {
    const GPU: &str = "nvidia.com/PAIR_GPU";
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("pair-a").device(GPU, 1)).await;
    add_node(DeviceNode::new("pair-b").device(GPU, 1)).await;
    let ns = namespace("cap-pair").await;
    golden_with(&ns, "gold", &[GPU, GPU], |_| {}).await;

    let plan = capacity_preview(&client_as("admin").await, &ns, "gold", 1)
        .await
        .unwrap();
    assert_eq!(plan.needs[0].per_vm, 2);
    assert_eq!(numbers(&plan, "pair-a").2 + numbers(&plan, "pair-b").2, 2);
    assert!(!plan.fits_one, "two free in total, but one per node");
    let text = refused_create(&ns, "pair", "gold", 1).await;
    assert!(
        text.contains("each of its 1 VMs needs 2 nvidia.com/PAIR_GPU")
            && text.contains("no schedulable node has room for one"),
        "{text}"
    );

    // A second device on one node makes room for one.
    add_node(DeviceNode::new("pair-b").device(GPU, 2)).await;
    let plan = capacity_preview(&client_as("admin").await, &ns, "gold", 1)
        .await
        .unwrap();
    assert!(plan.admitted);
    assert_eq!(node_plan(&plan, "pair-b").fits, 1);
}

#[tokio::test]
async fn a_resource_that_is_not_permitted_is_refused_naming_the_permit() {
    const GPU: &str = "nvidia.com/UNPERMITTED_GPU";
    add_node(DeviceNode::new("unperm-a").device(GPU, 8)).await;
    let ns = namespace("cap-unperm").await;
    golden_with(&ns, "gold", &[GPU], |_| {}).await;

    let text = refused_create(&ns, "unperm", "gold", 1).await;
    assert!(
        text.starts_with(
            "pool \"unperm\" cannot be created: golden VM \"gold\" asks for \
             nvidia.com/UNPERMITTED_GPU (gpus/gpu0), which the KubeVirt CR does not permit"
        ) && text.contains("permittedHostDevices"),
        "{text}"
    );
    let plan = capacity_preview(&client_as("admin").await, &ns, "gold", 1)
        .await
        .unwrap();
    assert_eq!(plan.not_permitted, [GPU]);
    assert_eq!(plan.needs[0].class, DeviceClass::NotPermitted);
    assert_eq!(
        numbers(&plan, "unperm-a"),
        (8, 0, 8),
        "allocatable is there"
    );

    // Started anyway (kubectl), it never runs: virt-controller does not render its pod.
    device_vm(&ns, "forced", None, &[GPU], "Always", "Starting").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(launchers(&ns).await.is_empty());

    // Permitted through an external device plugin, it is admitted.
    permit_device(PermitKind::Pci, GPU, true).await;
    let plan = capacity_preview(&client_as("admin").await, &ns, "gold", 1)
        .await
        .unwrap();
    assert!(plan.admitted, "{plan:#?}");
    assert_eq!(plan.needs[0].class, DeviceClass::External);
    assert_eq!(running_on(&ns, "forced").await, "unperm-a");
}

#[tokio::test]
async fn finished_launchers_free_devices_and_migration_targets_hold_them() {
    const GPU: &str = "nvidia.com/MIGRATE_GPU";
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("migrate-a").device(GPU, 2)).await;
    add_node(DeviceNode::new("migrate-b").device(GPU, 1)).await;
    let ns = namespace("cap-migrate").await;
    golden_with(&ns, "gold", &[GPU], |_| {}).await;
    let admin = client_as("admin").await;

    // A launcher pod that finished holds nothing any more.
    launcher_pod(
        &ns,
        "old",
        "done1",
        "migrate-a",
        "Succeeded",
        &[(GPU, 2)],
        false,
    )
    .await;
    let plan = capacity_preview(&admin, &ns, "gold", 3).await.unwrap();
    assert_eq!(numbers(&plan, "migrate-a"), (2, 0, 2));
    assert!(plan.admitted);

    // A migration target holds its device on its node while the source holds its own.
    launcher_pod(
        &ns,
        "moving",
        "src01",
        "migrate-a",
        "Running",
        &[(GPU, 1)],
        false,
    )
    .await;
    launcher_pod(
        &ns,
        "moving",
        "dst01",
        "migrate-b",
        "Running",
        &[(GPU, 1)],
        true,
    )
    .await;
    let plan = capacity_preview(&admin, &ns, "gold", 1).await.unwrap();
    assert_eq!(numbers(&plan, "migrate-a"), (2, 1, 1));
    assert_eq!(numbers(&plan, "migrate-b"), (1, 1, 0));
    assert_eq!(plan.placeable, 1);
    refused_create(&ns, "mig", "gold", 2).await;

    // The Capacity view names who holds what.
    let view = cluster_capacity(&admin).await.unwrap();
    let b = view.nodes.iter().find(|n| n.node == "migrate-b").unwrap();
    let gpu = b.resources.iter().find(|r| r.resource == GPU).unwrap();
    assert_eq!((gpu.allocatable, gpu.held, gpu.free), (1, 1, 0));
    assert_eq!(gpu.holders.len(), 1);
    assert!(gpu.holders[0].migration_target);
    assert_eq!(
        gpu.holders[0].pod.as_deref(),
        Some("virt-launcher-moving-dst01")
    );
}

#[tokio::test]
async fn a_vmi_without_a_visible_launcher_pod_holds_its_devices() {
    const GPU: &str = "nvidia.com/BARE_GPU";
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("bare-a").device(GPU, 2)).await;
    let ns = namespace("cap-bare").await;
    golden_with(&ns, "gold", &[GPU], |_| {}).await;
    // A VMI that reports a node but whose pod this cluster does not show (no VM owns it, so the
    // emulator leaves it alone).
    let admin = client_as("admin").await;
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &resource(
            "kubevirt.io",
            "v1",
            "VirtualMachineInstance",
            "virtualmachineinstances",
        ),
    );
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": { "name": "orphan", "namespace": ns },
        "spec": { "domain": { "devices": { "gpus": [{ "name": "g", "deviceName": GPU }] } } },
        "status": { "phase": "Running", "nodeName": "bare-a" },
    }))
    .unwrap();
    vmis.create(&PostParams::default(), &vmi).await.unwrap();
    let plan = capacity_preview(&admin, &ns, "gold", 2).await.unwrap();
    assert_eq!(numbers(&plan, "bare-a"), (2, 1, 1));
    assert!(!plan.admitted);
    let view = cluster_capacity(&admin).await.unwrap();
    let a = view.nodes.iter().find(|n| n.node == "bare-a").unwrap();
    assert_eq!(a.resources[0].holders[0].vm, "orphan");
    assert_eq!(a.resources[0].holders[0].pod, None);
}

#[tokio::test]
async fn mediated_profiles_put_several_vms_on_one_card() {
    const PROFILE: &str = "nvidia.com/GRID_T4_2Q_MDEV";
    permit_device(PermitKind::Mediated, PROFILE, false).await;
    // One card cut into four instances of the profile.
    add_node(DeviceNode::new("mdev-a").devices(PROFILE, 4, 4)).await;
    let ns = namespace("cap-mdev").await;
    golden_with(&ns, "gold", &[PROFILE], |_| {}).await;
    let admin = client_as("admin").await;

    let plan = capacity_preview(&admin, &ns, "gold", 5).await.unwrap();
    assert_eq!(plan.needs[0].class, DeviceClass::Mediated);
    assert_eq!((plan.placeable, plan.admitted), (4, false));
    refused_create(&ns, "vgpu", "gold", 5).await;
    create_pool(&admin, &request(&ns, "vgpu", "gold", 4), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let actor = actor_as("admin").await;
    for i in 1..=4 {
        let claimed = assign(
            &actor,
            &ns,
            "vgpu",
            &format!("u{i}"),
            &ClaimOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(running_on(&ns, &claimed.member).await, "mdev-a");
    }
    assert_eq!(launchers(&ns).await.len(), 4, "four VMs share one card");
}

#[tokio::test]
async fn cordoned_nodes_and_untolerated_taints_are_excluded_with_their_reason() {
    const GPU: &str = "nvidia.com/FENCE_GPU";
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("fence-a").device(GPU, 4).cordoned()).await;
    add_node(
        DeviceNode::new("fence-b")
            .device(GPU, 4)
            .taint("dedicated", "ml", "NoSchedule"),
    )
    .await;
    add_node(DeviceNode::new("fence-c").device(GPU, 1)).await;
    add_node(
        DeviceNode::new("fence-d")
            .device(GPU, 4)
            .without_virt_handler(),
    )
    .await;
    let ns = namespace("cap-fence").await;
    golden_with(&ns, "gold", &[GPU], |_| {}).await;
    golden_with(&ns, "tolerant", &[GPU], |vm| {
        vm["spec"]["template"]["spec"]["tolerations"] =
            json!([{ "key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule" }]);
    })
    .await;
    let admin = client_as("admin").await;

    let plan = capacity_preview(&admin, &ns, "gold", 2).await.unwrap();
    assert_eq!(
        node_plan(&plan, "fence-a").excluded.as_deref(),
        Some("cordoned (spec.unschedulable)")
    );
    assert_eq!(
        node_plan(&plan, "fence-b").excluded.as_deref(),
        Some("taint dedicated=ml:NoSchedule not tolerated")
    );
    assert!(
        node_plan(&plan, "fence-d")
            .excluded
            .as_deref()
            .is_some_and(|e| e.contains("kubevirt.io/schedulable")),
        "{plan:#?}"
    );
    assert_eq!(plan.placeable, 1);
    let text = refused_create(&ns, "fenced", "gold", 2).await;
    assert!(
        text.contains("  fence-a: not schedulable for this VM: cordoned (spec.unschedulable)"),
        "{text}"
    );

    assert_eq!(
        capacity_preview(&admin, &ns, "tolerant", 5)
            .await
            .unwrap()
            .placeable,
        5
    );
    cordon_node("fence-a", false).await;
    let plan = capacity_preview(&admin, &ns, "gold", 5).await.unwrap();
    assert_eq!(plan.placeable, 5);
    assert!(plan.admitted);
}

#[tokio::test]
async fn assign_refuses_a_member_no_node_can_start_and_writes_no_lease() {
    const GPU: &str = "nvidia.com/CLAIM_GPU";
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("claim-a").device(GPU, 1)).await;
    let ns = namespace("cap-claim").await;
    for i in 1..=2 {
        device_vm(
            &ns,
            &format!("desk-{i}"),
            Some("desk"),
            &[GPU],
            "Halted",
            "Stopped",
        )
        .await;
    }
    let actor = actor_as("admin").await;
    let first = assign(&actor, &ns, "desk", "ann", &ClaimOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(running_on(&ns, &first.member).await, "claim-a");
    let other = if first.member == "desk-1" {
        "desk-2"
    } else {
        "desk-1"
    };

    let before = world(&ns).await;
    let err = assign(&actor, &ns, "desk", "ben", &ClaimOptions::default())
        .await
        .expect_err("no device is free");
    assert_eq!(err.kind(), ErrorKind::Refused);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "no node has a free nvidia.com/CLAIM_GPU for {other}: claim-a 0 of 1 free, "
        )) && text.ends_with(" have none; nothing was claimed"),
        "{text}"
    );
    assert_eq!(world(&ns).await, before, "no Lease, no label, no start");
    let leases: Api<Lease> = Api::namespaced(client_as("admin").await, &ns);
    assert!(leases.get_opt(&lease_name(other)).await.unwrap().is_none());

    // The holder releases: stopping frees the device, and the next claim starts and is placed.
    unassign(&actor, &ns, &first.member, &UnassignOptions { force: true })
        .await
        .unwrap();
    wait_power(&ns, &first.member, "Stopped").await;
    eventually(
        "the launcher pod to go",
        Duration::from_secs(10),
        || async { launchers(&ns).await.is_empty().then_some(()) },
    )
    .await;
    let second = assign(&actor, &ns, "desk", "ben", &ClaimOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(running_on(&ns, &second.member).await, "claim-a");
}

#[tokio::test]
async fn an_ordinary_user_needs_read_access_to_judge_capacity() {
    const GPU: &str = "nvidia.com/RBAC_GPU";
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("rbac-a").device(GPU, 1)).await;
    let ns = namespace("cap-rbac").await;
    golden_with(&ns, "gold", &[GPU], |_| {}).await;

    // bob may read the VMs of the namespace, but not nodes.
    let err = capacity_preview(&client_as("bob").await, &ns, "gold", 1)
        .await
        .expect_err("bob may not list nodes");
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(err.to_string().contains("you may not list nodes"), "{err}");
    assert!(
        err.suggestion()
            .is_some_and(|s| s.contains("corral-vdi:capacity-reader")),
        "{err:?}"
    );

    // Nor can bob's pool create judge it, once RBAC lets him create clone objects there (what
    // a create checks first): refused before anything is created.
    grant_role(
        &ns,
        "bob",
        json!([{ "apiGroups": ["clone.kubevirt.io"], "resources": ["virtualmachineclones"],
                 "verbs": ["create"] }]),
    )
    .await;
    let bob = client_as("bob").await;
    let before = world(&ns).await;
    let err = create_pool(&bob, &request(&ns, "bobs", "gold", 1), |_| {})
        .await
        .expect_err("capacity cannot be judged");
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(err.to_string().contains("you may not list nodes"), "{err}");
    assert_eq!(world(&ns).await, before);

    // alice may read them: her own claim ("Get a desktop") is judged.
    grant_capacity_reader("alice").await;
    let plan = capacity_preview(&client_as("alice").await, &ns, "gold", 1)
        .await
        .unwrap();
    assert!(plan.admitted);
    for i in 1..=2 {
        device_vm(
            &ns,
            &format!("own-{i}"),
            Some("own"),
            &[GPU],
            "Halted",
            "Stopped",
        )
        .await;
    }
    let alice = actor_as("alice").await;
    let mine = assign(&alice, &ns, "own", "alice", &ClaimOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    running_on(&ns, &mine.member).await;
    let before = world(&ns).await;
    let err = assign(
        &alice,
        &ns,
        "own",
        "alice",
        &ClaimOptions {
            another: true,
            ..Default::default()
        },
    )
    .await
    .expect_err("the one device is taken");
    assert!(
        err.to_string()
            .starts_with("no node has a free nvidia.com/RBAC_GPU for own-"),
        "{err}"
    );
    assert_eq!(world(&ns).await, before);
}

#[tokio::test]
async fn vms_without_devices_cost_no_capacity_request() {
    let ns = namespace("cap-plain").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    let paths = Arc::new(Mutex::new(Vec::new()));
    let client = recording_client("admin", paths.clone()).await;
    create_pool(&client, &request(&ns, "plain", "gold", 2), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let capacity_reads = |paths: &[String]| {
        paths
            .iter()
            .filter(|p| {
                p.ends_with("/nodes")
                    || p.ends_with("/pods")
                    || p.ends_with("/kubevirts")
                    || p.ends_with("/virtualmachineinstances")
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(capacity_reads(&paths.lock().unwrap()), Vec::<String>::new());

    // An uncontended claim of a member without devices (a claim for oneself: an assignment to
    // someone else asks first whether the pool is for them): still four requests before the
    // start, after the one read that tells whether a broker does the cluster's half (its Lease).
    let actor = vdi_core::identity::Actor::connect(client).await.unwrap();
    paths.lock().unwrap().clear();
    assign(&actor, &ns, "plain", "admin", &ClaimOptions::default())
        .await
        .unwrap();
    let seen = paths.lock().unwrap().clone();
    let broker_lease = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
        vdi_core::names::BROKER_NAMESPACE,
        vdi_core::names::BROKER_NAME
    );
    assert_eq!(seen.first(), Some(&broker_lease), "{seen:?}");
    let before_start: Vec<&String> = seen
        .iter()
        .skip(1)
        .take_while(|p| !p.contains("subresources.kubevirt.io"))
        .collect();
    assert_eq!(before_start.len(), 4, "{seen:?}");
    assert!(capacity_reads(&seen).is_empty(), "{seen:?}");
}
