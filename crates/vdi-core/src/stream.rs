//! KubeVirt's streaming subresources (`vnc`, `portforward/{port}`, `usbredir`), spoken
//! directly: a websocket upgrade through the API server (the aggregator passes it to virt-api)
//! with the `plain.kubevirt.io` subprotocol, carrying raw bytes in binary frames. No virtctl.
//!
//! kube-rs' own `Client::connect` insists on the Kubernetes channel subprotocols, so the
//! upgrade is built here on [`kube::Client::send`] (REFERENCE "Subresource websockets").
//! virt-api refuses before the upgrade with a normal HTTP answer and a `metav1.Status` body;
//! each refusal becomes a [`StreamRefusal`] that names the member and the fix. These requests
//! are never retried automatically: use [`stream_client`] (kube retries 429/503/504 by default,
//! and a 503 here means "someone is viewing", not "try again").

use http::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
    SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use kube::Client;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::error::{Error, Result, StreamRefusal};
use crate::names::ADMIN_GROUP;
use crate::validate;

/// The websocket subprotocol virt-api speaks for raw byte streams.
pub const PLAIN_PROTOCOL: &str = "plain.kubevirt.io";
/// API group and version of KubeVirt's subresources.
pub const SUBRESOURCES_API: &str = "/apis/subresources.kubevirt.io/v1";

/// The request path of VirtualMachine `vm`'s power subresource `action` (`start`, `stop`) in
/// `namespace`: virt-api takes a `PUT` there (KubeVirt pkg/virt-api/rest/lifecycle.go).
pub fn vm_action_path(namespace: &str, vm: &str, action: &str) -> String {
    format!("{SUBRESOURCES_API}/namespaces/{namespace}/virtualmachines/{vm}/{action}")
}

/// An upgraded stream: websocket frames over the API server's connection. Binary frames carry
/// the raw bytes (RFB for `vnc`, the guest TCP stream for `portforward`, usbredir for
/// `usbredir`); virt-api sends no close frame (a client sees 1006 when it ends).
pub type VmiStream = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Which streaming subresource of a VMI to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `vnc`: the VM's console framebuffer (RFB). With `preserve_session`, virt-api refuses
    /// (503) while someone else views instead of disconnecting them.
    Vnc {
        /// Keep an existing viewer connected (`preserveSession=true`).
        preserve_session: bool,
    },
    /// `portforward/{port}`: one TCP connection to the guest's port.
    PortForward {
        /// The guest's TCP port.
        port: u16,
    },
    /// `usbredir`: one redirected USB device (usbredir protocol); at most 4 per VMI.
    UsbRedir,
}

impl Subresource {
    /// The subresource's name as RBAC and virt-api know it (`vnc`, `portforward`, `usbredir`).
    pub fn name(&self) -> &'static str {
        match self {
            Subresource::Vnc { .. } => "vnc",
            Subresource::PortForward { .. } => "portforward",
            Subresource::UsbRedir => "usbredir",
        }
    }

    /// The request path for VMI `vmi` in `namespace`.
    pub fn path(&self, namespace: &str, vmi: &str) -> String {
        let base =
            format!("{SUBRESOURCES_API}/namespaces/{namespace}/virtualmachineinstances/{vmi}");
        match self {
            Subresource::Vnc { preserve_session } => {
                format!("{base}/vnc?preserveSession={preserve_session}")
            }
            Subresource::PortForward { port } => format!("{base}/portforward/{port}/tcp"),
            Subresource::UsbRedir => format!("{base}/usbredir"),
        }
    }
}

