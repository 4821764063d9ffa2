//! The sandbox's KubeVirt emulation, which every later test relies on: virt-api's start/stop
//! rules served through the aggregator with RBAC, the VM → VMI lifecycle and printableStatus,
//! VirtualMachineClone phases ending in a halted target VM, and the streaming subresources
//! (vnc, vnc/screenshot, portforward, usbredir) with the real guest-side servers behind them,
//! opened as a client does: a websocket upgrade through the API server's aggregator.

use std::time::Duration;

use corral_tests::{client_as, namespace};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

fn vms(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn clones(client: &Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("clone.kubevirt.io", version, "VirtualMachineClone"),
        "virtualmachineclones",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn create_vm(admin: &Client, ns: &str, name: &str, strategy: &str) {
    create_vm_with(admin, ns, name, strategy, |_| {}).await;
}

/// Like [`create_vm`], after `tweak` has changed the object.
async fn create_vm_with(
    admin: &Client,
    ns: &str,
    name: &str,
    strategy: &str,
    tweak: impl FnOnce(&mut Value),
) {
    let mut object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns, "labels": { "app": "desktop", "team": "a" },
                      "annotations": { "note": "golden" } },
        "spec": sandbox::bootstrap::golden_spec(strategy, name),
    });
    tweak(&mut object);
    let vm: DynamicObject = serde_json::from_value(object).unwrap();
    vms(admin, ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();
}

/// PUT on a VM subresource, as virtctl does; returns the HTTP status code.
async fn subresource(client: &Client, ns: &str, vm: &str, action: &str) -> (u16, String) {
    let url =
        format!("/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{vm}/{action}");
    let request = http::Request::put(url).body(b"{}".to_vec()).unwrap();
    match client.request_text(request).await {
        Ok(body) => (202, body),
        Err(kube::Error::Api(status)) => (status.code, status.message),
        Err(e) => panic!("{action} {vm}: {e}"),
    }
}

