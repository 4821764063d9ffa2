//! The streaming subresources of virt-api's `subresources.kubevirt.io/v1`, on VMIs:
//!
//! | `GET …/namespaces/{ns}/virtualmachineinstances/{name}/…` | RBAC subresource | answers |
//! |---|---|---|
//! | `vnc[?preserveSession=true]` | `vnc` | websocket ↔ the VMI's Xvnc (raw RFB) |
//! | `vnc/screenshot` | `vnc` | `200 image/png` of the VMI's screen |
//! | `portforward/{port}[/tcp]` | `portforward` | websocket ↔ guest TCP port, pinged every second |
//! | `portforward/{port}/udp` | `portforward` | 400 (UDP is not emulated) |
//! | `usbredir` | `usbredir` | websocket ↔ an emulated usbredir server (hello exchange) |
//!
//! Every refusal comes before the upgrade as a normal HTTP answer with a `metav1.Status` body,
//! in the order virt-api checks (KubeVirt `pkg/virt-api/rest/`: `authorizer.go`,
//! `streamer.go`, `vnc.go`, `portforward.go`, `usbredir.go`, `dialers.go`):
//!
//! 1. authorization: a SubjectAccessReview for verb `get` on `virtualmachineinstances/<sub>` in
//!    group `subresources.kubevirt.io` → 403;
//! 2. the VM's `sandbox.corral.dev/force-status` knob, if it names this subresource;
//! 3. the VMI → 404 `virtualmachineinstance.kubevirt.io "NAME" not found`;
//! 4. per subresource:
//!    - vnc, screenshot: `autoattachGraphicsDevice: false` → 400 `No graphics devices are
//!      present.`; not `Running` → 400 `VMI is not running`; the display does not start → 500;
//!      vnc with `preserveSession=true` while someone views → 503 `Active VNC connection.
//!      Request denied.`; vnc without it kicks the current viewer (its stream closes) and takes
//!      over. A screenshot, which virt-api takes as a VNC client with `preserveSession=true`,
//!      gets 500 (`dialing virt-handler: … Active VNC connection. Request denied.`) while
//!      someone views; a failed capture is a 500 with a plain-text body.
//!    - portforward: condition `Paused` → 409 (`Operation cannot be fulfilled on
//!      virtualmachineinstance.kubevirt.io "NAME": VMI is paused`); no `status.interfaces` →
//!      400 `no network interfaces are present`; a closed guest port → 500 `Internal error
//!      occurred: dialing VM: dial tcp 127.0.0.1:<port>: connect: connection refused`.
//!    - usbredir: no `spec.domain.devices.clientPassthrough` → 409 (`…: Not configured with USB
//!      Redirection`); not `Running` → 400 `VMI is not running`; a fifth stream → 503, empty
//!      body.
//!
//! A paused VMI keeps phase `Running`, so vnc and usbredir still connect. A request that is
//! not a websocket upgrade but passes every check gets 400.
//!
//! After the upgrade (subprotocol `plain.kubevirt.io` echoed when offered; none when not):
//! binary frames carry the raw bytes both ways, text frames are ignored, and the server ends a
//! stream by closing the connection without a close frame (clients see 1006), as virt-api
//! does. Streams close when their VMI goes (VM stopped or restarted). portforward pings
//! (`keep alive`) every second and drops the stream after 60 s without a pong.
//!
//! For client authors: the API server's aggregator relays a refusal of an upgrade request and
//! then closes the client's connection without `Connection: close` (k8s.io/apimachinery
//! `pkg/util/proxy/upgradeaware.go`), on a real cluster as here; a client that pools
//! connections (kube's does) may find the next request failing to send, and should send it
//! again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::guests::{Guest, GuestIo};
use super::knobs::{forced_status, guest_ports};
use super::rest::{
    AppState, GROUP, allowed, forbidden, internal, paused, running, status, vmi_conflict,
    vmi_not_found,
};
use super::types::{VirtualMachine, VirtualMachineInstance};