impl StreamRefusal {
    /// Explains virt-api's answer `status` with `server_message` for `member`'s `subresource`
    /// (REFERENCE "Subresource websockets": kubevirt pkg/virt-api/rest/{vnc,portforward,
    /// usbredir,streamer}.go).
    pub fn explain(
        namespace: &str,
        member: &str,
        subresource: Subresource,
        status: u16,
        server_message: &str,
    ) -> Self {
        let sub = subresource.name();
        let lower = server_message.to_ascii_lowercase();
        let mut busy = false;
        let (message, suggestion) = match status {
            401 => (
                format!("the cluster refused your credentials when opening {sub} on {member}"),
                "log in again or pick another context".to_owned(),
            ),
            403 => (
                format!("you may not open {sub} on {member}: {server_message}"),
                format!(
                    "ask a cluster administrator for `get` on virtualmachineinstances/{sub} \
                     (group subresources.kubevirt.io) in namespace \"{namespace}\""
                ),
            ),
            404 if lower.contains("virtualmachineinstance") => (
                format!("{member} is not running — start it (it has no VirtualMachineInstance)"),
                "start it (or claim it with `corral-vdi assign`), then connect again".to_owned(),
            ),
            404 => (
                format!(
                    "KubeVirt's subresource API is not available for {member}: {server_message}"
                ),
                "check that virt-api runs (kubectl get apiservice v1.subresources.kubevirt.io)"
                    .to_owned(),
            ),
            400 if lower.contains("graphics") => (
                format!(
                    "{member} has no graphics device (autoattachGraphicsDevice: false), so it has \
                     no VNC console"
                ),
                "connect with RDP or SSH, or give the golden VM a graphics device".to_owned(),
            ),
            400 if lower.contains("network interface") => (
                format!("{member} has no network interface, so no port can be forwarded to it"),
                "use the VNC console, or give the golden VM a network interface".to_owned(),
            ),
            400 if lower.contains("not running") => (
                format!("{member} is not running — start it"),
                "start it (or claim it again), wait for Running, then connect".to_owned(),
            ),
            409 if lower.contains("paused") => (
                format!("{member} is paused"),
                format!("unpause it (virtctl unpause vmi {member} -n {namespace}), then connect"),
            ),
            409 if lower.contains("usb") => (
                format!(
                    "{member} is not configured for USB redirection (its VM lacks \
                     spec.template.spec.domain.devices.clientPassthrough)"
                ),
                "add `clientPassthrough: {}` to the VM's devices and restart it".to_owned(),
            ),
            500 if lower.contains("dialing vm") => {
                let port = match subresource {
                    Subresource::PortForward { port } => port.to_string(),
                    _ => "the port".to_owned(),
                };
                (
                    format!(
                        "nothing answers on port {port} in {member}: the guest's service is not \
                         running, or its firewall closes the port"
                    ),
                    "start the service in the guest (or open the port), then connect again"
                        .to_owned(),
                )
            }
            503 if matches!(subresource, Subresource::Vnc { .. })
                || lower.contains("active vnc connection") =>
            {
                busy = true;
                (
                    format!("someone is viewing {member}'s console"),
                    "take over to disconnect them, or try again later".to_owned(),
                )
            }
            503 if matches!(subresource, Subresource::UsbRedir) => (
                format!(
                    "four USB devices are already redirected to {member} (KubeVirt's limit)"
                ),
                "detach one of them first".to_owned(),
            ),
            503 => (
                format!("virt-handler refused to open {sub} on {member}: {server_message}"),
                "check virt-handler on the VM's node (kubectl get pods -n kubevirt), then try again"
                    .to_owned(),
            ),
            504 => (
                format!("virt-handler did not answer in time when opening {sub} on {member}"),
                "check virt-handler on the VM's node (kubectl get pods -n kubevirt), then try again"
                    .to_owned(),
            ),
            _ => (
                format!(
                    "opening {sub} on {member} failed (HTTP {status}): {}",
                    if server_message.is_empty() {
                        "no message"
                    } else {
                        server_message
                    }
                ),
                format!(
                    "check the VM (kubectl get vmi -n {namespace} {member}); an administrator \
                     ({ADMIN_GROUP}) can look at virt-api's log"
                ),
            ),
        };
        StreamRefusal {
            member: member.to_owned(),
            subresource: sub.to_owned(),
            status,
            server_message: server_message.to_owned(),
            message,
            suggestion,
            busy,
        }
    }
}

/// A client for streams: the same credentials and server as `config`, with kube's automatic
/// retry of 429/503/504 turned off (each refusal must reach the user once, as it is).
///
/// Errors: [`Error::Kube`] if the client cannot be built (bad TLS material).
pub fn stream_client(mut config: kube::Config) -> Result<Client> {
    config.default_retry = false;
    Client::try_from(config).map_err(|e| Error::kube("build a client for streams", e))
}

/// Opens `subresource` on VMI `member` in `namespace`.
///
/// Errors: [`Error::Invalid`] for a bad name (no request); [`Error::Stream`] with the
/// [`StreamRefusal`] when the server answers anything but 101; [`Error::Kube`] when the API
/// server cannot be reached or the upgrade fails.
pub async fn open(
    client: &Client,
    namespace: &str,
    member: &str,
    subresource: Subresource,
) -> Result<VmiStream> {
    validate::namespace(namespace)?;
    validate::member_name(member)?;
    let key = tokio_tungstenite::tungstenite::handshake::client::generate_key();
    let request = || {
        Request::get(subresource.path(namespace, member))
            .header(CONNECTION, "Upgrade")
            .header(UPGRADE, "websocket")
            .header(SEC_WEBSOCKET_VERSION, "13")
            .header(SEC_WEBSOCKET_KEY, key.as_str())
            .header(SEC_WEBSOCKET_PROTOCOL, PLAIN_PROTOCOL)
            .body(kube::client::Body::empty())
            .map_err(|e| Error::Config(format!("build the {} request: {e}", subresource.name())))
    };
    let action = format!("open {} on {member}", subresource.name());
    // After relaying a refusal, the API server's proxy closes the connection without saying
    // so; a pooled connection may then be dead. A request that got no answer at all on such a
    // connection is sent once more (not a retry of an answer: opening a stream is a GET, and
    // nothing answered it).
    let response = match client.send(request()?).await {
        Err(e) if unanswered(&e) => client.send(request()?).await,
        other => other,
    }
    .map_err(|e| Error::kube(action.clone(), e))?;
    let status = response.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body).into_owned();
        let server_message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or_else(|| text.trim().to_owned());
        return Err(Error::Stream(Box::new(StreamRefusal::explain(
            namespace,
            member,
            subresource,
            status.as_u16(),
            &server_message,
        ))));
    }
    let expected = derive_accept_key(key.as_bytes());
    let accept = response.headers().get(SEC_WEBSOCKET_ACCEPT);
    if accept.and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return Err(Error::Config(format!(
            "{action}: the server's Sec-WebSocket-Accept does not match the request"
        )));
    }
    let upgraded = hyper::upgrade::on(response)
        .await
        .map_err(|e| Error::Config(format!("{action}: the upgrade failed: {e}")))?;
    Ok(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await)
}