async fn printable(admin: &Client, ns: &str, vm: &str) -> String {
    let obj = vms(admin, ns).get(vm).await.unwrap();
    obj.data
        .pointer("/status/printableStatus")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

async fn wait_status(admin: &Client, ns: &str, vm: &str, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let now = printable(admin, ns, vm).await;
        if now == want {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let obj = vms(admin, ns).get(vm).await.unwrap();
            panic!("{vm} is {now:?}, not {want:?}, after 15 s: {:?}", obj.data);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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

// ---------------------------------------------------------------------------------------------
// Stream subresources: a websocket client built as the product builds it (kube's `Client::send`
// with the upgrade headers, then tungstenite on the upgraded connection), through the API
// server's aggregator to the emulated virt-api.

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// A client acting as `user` without kube's default retries, so that 503 and 504 reach the test.
async fn stream_client(user: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(&corral_tests::sandbox().kubeconfig).unwrap();
    let options = KubeConfigOptions {
        context: Some(user.to_owned()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

fn vmi_url(ns: &str, name: &str, sub: &str) -> String {
    format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}/{sub}"
    )
}

fn vmis(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// What a stream request got.
enum Opened {
    /// 101: the websocket and the subprotocol the server chose.
    Stream(Box<Ws>, Option<String>),
    /// Anything else: the code and the body.
    Refused(u16, Vec<u8>),
}

/// Opens a stream. The API server's aggregator relays a refusal of an upgrade request and then
/// closes the connection without saying so (`Connection: close` is absent; k8s.io/apimachinery
/// `pkg/util/proxy/upgradeaware.go`), so a pooled connection may be dead when the next request
/// goes out: a request that failed to be sent is sent again, as a product client must.
async fn open(client: &Client, url: &str) -> Opened {
    open_offering(client, url, Some("plain.kubevirt.io")).await
}

/// Like [`open`], offering the subprotocol `offer` (none when `None`).
async fn open_offering(client: &Client, url: &str, offer: Option<&str>) -> Opened {
    let key = generate_key();
    let mut attempt = 0;
    let response = loop {
        let mut request = http::Request::get(url)
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "websocket")
            .header(http::header::SEC_WEBSOCKET_VERSION, "13")
            .header(http::header::SEC_WEBSOCKET_KEY, &key);
        if let Some(offer) = offer {
            request = request.header(http::header::SEC_WEBSOCKET_PROTOCOL, offer);
        }
        let request = request.body(kube::client::Body::empty()).unwrap();
        attempt += 1;
        match client.send(request).await {
            Ok(response) => break response,
            Err(kube::Error::Service(e)) if attempt < 3 => {
                eprintln!("GET {url}: {e}; sending again");
            }
            Err(e) => panic!("GET {url}: {e}"),
        }
    };
    let code = response.status().as_u16();
    if code != 101 {
        let body = response.into_body().collect_bytes().await.unwrap();
        return Opened::Refused(code, body.to_vec());
    }
    let headers = response.headers().clone();
    let header = |name: http::header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header(http::header::SEC_WEBSOCKET_ACCEPT),
        Some(derive_accept_key(key.as_bytes())),
        "Sec-WebSocket-Accept of {url}"
    );
    let protocol = header(http::header::SEC_WEBSOCKET_PROTOCOL);
    let upgraded = hyper::upgrade::on(response).await.unwrap();
    let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
    Opened::Stream(Box::new(ws), protocol)
}

/// A stream request that must be refused: its code and its Status message (or body text).
async fn refused(client: &Client, url: &str) -> (u16, String) {
    match open(client, url).await {
        Opened::Stream(..) => panic!("{url} was upgraded; expected a refusal"),
        Opened::Refused(code, body) => {
            let message = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            (code, message)
        }
    }
}

/// A stream request that must be upgraded, with `plain.kubevirt.io` echoed.
async fn stream(client: &Client, url: &str) -> Pipe {
    match open(client, url).await {
        Opened::Stream(ws, protocol) => {
            assert_eq!(protocol.as_deref(), Some("plain.kubevirt.io"), "{url}");
            Pipe {
                ws: *ws,
                buf: Vec::new(),
                pings: 0,
            }
        }
        Opened::Refused(code, body) => {
            panic!("{url}: {code} {}", String::from_utf8_lossy(&body))
        }
    }
}

/// Raw bytes over a stream's binary frames.
struct Pipe {
    ws: Ws,
    buf: Vec<u8>,
    pings: usize,
}

const STREAM_WAIT: Duration = Duration::from_secs(10);

impl Pipe {
    async fn send(&mut self, data: &[u8]) {
        self.ws
            .send(Message::Binary(data.to_vec().into()))
            .await
            .unwrap();
    }

    /// The next frame, or `None` when the stream ended; panics after [`STREAM_WAIT`].
    async fn frame(&mut self, what: &str) -> Option<Message> {
        match tokio::time::timeout(STREAM_WAIT, self.ws.next()).await {
            Err(_) => panic!("nothing within {STREAM_WAIT:?} while waiting for {what}"),
            Ok(Some(Ok(Message::Ping(_)))) => {
                self.pings += 1;
                Some(Message::Ping(Default::default()))
            }
            Ok(Some(Ok(message))) => Some(message),
            Ok(Some(Err(_)) | None) => None,
        }
    }

    async fn read(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            match self.frame(&format!("{n} bytes")).await {
                Some(Message::Binary(bytes)) => self.buf.extend_from_slice(&bytes),
                Some(_) => {}
                None => panic!("the stream ended with {} of {n} bytes read", self.buf.len()),
            }
        }
        self.buf.drain(..n).collect()
    }

    async fn read_line(&mut self) -> String {
        let mut line = Vec::new();
        while !line.ends_with(b"\n") {
            line.extend(self.read(1).await);
        }
        String::from_utf8_lossy(&line).into_owned()
    }

    /// Waits for the server to end the stream, which it does without a close frame (1006).
    async fn ends(&mut self) {
        loop {
            match self.frame("the end of the stream").await {
                None => return,
                Some(Message::Close(frame)) => panic!("the server sent a close frame: {frame:?}"),
                Some(_) => {}
            }
        }
    }
}

async fn wait_annotation(admin: &Client, ns: &str, vmi: &str, key: &str, want: &str) {
    let api = vmis(admin, ns);
    corral_tests::eventually(
        &format!("VMI {vmi} annotated {key}={want}"),
        STREAM_WAIT,
        || async {
            let got = api.get(vmi).await.ok()?.metadata.annotations?;
            (got.get(key).map(String::as_str) == Some(want)).then_some(())
        },
    )
    .await
}

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

fn devices(object: &mut Value) -> &mut serde_json::Map<String, Value> {
    object["spec"]["template"]["spec"]["domain"]["devices"]
        .as_object_mut()
        .unwrap()
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

/// `(red, green, blue)` of a raw RFB pixel in the server's pixel format.
fn rgb(pixel: &[u8], init: &[u8]) -> (u8, u8, u8) {
    let value = if init[6] != 0 {
        u32::from_be_bytes(pixel.try_into().unwrap())
    } else {
        u32::from_le_bytes(pixel.try_into().unwrap())
    };
    let channel = |max_at: usize, shift_at: usize| {
        let max = u32::from(u16::from_be_bytes([init[max_at], init[max_at + 1]]));
        let raw = (value >> init[shift_at]) & max;
        (raw * 255 / max.max(1)) as u8
    };
    (channel(8, 14), channel(10, 15), channel(12, 16))
}

#[tokio::test]
async fn vnc_is_a_real_rfb_server_with_one_viewer_at_a_time() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("vnc").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let url = vmi_url(&ns, "desk", "vnc");

    let mut first = stream(&alice, &url).await;
    assert_eq!(first.read(12).await, b"RFB 003.008\n");
    first.send(b"RFB 003.008\n").await;
    let count = first.read(1).await[0];
    let types = first.read(usize::from(count)).await;
    assert!(types.contains(&1), "security type None offered: {types:?}");
    first.send(&[1]).await;
    assert_eq!(first.read(4).await, [0, 0, 0, 0], "SecurityResult OK");
    first.send(&[1]).await; // ClientInit: shared
    let init = first.read(24).await;
    let width = u16::from_be_bytes([init[0], init[1]]);
    let height = u16::from_be_bytes([init[2], init[3]]);
    assert_eq!((width, height), (1024, 768), "ServerInit framebuffer size");
    assert_eq!(init[4], 32, "bits per pixel");
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]);
    let name = first.read(name_len as usize).await;
    assert_eq!(String::from_utf8_lossy(&name), format!("{ns}/desk"));

    // The whole screen, raw: the VM's colour around a window that names it.
    let [w0, w1] = width.to_be_bytes();
    let [h0, h1] = height.to_be_bytes();
    first.send(&[3, 0, 0, 0, 0, 0, w0, w1, h0, h1]).await;
    let header = first.read(4).await;
    assert_eq!(header[0], 0, "a FramebufferUpdate");
    let rects = u16::from_be_bytes([header[2], header[3]]);
    assert!(rects >= 1);
    let mut colours = std::collections::HashSet::new();
    let mut corner = None;
    for _ in 0..rects {
        let rect = first.read(12).await;
        let (x, y) = (
            u16::from_be_bytes([rect[0], rect[1]]),
            u16::from_be_bytes([rect[2], rect[3]]),
        );
        let (w, h) = (
            usize::from(u16::from_be_bytes([rect[4], rect[5]])),
            usize::from(u16::from_be_bytes([rect[6], rect[7]])),
        );
        assert_eq!(rect[8..12], [0, 0, 0, 0], "raw encoding");
        let pixels = first.read(w * h * 4).await;
        for pixel in pixels.chunks(4) {
            colours.insert(rgb(pixel, &init));
        }
        if (x, y) == (0, 0) && w > 0 && h > 0 {
            corner = Some(rgb(&pixels[..4], &init));
        }
    }
    assert!(colours.len() >= 2, "the screen is one flat colour");
    let key = sandbox::emulator::guests::GuestKey {
        namespace: ns.clone(),
        name: "desk".into(),
        uid: String::new(),
    };
    let want = sandbox::emulator::guests::screen_colour(&key);
    let hex = |i: usize| u8::from_str_radix(&want[i..i + 2], 16).unwrap();
    assert_eq!(corner, Some((hex(1), hex(3), hex(5))), "background {want}");

    // Someone views: preserveSession=true is refused, and so is a screenshot.
    let (code, message) = refused(&alice, &format!("{url}?preserveSession=true")).await;
    assert_eq!(
        (code, message.as_str()),
        (503, "Active VNC connection. Request denied.")
    );
    let (code, message) = refused(&alice, &vmi_url(&ns, "desk", "vnc/screenshot")).await;
    assert_eq!(code, 500, "{message}");
    assert!(message.contains("Active VNC connection"), "{message}");

    // Without preserveSession a second viewer takes over: the first stream ends (1006).
    let mut second = stream(&alice, &url).await;
    assert_eq!(second.read(12).await, b"RFB 003.008\n");
    first.ends().await;
    drop(second);

    // Once nobody views, preserveSession=true connects, and a screenshot is a PNG.
    let free = corral_tests::eventually("the viewer slot freed", STREAM_WAIT, || async {
        match open(&alice, &format!("{url}?preserveSession=true")).await {
            Opened::Stream(ws, _) => Some(ws),
            Opened::Refused(..) => None,
        }
    })
    .await;
    drop(free);
    let png = corral_tests::eventually("a screenshot", STREAM_WAIT, || async {
        let request = http::Request::get(vmi_url(&ns, "desk", "vnc/screenshot"))
            .body(kube::client::Body::empty())
            .unwrap();
        let response = alice.send(request).await.ok()?;
        if response.status() != 200 {
            return None;
        }
        let content_type = response.headers().get(http::header::CONTENT_TYPE).cloned();
        assert_eq!(content_type.unwrap(), "image/png");
        Some(response.into_body().collect_bytes().await.unwrap())
    })
    .await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let dims = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    assert_eq!(dims, (1024, 768));
}