/// The websocket subprotocol virt-api speaks (gorilla's upgrader offers only this one).
pub const SUBPROTOCOL: &str = "plain.kubevirt.io";
/// Interval of portforward's keep-alive pings.
pub const PING_INTERVAL: Duration = Duration::from_secs(1);
/// A portforward stream without a pong for this long is dropped.
pub const PONG_TIMEOUT: Duration = Duration::from_secs(60);
/// Version string of the emulated usbredir server's hello.
pub const USBREDIR_VERSION: &str = "corral-sandbox usbredir";
/// Capabilities word of the emulated usbredir server's hello: `connect_device_version`,
/// `filter`, `device_disconnect_ack`, `ep_info_max_packet_size` (bits 1–4 of usbredirproto.h's
/// `usb_redir_cap`; no 64-bit ids, so every header stays 12 bytes).
pub const USBREDIR_CAPS: u32 = 0b1_1110;

/// The stream subresources, as they are authorized and forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sub {
    Vnc,
    Screenshot,
    PortForward,
    UsbRedir,
}

impl Sub {
    /// The RBAC subresource (the path segment after the name).
    fn rbac(self) -> &'static str {
        match self {
            Sub::Vnc | Sub::Screenshot => "vnc",
            Sub::PortForward => "portforward",
            Sub::UsbRedir => "usbredir",
        }
    }

    /// Its name in `sandbox.corral.dev/force-status`.
    fn knob(self) -> &'static str {
        match self {
            Sub::Vnc => "vnc",
            Sub::Screenshot => "screenshot",
            Sub::PortForward => "portforward",
            Sub::UsbRedir => "usbredir",
        }
    }
}

fn bad_request(message: &str) -> Response {
    status(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        message.to_owned(),
        None,
    )
}

fn unavailable(message: &str) -> Response {
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        message.to_owned(),
        None,
    )
}

const VNC_BUSY: &str = "Active VNC connection. Request denied.";

/// The answer `sandbox.corral.dev/force-status` asks for, worded as virt-api would.
fn forced(sub: Sub, code: u16, name: &str, port: Option<&str>) -> Response {
    let port = port.unwrap_or("22");
    match (code, sub) {
        (404, _) => vmi_not_found(name),
        (409, Sub::UsbRedir) => vmi_conflict(name, "Not configured with USB Redirection"),
        (409, Sub::PortForward) => vmi_conflict(name, "VMI is paused"),
        (409, _) => vmi_conflict(
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ),
        (500, Sub::PortForward) => internal(format!(
            "dialing VM: dial tcp 127.0.0.1:{port}: connect: connection refused"
        )),
        (500, Sub::Screenshot) => internal("timed out waiting for VNC server messages"),
        (500, _) => internal("dialing virt-handler: dial tcp 127.0.0.1:8186: connect: connection refused"),
        (503, Sub::Vnc) => unavailable(VNC_BUSY),
        (503, Sub::UsbRedir) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        (503, _) => unavailable("the server is currently unable to handle the request"),
        _ => status(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            "Timeout: request did not complete within requested timeout - context deadline exceeded"
                .to_owned(),
            None,
        ),
    }
}

