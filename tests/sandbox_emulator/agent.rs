//! The guest agent's `userlist` (the broker's idle reclaim reads it) and the disk-marker stand-in
//! (the reset tests read it): `userlist` is authorized as `get` on
//! `virtualmachineinstances/userlist`, answers virt-api's plain-text 500s for a missing VMI, one
//! not running and a guest agent not connected, and lists the users of the VM's
//! `sandbox.corral.dev/guest-users`; the VMI reports `AgentConnected` as the annotation comes
//! and goes. `sandbox.corral.dev/disk-marker` stays through stop, start and restart, and a VM
//! cloned again from the golden VM does not have it.

use std::time::Duration;

use corral_tests::{annotate, client_as, eventually, namespace};
use kube::Client;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use sandbox::emulator::knobs::{
    DISK_MARKER_ANNOTATION, GUEST_USERS_ANNOTATION, UNSCHEDULABLE_ANNOTATION,
};
use serde_json::{Value, json};

use crate::{
    STREAM_WAIT, clones, create_vm, create_vm_with, subresource, vmi_url, vmis, vms, wait_status,
};

/// `GET …/userlist`: the status code, the Content-Type and the body.
async fn userlist(client: &Client, ns: &str, name: &str) -> (u16, String, String) {
    let request = http::Request::get(vmi_url(ns, name, "userlist"))
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.unwrap();
    let code = response.status().as_u16();
    let kind = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.into_body().collect_bytes().await.unwrap();
    (code, kind, String::from_utf8_lossy(&body).into_owned())
}

/// Whether the VMI `name` reports the condition `AgentConnected`.
async fn agent_connected(admin: &Client, ns: &str, name: &str) -> bool {
    let vmi = vmis(admin, ns).get(name).await.unwrap();
    vmi.data["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "AgentConnected"))
}

fn conflict(name: &str, why: &str) -> String {
    format!("Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"{name}\": {why}")
}

#[tokio::test]
async fn userlist_answers_from_the_guest_users_annotation_as_virt_api_would() {
    let admin = client_as("admin").await;
    let ns = namespace("agent").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;

    // No annotation: the agent is not connected, which virt-api reports as a plain-text 500.
    let (code, kind, body) = userlist(&admin, &ns, "desk").await;
    assert_eq!(
        (code, body.as_str()),
        (
            500,
            conflict("desk", "VMI does not have guest agent connected").as_str()
        )
    );
    assert!(kind.starts_with("text/plain"), "{kind}");
    assert!(!agent_connected(&admin, &ns, "desk").await);

    // Without the right (the client-side flow's users do not hold userlist): 403, worded as the
    // API server words its own.
    let (code, _, body) = userlist(&client_as("alice").await, &ns, "desk").await;
    let message = serde_json::from_str::<Value>(&body).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("alice") && message.contains("virtualmachineinstances/userlist"),
        "{message}"
    );

    // An empty value: connected, nobody logged in.
    annotate(&ns, "desk", GUEST_USERS_ANNOTATION, Some("")).await;
    let (code, _, body) = userlist(&admin, &ns, "desk").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({ "metadata": {}, "items": [] })
    );
    eventually("desk's VMI AgentConnected", STREAM_WAIT, || async {
        agent_connected(&admin, &ns, "desk").await.then_some(())
    })
    .await;

    // Two users, each logged in since the VMI was created (Unix seconds), no domain.
    annotate(&ns, "desk", GUEST_USERS_ANNOTATION, Some("alice, bob")).await;
    let (code, _, body) = userlist(&admin, &ns, "desk").await;
    assert_eq!(code, 200, "{body}");
    let vmi = vmis(&admin, &ns).get("desk").await.unwrap();
    let created = vmi.metadata.creation_timestamp.unwrap().0.as_second() as f64;
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        list["items"],
        json!([{ "userName": "alice", "loginTime": created },
               { "userName": "bob", "loginTime": created }])
    );

    // The annotation removed: disconnected again, the condition gone.
    annotate(&ns, "desk", GUEST_USERS_ANNOTATION, None).await;
    assert_eq!(userlist(&admin, &ns, "desk").await.0, 500);
    eventually("desk's VMI without AgentConnected", STREAM_WAIT, || async {
        (!agent_connected(&admin, &ns, "desk").await).then_some(())
    })
    .await;

    // No VMI: a stopped VM, or none at all.
    annotate(&ns, "desk", GUEST_USERS_ANNOTATION, Some("")).await;
    assert_eq!(subresource(&admin, &ns, "desk", "stop").await.0, 202);
    wait_status(&admin, &ns, "desk", "Stopped").await;
    for name in ["desk", "nope"] {
        let (code, _, body) = userlist(&admin, &ns, name).await;
        assert_eq!(
            (code, body),
            (
                500,
                format!("virtualmachineinstance.kubevirt.io \"{name}\" not found")
            )
        );
    }

    // A VMI that is not running (no node takes it), the agent "there" all the same.
    create_vm_with(&admin, &ns, "big", "Always", |vm| {
        vm["metadata"]["annotations"][UNSCHEDULABLE_ANNOTATION] = json!("true");
        vm["metadata"]["annotations"][GUEST_USERS_ANNOTATION] = json!("alice");
    })
    .await;
    wait_status(&admin, &ns, "big", "ErrorUnschedulable").await;
    let (code, _, body) = userlist(&admin, &ns, "big").await;
    assert_eq!(
        (code, body.as_str()),
        (500, conflict("big", "VMI is not running").as_str())
    );
}