/// Whether a request got no answer because its connection was closed: hyper could not send it
/// (canceled) or the connection ended before a response began (incomplete message). kube wraps
/// hyper's error as `HyperError` or, through hyper-util's pooled client, as `Service`; both are
/// found by walking the error's sources.
fn unanswered(err: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            return h.is_canceled() || h.is_incomplete_message();
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explain(sub: Subresource, status: u16, msg: &str) -> StreamRefusal {
        StreamRefusal::explain("corral-vms", "devpool-1", sub, status, msg)
    }

    #[test]
    fn each_refusal_of_virt_api_has_its_own_sentence() {
        let vnc = Subresource::Vnc {
            preserve_session: true,
        };
        let pf = Subresource::PortForward { port: 3389 };
        let cases = [
            (
                vnc,
                404,
                "virtualmachineinstance.kubevirt.io \"devpool-1\" not found",
                "devpool-1 is not running — start it",
            ),
            (
                vnc,
                404,
                "the server could not find the requested resource",
                "subresource API is not available",
            ),
            (
                vnc,
                400,
                "VMI is not running",
                "devpool-1 is not running — start it",
            ),
            (
                vnc,
                400,
                "No graphics devices are present.",
                "has no graphics device",
            ),
            (
                pf,
                400,
                "no network interfaces are present",
                "has no network interface",
            ),
            (pf, 409, "VMI is paused", "devpool-1 is paused"),
            (
                Subresource::UsbRedir,
                409,
                "Not configured with USB Redirection",
                "not configured for USB redirection",
            ),
            (
                pf,
                500,
                "dialing VM: dial tcp 10.0.0.1:3389: connect: connection refused",
                "nothing answers on port 3389 in devpool-1",
            ),
            (
                vnc,
                503,
                "Active VNC connection. Request denied.",
                "someone is viewing devpool-1's console",
            ),
            (
                Subresource::UsbRedir,
                503,
                "",
                "four USB devices are already redirected",
            ),
            (pf, 503, "virt-handler is not ready", "virt-handler refused"),
            (pf, 504, "timeout", "did not answer in time"),
            (
                pf,
                403,
                "forbidden",
                "you may not open portforward on devpool-1",
            ),
        ];
        let mut seen = std::collections::HashSet::new();
        for (sub, status, msg, needle) in cases {
            let r = explain(sub, status, msg);
            assert!(r.message.contains(needle), "{status} {msg}: {}", r.message);
            assert!(!r.suggestion.is_empty());
            assert!(
                seen.insert(r.message.clone()),
                "{} is not distinct",
                r.message
            );
        }
        assert!(explain(vnc, 503, "Active VNC connection. Request denied.").busy);
        assert!(!explain(pf, 503, "x").busy);
    }

    #[test]
    fn paths_are_virt_apis() {
        assert_eq!(
            Subresource::PortForward { port: 22 }.path("ns", "m-1"),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/m-1/portforward/22/tcp"
        );
        assert!(
            Subresource::Vnc {
                preserve_session: true
            }
            .path("ns", "m-1")
            .ends_with("/vnc?preserveSession=true")
        );
        assert!(
            Subresource::UsbRedir
                .path("ns", "m-1")
                .ends_with("/usbredir")
        );
    }

    /// A connection closed with no answer (what a stale pooled connection to the API server
    /// looks like) is tried once more, and only once; the second silence is the user's error.
    #[tokio::test]
    async fn a_request_nobody_answered_is_sent_once_more() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut requests = 0;
            while let Ok(Ok((mut socket, _))) =
                tokio::time::timeout(std::time::Duration::from_secs(2), listener.accept()).await
            {
                let mut buf = vec![0; 4096];
                let mut read = 0;
                while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf[read..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => read += n,
                    }
                }
                if buf[..read].starts_with(b"GET /apis/subresources.kubevirt.io/") {
                    requests += 1;
                }
                drop(socket);
            }
            requests
        });
        let client = stream_client(kube::Config::new(url.parse().unwrap())).unwrap();
        let vnc = Subresource::Vnc {
            preserve_session: false,
        };
        let err = open(&client, "ns", "m-1", vnc).await.err().unwrap();
        assert!(matches!(err, Error::Kube { .. }), "{err}");
        assert_eq!(server.await.unwrap(), 2, "sent twice, not more");
    }
}