/// What every stream request checks first: authorization, the force-status knob, the VMI.
/// Returns the VMI and its VM's annotations.
async fn prepare(
    state: &AppState,
    headers: &HeaderMap,
    ns: &str,
    name: &str,
    sub: Sub,
    port: Option<&str>,
) -> Result<(VirtualMachineInstance, BTreeMap<String, String>), Response> {
    match allowed(
        &state.client,
        headers,
        ns,
        name,
        "get",
        "virtualmachineinstances",
        sub.rbac(),
    )
    .await
    {
        Ok(true) => {}
        Ok(false) => {
            return Err(forbidden(
                headers,
                ns,
                name,
                "get",
                "virtualmachineinstances",
                sub.rbac(),
            ));
        }
        Err(e) => return Err(internal(e)),
    }
    let vms: Api<VirtualMachine> = Api::namespaced(state.client.clone(), ns);
    let annotations = match vms.get_opt(name).await {
        Ok(vm) => vm.map(|vm| vm.annotations().clone()).unwrap_or_default(),
        Err(e) => return Err(internal(e)),
    };
    if let Some(code) = forced_status(&annotations, sub.knob()) {
        return Err(forced(sub, code, name, port));
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(state.client.clone(), ns);
    match vmis.get_opt(name).await {
        Ok(Some(vmi)) => Ok((vmi, annotations)),
        Ok(None) => Err(vmi_not_found(name)),
        Err(e) => Err(internal(e)),
    }
}

fn devices(vmi: &VirtualMachineInstance) -> Option<&Value> {
    vmi.spec.fields.get("domain")?.get("devices")
}

/// virt-api's `validateVMIForVNC`: a graphics device, then phase `Running`; the refusal, if any.
fn vnc_refusal(vmi: &VirtualMachineInstance) -> Option<Response> {
    let graphics = devices(vmi)
        .and_then(|d| d.get("autoattachGraphicsDevice"))
        .and_then(Value::as_bool);
    if graphics == Some(false) {
        return Some(bad_request("No graphics devices are present."));
    }
    if !running(vmi) {
        return Some(bad_request("VMI is not running"));
    }
    None
}

/// Go's `strconv.ParseBool`, as virt-api reads `preserveSession` (anything else is false).
fn query_bool(query: Option<&str>, key: &str) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| *k == key)
        .any(|(_, v)| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// The answer to a request that passed every check but is not a websocket upgrade.
fn not_websocket(rejection: &WebSocketUpgradeRejection) -> Response {
    bad_request(&format!(
        "websocket: the client is not using the websocket protocol: {}",
        rejection.body_text()
    ))
}

/// `GET …/virtualmachineinstances/{name}/vnc`: the VMI's Xvnc as a raw RFB stream.
pub(super) async fn vnc(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let (vmi, _) = match prepare(&state, &headers, &ns, &name, Sub::Vnc, None).await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    if let Some(answer) = vnc_refusal(&vmi) {
        return answer;
    }
    let guest = state.guests.guest(&vmi);
    let display = match state.guests.display(&guest).await {
        Ok(display) => display,
        Err(e) => return internal(format!("dialing virt-handler: {e:#}")),
    };
    let preserve = query_bool(query.as_deref(), "preserveSession");
    let Some(mut viewer) = guest.take_viewer(preserve, &state.guests) else {
        return unavailable(VNC_BUSY);
    };
    let tcp = match TcpStream::connect(("127.0.0.1", display.rfb_port)).await {
        Ok(tcp) => tcp,
        Err(e) => return internal(format!("dialing virt-handler: {e}")),
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return not_websocket(&rejection),
    };
    upgrade
        .protocols([SUBPROTOCOL])
        .on_upgrade(move |socket| async move {
            let stop = async {
                tokio::select! {
                    () = viewer.kicked() => {}
                    () = guest.gone() => {}
                }
            };
            bridge(socket, Box::new(tcp), stop, false).await;
            drop(viewer);
        })
}

/// `GET …/virtualmachineinstances/{name}/vnc/screenshot`: a PNG of the VMI's screen.
pub(super) async fn screenshot(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (vmi, _) = match prepare(&state, &headers, &ns, &name, Sub::Screenshot, None).await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    if let Some(answer) = vnc_refusal(&vmi) {
        return answer;
    }
    let guest = state.guests.guest(&vmi);
    let display = match state.guests.display(&guest).await {
        Ok(display) => display,
        Err(e) => return internal(format!("dialing virt-handler: {e:#}")),
    };
    if guest.viewing() {
        return internal(format!(
            "dialing virt-handler: Can't connect to websocket (503): {VNC_BUSY}"
        ));
    }
    match display.screenshot().await {
        Ok(png) => ([(header::CONTENT_TYPE, "image/png")], png).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("failed to retrieve the VNC screen: {e:#}"),
        )
            .into_response(),
    }
}

