//! The stream subresources as virt-api lists and refuses them: discovery, each refusal (Status
//! bodies before the upgrade) through the aggregator, and RBAC on each subresource.

use corral_tests::{client_as, namespace};
use kube::Client;
use serde_json::{Value, json};

use crate::{
    Opened, STREAM_WAIT, create_vm, create_vm_with, devices, open, refused, stream, stream_client,
    vmi_url, vmis, vms, wait_status,
};

async fn annotate_vm(admin: &Client, ns: &str, vm: &str, key: &str, value: Option<&str>) {
    let patch = json!({ "metadata": { "annotations": { key: value } } });
    vms(admin, ns)
        .patch(
            vm,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn discovery_lists_the_stream_subresources_as_kubevirt_does() {
    let admin = client_as("admin").await;
    let request = http::Request::get("/apis/subresources.kubevirt.io/v1")
        .body(Vec::new())
        .unwrap();
    let list: Value = serde_json::from_str(&admin.request_text(request).await.unwrap()).unwrap();
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for name in [
        "virtualmachineinstances/vnc",
        "virtualmachineinstances/vnc/screenshot",
        "virtualmachineinstances/console",
        "virtualmachineinstances/portforward",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    assert!(
        !names.contains(&"virtualmachineinstances/usbredir"),
        "KubeVirt serves usbredir without listing it: {names:?}"
    );
}

#[tokio::test]
async fn stream_refusals_follow_virt_api_through_the_aggregator() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("refuse").await;
    let annotate = |key: &'static str, value: &'static str| {
        move |o: &mut Value| o["metadata"]["annotations"][key] = json!(value)
    };
    create_vm(&admin, &ns, "desk", "Always").await;
    create_vm_with(
        &admin,
        &ns,
        "stuck",
        "Always",
        annotate("sandbox.corral.dev/unschedulable", "true"),
    )
    .await;
    create_vm_with(&admin, &ns, "headless", "Always", |o| {
        devices(o).insert("autoattachGraphicsDevice".into(), json!(false));
    })
    .await;
    create_vm_with(&admin, &ns, "nousb", "Always", |o| {
        devices(o).remove("clientPassthrough");
    })
    .await;
    create_vm_with(&admin, &ns, "nonet", "Always", |o| {
        devices(o).remove("interfaces");
        devices(o).insert("autoattachPodInterface".into(), json!(false));
        o["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("networks");
    })
    .await;
    create_vm_with(
        &admin,
        &ns,
        "paused",
        "Always",
        annotate("sandbox.corral.dev/paused", "true"),
    )
    .await;
    create_vm_with(
        &admin,
        &ns,
        "forced",
        "Always",
        annotate(
            "sandbox.corral.dev/force-status",
            "vnc=503,screenshot=500,portforward=504,usbredir=409",
        ),
    )
    .await;
    for (vm, power) in [
        ("desk", "Running"),
        ("stuck", "ErrorUnschedulable"),
        ("headless", "Running"),
        ("nousb", "Running"),
        ("nonet", "Running"),
        ("paused", "Paused"),
        ("forced", "Running"),
    ] {
        wait_status(&admin, &ns, vm, power).await;
    }

    let not_found = "virtualmachineinstance.kubevirt.io \"nope\" not found";
    let cases: &[(&str, &str, u16, &str)] = &[
        ("nope", "vnc", 404, not_found),
        ("nope", "vnc/screenshot", 404, not_found),
        ("nope", "portforward/22", 404, not_found),
        ("nope", "usbredir", 404, not_found),
        ("stuck", "vnc", 400, "VMI is not running"),
        ("stuck", "usbredir", 400, "VMI is not running"),
        ("headless", "vnc", 400, "No graphics devices are present."),
        (
            "headless",
            "vnc/screenshot",
            400,
            "No graphics devices are present.",
        ),
        (
            "nousb",
            "usbredir",
            409,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"nousb\": Not configured with USB Redirection",
        ),
        (
            "paused",
            "portforward/22",
            409,
            "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"paused\": VMI is paused",
        ),
        (
            "nonet",
            "portforward/22",
            400,
            "no network interfaces are present",
        ),
        (
            "desk",
            "portforward/8080",
            500,
            "Internal error occurred: dialing VM: dial tcp 127.0.0.1:8080: connect: connection refused",
        ),
        (
            "desk",
            "portforward/5900/tcp",
            500,
            "dialing VM: dial tcp 127.0.0.1:5900: connect: connection refused",
        ),
        ("desk", "portforward/22/udp", 400, "unsupported"),
        (
            "forced",
            "vnc",
            503,
            "Active VNC connection. Request denied.",
        ),
        ("forced", "portforward/22", 504, "Timeout"),
        (
            "forced",
            "usbredir",
            409,
            "Not configured with USB Redirection",
        ),
        ("forced", "vnc/screenshot", 500, "Internal error occurred"),
    ];
    for (vm, sub, code, message) in cases {
        let (got, text) = refused(&alice, &vmi_url(&ns, vm, sub)).await;
        assert_eq!(got, *code, "{vm}/{sub}: {text}");
        assert!(
            text.contains(message),
            "{vm}/{sub}: {text:?} lacks {message:?}"
        );
    }
    let (code, text) = refused(&alice, &vmi_url(&ns, "nope", "vnc")).await;
    assert_eq!((code, text.as_str()), (404, not_found));

    // A paused VMI keeps phase Running: vnc and usbredir still connect.
    let vmi = vmis(&admin, &ns).get("paused").await.unwrap();
    assert_eq!(vmi.data["status"]["phase"], "Running");
    let conditions = vmi.data["status"]["conditions"].as_array().unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Paused" && c["status"] == "True"),
        "{conditions:?}"
    );
    drop(stream(&alice, &vmi_url(&ns, "paused", "vnc")).await);
    drop(stream(&alice, &vmi_url(&ns, "paused", "usbredir")).await);
    // Unpaused, it forwards again.
    annotate_vm(&admin, &ns, "paused", "sandbox.corral.dev/paused", None).await;
    wait_status(&admin, &ns, "paused", "Running").await;
    corral_tests::eventually("portforward after unpause", STREAM_WAIT, || async {
        match open(&alice, &vmi_url(&ns, "paused", "portforward/22")).await {
            Opened::Stream(..) => Some(()),
            Opened::Refused(..) => None,
        }
    })
    .await;

    // A request that passes every check but is no websocket upgrade.
    let plain = http::Request::get(vmi_url(&ns, "desk", "portforward/22"))
        .body(kube::client::Body::empty())
        .unwrap();
    let response = alice.send(plain).await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
}

#[tokio::test]
async fn streams_need_the_subresource_in_rbac() {
    let admin = client_as("admin").await;
    let carol = stream_client("carol").await;
    let ns = namespace("streamauthz").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    for (sub, rbac) in [
        ("vnc", "virtualmachineinstances/vnc"),
        ("vnc/screenshot", "virtualmachineinstances/vnc"),
        ("portforward/22", "virtualmachineinstances/portforward"),
        ("usbredir", "virtualmachineinstances/usbredir"),
    ] {
        let (code, message) = refused(&carol, &vmi_url(&ns, "desk", sub)).await;
        assert_eq!(code, 403, "{sub}: {message}");
        assert!(
            message.contains("carol") && message.contains(rbac),
            "{sub}: {message}"
        );
    }
    let alice = stream_client("alice").await;
    drop(stream(&alice, &vmi_url(&ns, "desk", "portforward/22")).await);
}
