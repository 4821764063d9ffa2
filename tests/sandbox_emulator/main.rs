//! The sandbox's KubeVirt emulation, which every later test relies on: virt-api's start/stop
//! rules served through the aggregator with RBAC, the VM → VMI lifecycle and printableStatus,
//! VirtualMachineClone phases ending in a halted target VM, and the streaming subresources
//! (vnc, vnc/screenshot, portforward, usbredir) with the real guest-side servers behind them,
//! opened as a client does: a websocket upgrade through the API server's aggregator; and the VMI
//! subresources softreboot and userlist (the guest agent), and the disk-marker stand-in.
//!
//! One test binary (one sandbox), a module per part; the VM and stream clients they share are
//! here.

mod agent;
mod guests;
mod lifecycle;
mod softreboot;
mod stream_refusals;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
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

fn devices(object: &mut Value) -> &mut serde_json::Map<String, Value> {
    object["spec"]["template"]["spec"]["domain"]["devices"]
        .as_object_mut()
        .unwrap()
}