/// `GET …/virtualmachineinstances/{name}/portforward/{port}`: TCP to a guest port.
pub(super) async fn portforward(
    State(state): State<AppState>,
    Path((ns, name, port)): Path<(String, String, String)>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    forward(state, ns, name, port, "tcp".into(), headers, upgrade).await
}

/// `GET …/virtualmachineinstances/{name}/portforward/{port}/{protocol}`.
pub(super) async fn portforward_protocol(
    State(state): State<AppState>,
    Path((ns, name, port, protocol)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    forward(state, ns, name, port, protocol, headers, upgrade).await
}

async fn forward(
    state: AppState,
    ns: String,
    name: String,
    port: String,
    protocol: String,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let (vmi, annotations) =
        match prepare(&state, &headers, &ns, &name, Sub::PortForward, Some(&port)).await {
            Ok(found) => found,
            Err(answer) => return answer,
        };
    if paused(&vmi) {
        return vmi_conflict(&name, "VMI is paused");
    }
    let interfaces = vmi
        .status
        .as_ref()
        .and_then(|s| s.get("interfaces"))
        .and_then(Value::as_array)
        .is_some_and(|i| !i.is_empty());
    if !interfaces {
        return bad_request("no network interfaces are present");
    }
    match protocol.as_str() {
        "tcp" => {}
        "udp" => {
            return bad_request(
                "unsupported protocol \"udp\": the sandbox's emulated virt-api forwards TCP only",
            );
        }
        other => return internal(format!("dialing VM: dial {other}: unknown network {other}")),
    }
    let number = match port.parse::<u32>() {
        Ok(n) if (1..=65535).contains(&n) => n as u16,
        Ok(_) => {
            return internal(format!(
                "dialing VM: dial tcp: address {port}: invalid port"
            ));
        }
        Err(_) => {
            return internal(format!(
                "dialing VM: dial tcp: lookup tcp/{port}: unknown port"
            ));
        }
    };
    let guest = state.guests.guest(&vmi);
    let open = if running(&vmi) {
        guest_ports(&annotations)
    } else {
        Vec::new()
    };
    let io = match state.guests.dial(&guest, number, &open).await {
        Ok(io) => io,
        Err(e) => return internal(format!("dialing VM: {}", e.0)),
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return not_websocket(&rejection),
    };
    upgrade
        .protocols([SUBPROTOCOL])
        .on_upgrade(move |socket| async move {
            bridge(socket, io, guest.gone(), true).await;
        })
}

/// `GET …/virtualmachineinstances/{name}/usbredir`: an emulated usbredir server.
pub(super) async fn usbredir(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let (vmi, _) = match prepare(&state, &headers, &ns, &name, Sub::UsbRedir, None).await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    let passthrough = devices(&vmi)
        .and_then(|d| d.get("clientPassthrough"))
        .is_some_and(|p| !p.is_null());
    if !passthrough {
        return vmi_conflict(&name, "Not configured with USB Redirection");
    }
    if !running(&vmi) {
        return bad_request("VMI is not running");
    }
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return not_websocket(&rejection),
    };
    let guest = state.guests.guest(&vmi);
    let Some(slot) = guest.attach_usb(&state.client).await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    upgrade
        .protocols([SUBPROTOCOL])
        .on_upgrade(move |socket| async move {
            serve_usbredir(socket, &guest).await;
            drop(slot);
        })
}

