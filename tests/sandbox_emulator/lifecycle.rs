//! VMs: virt-api's start/stop rules through the aggregator with RBAC, manual run strategies'
//! state-change requests, ErrorUnschedulable, the seed reconciled when start returns, and a
//! VirtualMachineClone walking its phases to a halted target.

use std::time::Duration;

use corral_tests::{client_as, namespace};
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::{clones, create_vm, subresource, vms, wait_status};

#[tokio::test]
async fn start_and_stop_follow_virt_api_rules_through_the_aggregator() {
    let admin = client_as("admin").await;
    let alice = client_as("alice").await;
    let ns = namespace("power").await;
    create_vm(&admin, &ns, "desk", "Halted").await;
    wait_status(&admin, &ns, "desk", "Stopped").await;

    assert_eq!(
        subresource(&alice, &ns, "desk", "stop").await.0,
        409,
        "stop of a stopped VM"
    );
    assert_eq!(subresource(&alice, &ns, "desk", "start").await.0, 202);
    let spec = vms(&admin, &ns).get("desk").await.unwrap().data["spec"].clone();
    assert_eq!(spec["runStrategy"], "Always", "start on Halted sets Always");
    wait_status(&admin, &ns, "desk", "Running").await;
    let (code, message) = subresource(&alice, &ns, "desk", "start").await;
    assert_eq!(code, 409);
    assert!(message.contains("already running"), "{message}");

    assert_eq!(subresource(&alice, &ns, "desk", "stop").await.0, 202);
    wait_status(&admin, &ns, "desk", "Stopped").await;

    let (code, message) = subresource(&alice, &ns, "nope", "start").await;
    assert_eq!(
        (code, message.contains("not found")),
        (404, true),
        "{message}"
    );
}

#[tokio::test]
async fn subresources_are_authorized_per_user() {
    let admin = client_as("admin").await;
    let ns = namespace("authz").await;
    create_vm(&admin, &ns, "desk", "Halted").await;
    wait_status(&admin, &ns, "desk", "Stopped").await;
    let (code, message) = subresource(&client_as("carol").await, &ns, "desk", "start").await;
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("carol") && message.contains("virtualmachines/start"),
        "{message}"
    );
    let spec = vms(&admin, &ns).get("desk").await.unwrap().data["spec"].clone();
    assert_eq!(
        spec["runStrategy"], "Halted",
        "a refused start changes nothing"
    );
}

#[tokio::test]
async fn manual_vms_act_on_state_change_requests_and_always_refuses_start() {
    let admin = client_as("admin").await;
    let alice = client_as("alice").await;
    let ns = namespace("manual").await;
    create_vm(&admin, &ns, "man", "Manual").await;
    create_vm(&admin, &ns, "alw", "Always").await;
    wait_status(&admin, &ns, "man", "Stopped").await;
    assert_eq!(subresource(&alice, &ns, "man", "start").await.0, 202);
    wait_status(&admin, &ns, "man", "Running").await;
    assert_eq!(subresource(&alice, &ns, "man", "stop").await.0, 202);
    wait_status(&admin, &ns, "man", "Stopped").await;

    wait_status(&admin, &ns, "alw", "Running").await;
    let (code, message) = subresource(&alice, &ns, "alw", "start").await;
    assert_eq!(code, 409, "{message}");
}

#[tokio::test]
async fn an_unschedulable_vm_shows_error_unschedulable() {
    let admin = client_as("admin").await;
    let ns = namespace("unsched").await;
    create_vm(&admin, &ns, "big", "Halted").await;
    let patch =
        json!({ "metadata": { "annotations": { "sandbox.corral.dev/unschedulable": "true" } } });
    vms(&admin, &ns)
        .patch(
            "big",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
    assert_eq!(subresource(&admin, &ns, "big", "start").await.0, 202);
    wait_status(&admin, &ns, "big", "ErrorUnschedulable").await;
}

#[tokio::test]
async fn a_clone_walks_its_phases_to_a_halted_target() {
    let admin = client_as("admin").await;
    let ns = namespace("clone").await;
    create_vm(&admin, &ns, "golden", "Halted").await;
    let clone: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": "c1", "namespace": ns },
        "spec": { "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "golden" },
                  "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "copy-1" },
                  "labelFilters": ["*", "!team"] }
    }))
    .unwrap();
    clones(&admin, &ns, "v1beta1")
        .create(&PostParams::default(), &clone)
        .await
        .unwrap();

    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let c = clones(&admin, &ns, "v1beta1").get("c1").await.unwrap();
        let phase = c
            .data
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        if seen.last().map(String::as_str) != Some(phase) {
            seen.push(phase.to_owned());
        }
        if phase == "Succeeded" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "clone stuck; phases {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for phase in [
        "SnapshotInProgress",
        "RestoreInProgress",
        "CreatingTargetVM",
    ] {
        assert!(
            seen.contains(&phase.to_owned()),
            "phase {phase} not seen in {seen:?}"
        );
    }
    let target = vms(&admin, &ns).get("copy-1").await.unwrap();
    assert_eq!(target.data["spec"]["runStrategy"], "Halted");
    let labels = target.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("desktop"));
    assert!(
        !labels.contains_key("team"),
        "filtered label copied: {labels:?}"
    );
    assert_eq!(
        target.data["spec"]["template"]["spec"]["domain"]["devices"]["clientPassthrough"],
        json!({})
    );
    // The same object is served as v1alpha1 too.
    clones(&admin, &ns, "v1alpha1").get("c1").await.unwrap();
}

#[tokio::test]
async fn the_seed_is_reconciled_when_start_returns() {
    // No waiting here: Sandbox::start returns only once the seed is as a user finds it.
    let admin = client_as("admin").await;
    let api = vms(&admin, sandbox::DEMO_NAMESPACE);
    for (name, power) in [
        ("golden-desktop", "Stopped"),
        ("legacy-1", "Stopped"),
        ("legacy-2", "Running"),
        ("legacy-3", "Stopped"),
    ] {
        let vm = api.get(name).await.unwrap();
        assert_eq!(
            vm.data.pointer("/status/printableStatus"),
            Some(&json!(power)),
            "{name}"
        );
        assert!(
            vm.data.pointer("/status/volumeSnapshotStatuses").is_some(),
            "{name} reports snapshot support"
        );
    }
}