/// Clones `source` to `target` in `ns` (clone object `clone`, no filters) and waits for the
/// target VM, stopped.
async fn clone_vm(admin: &Client, ns: &str, clone: &str, source: &str, target: &str) {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": clone, "namespace": ns },
        "spec": { "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": source },
                  "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": target } }
    }))
    .unwrap();
    clones(admin, ns, "v1beta1")
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    eventually(
        &format!("{target} cloned"),
        Duration::from_secs(20),
        || async { vms(admin, ns).get_opt(target).await.unwrap().map(|_| ()) },
    )
    .await;
    wait_status(admin, ns, target, "Stopped").await;
}

async fn marker(admin: &Client, ns: &str, name: &str) -> Option<String> {
    vms(admin, ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .get(DISK_MARKER_ANNOTATION)
        .cloned()
}

#[tokio::test]
async fn the_disk_marker_survives_power_and_not_a_new_clone() {
    let admin = client_as("admin").await;
    let ns = namespace("marker").await;
    create_vm(&admin, &ns, "gold", "Halted").await;
    clone_vm(&admin, &ns, "c1", "gold", "gold-1").await;
    annotate(&ns, "gold-1", DISK_MARKER_ANNOTATION, Some("written")).await;
    let written = Some("written".to_owned());

    assert_eq!(subresource(&admin, &ns, "gold-1", "start").await.0, 202);
    wait_status(&admin, &ns, "gold-1", "Running").await;
    let first = vmis(&admin, &ns).get("gold-1").await.unwrap().metadata.uid;
    assert_eq!(marker(&admin, &ns, "gold-1").await, written, "after start");
    assert_eq!(subresource(&admin, &ns, "gold-1", "restart").await.0, 202);
    eventually("gold-1 running on a new VMI", STREAM_WAIT, || async {
        let vmi = vmis(&admin, &ns).get_opt("gold-1").await.unwrap()?;
        (vmi.metadata.uid != first && vmi.data["status"]["phase"] == "Running").then_some(())
    })
    .await;
    assert_eq!(
        marker(&admin, &ns, "gold-1").await,
        written,
        "after restart"
    );
    assert_eq!(subresource(&admin, &ns, "gold-1", "stop").await.0, 202);
    wait_status(&admin, &ns, "gold-1", "Stopped").await;
    assert_eq!(marker(&admin, &ns, "gold-1").await, written, "after stop");

    // Re-cloned from the golden VM: the golden VM's annotations, not the old member's.
    vms(&admin, &ns)
        .delete("gold-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("gold-1 gone", STREAM_WAIT, || async {
        vms(&admin, &ns)
            .get_opt("gold-1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    clone_vm(&admin, &ns, "c2", "gold", "gold-1").await;
    let annotations = vms(&admin, &ns)
        .get("gold-1")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(
        !annotations.contains_key(DISK_MARKER_ANNOTATION),
        "{annotations:?}"
    );
    assert_eq!(annotations.get("note").map(String::as_str), Some("golden"));
}