/// Bridges a websocket to a guest byte stream until either side ends or `stop` resolves;
/// then drops both (no close frame). The two directions run concurrently, as virt-api's two
/// copy goroutines do, so a guest that writes while it is being written to never stalls.
/// With `keepalive`, pings every [`PING_INTERVAL`] and drops the stream after
/// [`PONG_TIMEOUT`] without a pong (virt-api's portforward).
async fn bridge(
    socket: WebSocket,
    io: Box<dyn GuestIo>,
    stop: impl Future<Output = ()>,
    keepalive: bool,
) {
    let (mut read, mut write) = tokio::io::split(io);
    let (mut sink, mut frames) = socket.split();
    let started = tokio::time::Instant::now();
    // Milliseconds after `started` of the last pong.
    let last_pong = std::sync::atomic::AtomicU64::new(0);
    let to_guest = async {
        while let Some(message) = frames.next().await {
            match message {
                Ok(Message::Binary(bytes)) => {
                    if write.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Pong(_)) => {
                    let now = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    last_pong.store(now, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(Message::Text(_) | Message::Ping(_)) => {}
                Ok(Message::Close(_)) | Err(_) => break,
            }
        }
    };
    let from_guest = async {
        let mut buf = vec![0u8; 32 * 1024];
        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                read = read.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if sink.send(Message::Binary(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                            break;
                        }
                    }
                },
                _ = ping.tick(), if keepalive => {
                    let since = started.elapsed().saturating_sub(Duration::from_millis(
                        last_pong.load(std::sync::atomic::Ordering::Relaxed),
                    ));
                    if since > PONG_TIMEOUT {
                        break;
                    }
                    if sink.send(Message::Ping(Bytes::from_static(b"keep alive"))).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = stop => {}
        () = to_guest => {}
        () = from_guest => {}
    }
}

/// The usbredir server side, enough for a client: reads the client's hello (header
/// `{u32 type = 0, u32 length, u32 id}` little-endian, then `char version[64]` and the
/// capability words), answers with its own hello ([`USBREDIR_VERSION`], [`USBREDIR_CAPS`]),
/// then reads and discards what follows until the stream ends or the VMI goes. A stream whose
/// first bytes are not a hello is closed.
async fn serve_usbredir(mut socket: WebSocket, guest: &Arc<Guest>) {
    let hello = async {
        let mut buf: Vec<u8> = Vec::new();
        loop {
            if buf.len() >= 4 && buf[..4] != [0, 0, 0, 0] {
                return false;
            }
            if buf.len() >= 12 {
                let length = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
                if !(64..=64 + 4 * 32).contains(&length) || !(length - 64).is_multiple_of(4) {
                    return false;
                }
                if buf.len() >= 12 + length {
                    return true;
                }
            }
            match socket.next().await {
                Some(Ok(Message::Binary(bytes))) => buf.extend_from_slice(&bytes),
                Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => {}
                _ => return false,
            }
        }
    };
    let ok = tokio::select! {
        ok = hello => ok,
        () = guest.gone() => false,
    };
    if !ok {
        return;
    }
    let mut answer = Vec::with_capacity(12 + 68);
    answer.extend_from_slice(&0u32.to_le_bytes());
    answer.extend_from_slice(&68u32.to_le_bytes());
    answer.extend_from_slice(&0u32.to_le_bytes());
    let mut version = [0u8; 64];
    version[..USBREDIR_VERSION.len()].copy_from_slice(USBREDIR_VERSION.as_bytes());
    answer.extend_from_slice(&version);
    answer.extend_from_slice(&USBREDIR_CAPS.to_le_bytes());
    if socket.send(Message::Binary(answer.into())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            () = guest.gone() => return,
            message = socket.next() => match message {
                Some(Ok(Message::Close(_)) | Err(_)) | None => {
                    let _ = tokio::time::timeout(Duration::from_millis(200), socket.flush()).await;
                    return;
                }
                Some(Ok(_)) => {}
            },
        }
    }
}

/// The group's API path prefix for VMI subresources (for the router).
pub(super) fn vmi_path(rest: &str) -> String {
    format!("/apis/{GROUP}/v1/namespaces/{{ns}}/virtualmachineinstances/{{name}}/{rest}")
}
