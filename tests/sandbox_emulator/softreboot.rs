//! The VMI subresource `softreboot` (a per-claim grant of the broker names it): authorized as
//! `update` on `virtualmachineinstances/softreboot`, virt-api's refusals (404, 409 not running,
//! 409 paused) before anything moves, and a running guest's reboot, which leaves the VMI (uid,
//! phase) as it was and is counted on it.

use corral_tests::{client_as, eventually, namespace};
use kube::Client;
use kube::api::{Patch, PatchParams};
use sandbox::emulator::knobs::{
    PAUSED_ANNOTATION, SOFT_REBOOTS_ANNOTATION, UNSCHEDULABLE_ANNOTATION,
};
use serde_json::{Value, json};

use crate::{STREAM_WAIT, create_vm, create_vm_with, vmi_url, vmis, vms, wait_status};

/// `PUT …/virtualmachineinstances/{name}/softreboot` as virtctl sends it: the HTTP status and
/// the Status message (empty on success).
async fn softreboot(client: &Client, ns: &str, name: &str) -> (u16, String) {
    let request = http::Request::put(vmi_url(ns, name, "softreboot"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(b"{}".to_vec()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let code = response.status().as_u16();
    let body = response.into_body().collect_bytes().await.unwrap();
    let message = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (code, message)
}

/// The VMI's resourceVersion, uid, phase and soft-reboot count.
async fn vmi_state(admin: &Client, ns: &str, name: &str) -> (String, String, String, String) {
    let vmi = vmis(admin, ns).get(name).await.unwrap();
    let count = vmi
        .metadata
        .annotations
        .unwrap_or_default()
        .get(SOFT_REBOOTS_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    (
        vmi.metadata.resource_version.unwrap(),
        vmi.metadata.uid.unwrap(),
        vmi.data["status"]["phase"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        count,
    )
}

#[tokio::test]
async fn softreboot_follows_virt_api_and_needs_its_own_rbac() {
    let admin = client_as("admin").await;
    let alice = client_as("alice").await;
    let ns = namespace("softreboot").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let before = vmi_state(&admin, &ns, "desk").await;

    // carol has no softreboot right: 403, worded as the API server words its own, and nothing
    // moved.
    let (code, message) = softreboot(&client_as("carol").await, &ns, "desk").await;
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("carol") && message.contains("virtualmachineinstances/softreboot"),
        "{message}"
    );
    assert_eq!(vmi_state(&admin, &ns, "desk").await, before);

    // alice's reboot is answered 200 (virt-handler's answer) and counted; the guest keeps its
    // VMI and its phase.
    assert_eq!(softreboot(&alice, &ns, "desk").await, (200, String::new()));
    assert_eq!(softreboot(&alice, &ns, "desk").await.0, 200);
    let (_, uid, phase, count) = vmi_state(&admin, &ns, "desk").await;
    assert_eq!(
        (uid, phase.as_str(), count.as_str()),
        (before.1.clone(), "Running", "2")
    );

    // No VMI: virt-api's 404.
    let (code, message) = softreboot(&alice, &ns, "nope").await;
    assert_eq!(
        (code, message.as_str()),
        (404, "virtualmachineinstance.kubevirt.io \"nope\" not found")
    );

    // Paused: 409, nothing moved.
    vms(&admin, &ns)
        .patch(
            "desk",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { PAUSED_ANNOTATION: "true" } } })),
        )
        .await
        .unwrap();
    wait_status(&admin, &ns, "desk", "Paused").await;
    let paused = vmi_state(&admin, &ns, "desk").await;
    let (code, message) = softreboot(&alice, &ns, "desk").await;
    assert_eq!(
        (code, message.as_str()),
        (
            409,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"desk\": VMI is \
             paused"
        )
    );
    assert_eq!(vmi_state(&admin, &ns, "desk").await, paused);

    // Not running (a VMI no node takes stays in Scheduling): 409, nothing moved.
    create_vm_with(&admin, &ns, "big", "Always", |vm| {
        vm["metadata"]["annotations"][UNSCHEDULABLE_ANNOTATION] = json!("true");
    })
    .await;
    wait_status(&admin, &ns, "big", "ErrorUnschedulable").await;
    let scheduling = eventually("big's VMI in Scheduling", STREAM_WAIT, || async {
        let state = vmi_state(&admin, &ns, "big").await;
        (state.2 == "Scheduling").then_some(state)
    })
    .await;
    let (code, message) = softreboot(&alice, &ns, "big").await;
    assert_eq!(
        (code, message.as_str()),
        (
            409,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"big\": VM is \
             not running"
        )
    );
    assert_eq!(vmi_state(&admin, &ns, "big").await, scheduling);
}