/// Serves 127.0.0.1:<port>, each connection a portforward stream to `url` (what `virtctl
/// port-forward` does), and returns the port.
async fn forward_locally(client: Client, url: String) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let mut pipe = stream(&client, &url).await;
            tokio::spawn(async move {
                let (mut read, mut write) = tcp.into_split();
                let mut buf = vec![0u8; 32 * 1024];
                loop {
                    tokio::select! {
                        n = read.read(&mut buf) => match n {
                            Ok(0) | Err(_) => break,
                            Ok(n) => pipe.send(&buf[..n]).await,
                        },
                        message = pipe.ws.next() => match message {
                            Some(Ok(Message::Binary(bytes))) => {
                                if write.write_all(&bytes).await.is_err() {
                                    break;
                                }
                            }
                            Some(Ok(_)) => {}
                            _ => break,
                        },
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn portforward_reaches_real_ssh_and_rdp_servers() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("pf").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    create_vm_with(&admin, &ns, "web", "Always", |o| {
        o["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("8080");
    })
    .await;
    wait_status(&admin, &ns, "desk", "Running").await;
    wait_status(&admin, &ns, "web", "Running").await;

    // Guest port 22: a real OpenSSH, pinged by virt-api every second.
    let mut ssh = stream(&alice, &vmi_url(&ns, "desk", "portforward/22")).await;
    let banner = ssh.read_line().await;
    assert!(banner.starts_with("SSH-2.0-OpenSSH"), "{banner:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while ssh.pings == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no keep-alive ping");
        ssh.frame("a ping").await;
    }
    drop(ssh);

    // A real login with the sandbox's key, through a local port-forward.
    let shared = corral_tests::sandbox();
    let port = forward_locally(alice.clone(), vmi_url(&ns, "desk", "portforward/22")).await;
    let host_key = std::fs::read_to_string(&shared.ssh_host_public_key).unwrap();
    let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
    let known_hosts = std::env::temp_dir().join(format!("corral-known-hosts-{ns}"));
    std::fs::write(
        &known_hosts,
        format!("[127.0.0.1]:{port} {}\n", host_key.join(" ")),
    )
    .unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new("ssh")
            .args([
                "-F",
                "/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
            ])
            .args(["-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=15"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .arg("-i")
            .arg(&shared.ssh_client_key)
            .args(["-p", &port.to_string()])
            .arg(format!("{}@127.0.0.1", shared.ssh_user))
            .args(["echo", "corral-ok"])
            .output(),
    )
    .await
    .expect("ssh finished within 30 s")
    .expect("ssh runs");
    let _ = std::fs::remove_file(&known_hosts);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "corral-ok",
        "ssh: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    // Guest port 3389: a real RDP server answers an X.224 Connection Request.
    let mut rdp = stream(&alice, &vmi_url(&ns, "desk", "portforward/3389/tcp")).await;
    rdp.send(&[
        3, 0, 0, 19, // TPKT, 19 bytes
        14, 0xE0, 0, 0, 0, 0, 0, // X.224 Connection Request
        1, 0, 8, 0, 3, 0, 0, 0, // RDP_NEG_REQ: TLS | CredSSP
    ])
    .await;
    let tpkt = rdp.read(4).await;
    assert_eq!(tpkt[0], 3, "TPKT version");
    let length = usize::from(u16::from_be_bytes([tpkt[2], tpkt[3]]));
    let x224 = rdp.read(length - 4).await;
    assert_eq!(x224[1], 0xD0, "X.224 Connection Confirm: {x224:?}");
    drop(rdp);

    // Per-VM open ports: "web" answers only on 8080 (an echo service).
    let (code, message) = refused(&alice, &vmi_url(&ns, "web", "portforward/22")).await;
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("127.0.0.1:22: connect: connection refused"),
        "{message}"
    );
    let mut echo = stream(&alice, &vmi_url(&ns, "web", "portforward/8080")).await;
    echo.ws
        .send(Message::Text("text frames are dropped".into()))
        .await
        .unwrap();
    echo.send(b"hello guest").await;
    assert_eq!(echo.read(11).await, b"hello guest");

    // Without an offered subprotocol the server still upgrades, naming none.
    match open_offering(&alice, &vmi_url(&ns, "web", "portforward/8080"), None).await {
        Opened::Stream(_, protocol) => assert_eq!(protocol, None),
        Opened::Refused(code, body) => panic!("{code} {}", String::from_utf8_lossy(&body)),
    }
}

fn usbredir_hello() -> Vec<u8> {
    let mut hello = Vec::new();
    hello.extend_from_slice(&0u32.to_le_bytes()); // type: hello
    hello.extend_from_slice(&68u32.to_le_bytes()); // length
    hello.extend_from_slice(&0u32.to_le_bytes()); // id
    let mut version = [0u8; 64];
    version[..11].copy_from_slice(b"test client");
    hello.extend_from_slice(&version);
    hello.extend_from_slice(&0u32.to_le_bytes()); // caps
    hello
}

#[tokio::test]
async fn usbredir_exchanges_hellos_in_four_slots() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("usb").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let url = vmi_url(&ns, "desk", "usbredir");
    let attached = "sandbox.corral.dev/usbredir-attached";

    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut usb = stream(&alice, &url).await;
        usb.send(&usbredir_hello()).await;
        let header = usb.read(12).await;
        assert_eq!(
            header[..8],
            [0, 0, 0, 0, 68, 0, 0, 0],
            "a hello of 68 bytes"
        );
        let body = usb.read(68).await;
        assert!(
            body.starts_with(b"corral-sandbox usbredir\0"),
            "{:?}",
            String::from_utf8_lossy(&body[..64])
        );
        streams.push(usb);
    }
    wait_annotation(&admin, &ns, "desk", attached, "4").await;
    match open(&alice, &url).await {
        Opened::Refused(code, body) => assert_eq!((code, body.len()), (503, 0), "fifth device"),
        Opened::Stream(..) => panic!("a fifth usbredir stream was accepted"),
    }

    drop(streams.pop());
    wait_annotation(&admin, &ns, "desk", attached, "3").await;
    // A stream that does not start with a hello is closed without one.
    let mut bad = stream(&alice, &url).await;
    bad.send(&[7, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]).await;
    bad.ends().await;
    wait_annotation(&admin, &ns, "desk", attached, "3").await;

    streams.clear();
    wait_annotation(&admin, &ns, "desk", attached, "0").await;
}

#[tokio::test]
async fn a_stopped_vm_takes_its_display_and_streams_with_it() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let plain_alice = client_as("alice").await;
    let ns = namespace("xvncstop").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let annotations = |vmi: DynamicObject| vmi.metadata.annotations.unwrap_or_default();
    let before = annotations(vmis(&admin, &ns).get("desk").await.unwrap());
    assert!(
        !before.contains_key("sandbox.corral.dev/xvnc-pid"),
        "a running VMI gets no display before anyone asks: {before:?}"
    );

    let mut viewer = stream(&alice, &vmi_url(&ns, "desk", "vnc")).await;
    assert_eq!(viewer.read(12).await, b"RFB 003.008\n");
    let after = annotations(vmis(&admin, &ns).get("desk").await.unwrap());
    let pid: u32 = after["sandbox.corral.dev/xvnc-pid"].parse().unwrap();
    let rfb: u16 = after["sandbox.corral.dev/xvnc-rfbport"].parse().unwrap();
    let rdp: u16 = after["sandbox.corral.dev/rdp-port"].parse().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    for port in [rfb, rdp] {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("port {port}: {e}"));
    }

    assert_eq!(subresource(&plain_alice, &ns, "desk", "stop").await.0, 202);
    viewer.ends().await;
    wait_status(&admin, &ns, "desk", "Stopped").await;
    corral_tests::eventually("Xvnc and its RDP server gone", STREAM_WAIT, || async {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        let listening = tokio::net::TcpStream::connect(("127.0.0.1", rfb))
            .await
            .is_ok()
            || tokio::net::TcpStream::connect(("127.0.0.1", rdp))
                .await
                .is_ok();
        (!alive && !listening).then_some(())
    })
    .await;
}
