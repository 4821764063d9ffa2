//! RDP in the app: an RDCleanPath proxy on 127.0.0.1 for IronRDP's web client, reaching the
//! guest's port 3389 through the VMI's `portforward` stream (no Service, no NodePort). It is
//! guarded as the console is (secret path, the app's origins, this user only) and takes one
//! RDP connection, authorized by a one-time token: the session ends with that connection.
//! The protocol pieces are [`crate::rdp`]'s.

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use kube::Client;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::bridge::bridge;
use super::console::{ConsoleGate, HANDSHAKE_TIMEOUT, secret};
use super::registry::admitted;
use super::{Counters, SessionKind, SessionState, Supervisor, Target};
use crate::error::{Error, ErrorKind, Result};
use crate::rdp::cleanpath::{self, Read, Refusal};
use crate::rdp::client_core;
use crate::rdp::deactivate::DeactivateAll;
use crate::rdp::framing::PduFramer;
use crate::rdp::{self, NEGOTIATION_TIMEOUT, Probe, RDP_PORT, tls, x224};
use crate::stream::{self, Subresource};

/// An RDP session of the app, ready for the web client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct RdpEndpoint {
    /// The session's id.
    pub id: u32,
    /// `ws://127.0.0.1:PORT/SECRET`: the web client's proxy address.
    pub url: String,
    /// The one-time authorization the web client sends in its RDCleanPath request; the first
    /// connection that brings it uses it up.
    pub token: String,
    /// What the web client names as its destination (`<member>:3389`).
    pub destination: String,
    /// What the guest's RDP server said: NLA or not, and its certificate's fingerprint, which
    /// this session accepts and no other.
    pub probe: Probe,
    /// The uid of the member's VirtualMachine as the session started (a certificate is trusted
    /// for that VM only, [`crate::rdp::trust`]); `None` when it could not be read.
    pub vm_uid: Option<String>,
}

/// What a connection of the session needs.
struct Context {
    id: u32,
    client: Client,
    namespace: String,
    member: String,
    fingerprint: String,
    token: Mutex<Option<String>>,
    counters: Arc<Counters>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl Context {
    /// Uses the token up when `offered` is it (compared in constant time).
    fn take_token(&self, offered: &str) -> bool {
        let Ok(mut token) = self.token.lock() else {
            return false;
        };
        let matches = token.as_deref().is_some_and(|t| {
            subtle::ConstantTimeEq::ct_eq(t.as_bytes(), offered.as_bytes()).into()
        });
        if matches {
            *token = None;
        }
        matches
    }

    fn fail(&self, why: String) {
        tracing::warn!(session = self.id, member = %self.member, "RDP: {why}");
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(why);
        }
    }
}

/// Opens guest port 3389 of `member` and returns our end of a pipe whose other end a bridge
/// task carries over the stream (counting into `counters`).
async fn open_guest(
    client: &Client,
    namespace: &str,
    member: &str,
    counters: Arc<Counters>,
) -> Result<DuplexStream> {
    let ws = stream::open(
        client,
        namespace,
        member,
        Subresource::PortForward { port: RDP_PORT },
    )
    .await?;
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let (rd, wr) = tokio::io::split(theirs);
        bridge(ws, rd, wr, &counters).await;
    });
    Ok(ours)
}

impl Supervisor {
    /// Whether an RDP session in the app ([`Supervisor::start_rdp`]) is active. The app's window
    /// may read the OS clipboard only then, to hand it to the guest; a native client's forward
    /// does not count.
    pub fn rdp_in_app_active(&self) -> bool {
        self.list()
            .iter()
            .any(|s| s.kind == SessionKind::RdpInApp && s.state == SessionState::Active)
    }

    /// Starts RDP in the app for `member`: first asks its RDP server (through a `portforward`
    /// stream to port 3389) what it selects and which certificate it has, so that a refusal is
    /// reported at once and nothing is left listening; then listens on 127.0.0.1 for the web
    /// client. The session ends when its one RDP connection does (how, in its last error).
    ///
    /// Errors: the stream's refusal ([`Error::Stream`]: not running, no permission); the guest's
    /// RDP server did not answer or refused TLS ([`ErrorKind::Refused`], one sentence naming the
    /// member); no port to listen on.
    pub async fn start_rdp(
        &self,
        client: Client,
        namespace: &str,
        member: &str,
    ) -> Result<RdpEndpoint> {
        let vms: kube::Api<crate::resources::VirtualMachine> =
            kube::Api::namespaced(client.clone(), namespace);
        let vm_uid = vms
            .get_opt(member)
            .await
            .ok()
            .flatten()
            .and_then(|vm| vm.metadata.uid);
        let io = open_guest(&client, namespace, member, Arc::default()).await?;
        let probe = rdp::probe(io, member).await.map_err(|why| {
            Error::rejected(
                ErrorKind::Refused,
                why,
                format!(
                    "start the guest's RDP server (Windows: allow Remote Desktop connections), or \
                     use the console (VNC) instead; `corral-vdi connect {member}` lists what \
                     answers"
                ),
            )
        })?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| Error::Config(format!("listen for RDP on 127.0.0.1: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Config(format!("RDP listener address: {e}")))?;
        let (path, token) = (secret()?, secret()?);
        let id = self.register(
            namespace,
            member,
            SessionKind::RdpInApp,
            Target::Port(RDP_PORT).describe(),
            Some(local),
        );
        let (counters, last_error) = self.shared(id);
        let context = Arc::new(Context {
            id,
            client,
            namespace: namespace.to_owned(),
            member: member.to_owned(),
            fingerprint: probe.fingerprint.clone(),
            token: Mutex::new(Some(token.clone())),
            counters,
            last_error,
        });
        let this = self.downgrade();
        let gate_path: Arc<str> = format!("/{path}").into();
        let task = tokio::spawn(async move {
            // Each connection on its own, so that one that sends nothing (or another user's,
            // closed at once) holds up nobody; the session ends with the one that used the
            // token.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else {
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        };
                        let (context, path) = (context.clone(), gate_path.clone());
                        connections.spawn(async move {
                            if !admitted(id, crate::peer::same_user(&tcp)) {
                                return Served::Refused;
                            }
                            let handshake = tokio_tungstenite::accept_hdr_async(tcp, ConsoleGate { path });
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                                Ok(Ok(ws)) => serve(ws, &context).await,
                                _ => Served::Refused,
                            }
                        });
                    }
                    Some(Ok(Served::Ended(reason, failed))) = connections.join_next() => {
                        this.finish(id, &reason, failed);
                        return;
                    }
                }
            }
        });
        self.add_task(id, task);
        Ok(RdpEndpoint {
            id,
            url: format!("ws://{local}/{path}"),
            token,
            destination: format!("{member}:{RDP_PORT}"),
            probe,
            vm_uid,
        })
    }
}

/// How one connection went.
enum Served {
    /// It was refused before reaching the guest (no request, a wrong token).
    Refused,
    /// It used the token: why it ended, and whether as a failure.
    Ended(String, bool),
}

/// Serves one web client connection: the RDCleanPath exchange, then the relay.
async fn serve<S>(ws: WebSocketStream<S>, context: &Context) -> Served
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let mut refuse = async |refusal: Refusal, why: String| {
        context.fail(why.clone());
        let _ = tx.send(Message::Binary(refusal.to_der().into())).await;
        let _ = tx.close().await;
        why
    };
    let mut buffer = Vec::new();
    let request = loop {
        let frame = tokio::time::timeout(HANDSHAKE_TIMEOUT, rx.next()).await;
        let Ok(Some(Ok(frame))) = frame else {
            context.fail("a client connected and sent no RDCleanPath request".into());
            return Served::Refused;
        };
        let Message::Binary(data) = frame else {
            continue;
        };
        buffer.extend_from_slice(&data);
        match cleanpath::read_request(&buffer) {
            Ok(Read::More) => {}
            Ok(Read::Done(request)) => break request,
            Err(why) => {
                refuse(Refusal::General, why).await;
                return Served::Refused;
            }
        }
    };
    if !context.take_token(&request.token) {
        let why = "a connection brought a wrong or already used token: refused".to_owned();
        refuse(Refusal::Token, why).await;
        return Served::Refused;
    }
    let member = context.member.as_str();
    let guest = open_guest(
        &context.client,
        &context.namespace,
        member,
        context.counters.clone(),
    )
    .await;
    let mut guest = match guest {
        Ok(guest) => guest,
        Err(e) => return Served::Ended(refuse(Refusal::Unreachable, e.to_string()).await, true),
    };
    let negotiated = tokio::time::timeout(NEGOTIATION_TIMEOUT, async {
        guest.write_all(&request.x224).await?;
        x224::read_packet(&mut guest).await
    })
    .await;
    let confirm = match negotiated {
        Ok(Ok(confirm)) => confirm,
        Ok(Err(e)) => {
            let why = rdp::closed(member, &e);
            return Served::Ended(refuse(Refusal::Unreachable, why).await, true);
        }
        Err(_) => {
            let why = format!("{member}'s RDP server did not confirm the connection in time");
            return Served::Ended(refuse(Refusal::Unreachable, why).await, true);
        }
    };
    let negotiation = match x224::parse_confirm(&confirm) {
        Ok(n) => n,
        Err(why) => return Served::Ended(refuse(Refusal::General, why).await, true),
    };
    if let Some(why) = negotiation.refusal(member) {
        return Served::Ended(refuse(Refusal::Negotiation(confirm), why).await, true);
    }
    let (tls, chain) = match tls::handshake(guest, member).await {
        Ok(done) => done,
        Err(why) => return Served::Ended(refuse(Refusal::Certificate, why).await, true),
    };
    let presented = rdp::fingerprint(&chain[0]);
    if presented != context.fingerprint {
        let why = format!(
            "the RDP certificate of {member} changed since it was accepted ({} before, now {presented}): \
             not connected",
            context.fingerprint
        );
        return Served::Ended(refuse(Refusal::Certificate, why).await, true);
    }
    let server_addr = format!("{}:{RDP_PORT}", Ipv4Addr::LOCALHOST);
    let response = match cleanpath::response(&server_addr, confirm, chain) {
        Ok(response) => response,
        Err(why) => return Served::Ended(refuse(Refusal::General, why).await, true),
    };
    if tx.send(Message::Binary(response.into())).await.is_err() {
        return Served::Ended("the app closed the RDP connection".into(), false);
    }
    let relayed = relay(tls, tx, rx, &context.counters).await;
    if negotiation.needs_nla() && relayed.guest_closed && !relayed.client_spoke_rdp {
        // The guest hung up during CredSSP: it refused the login (FreeRDP's server closes;
        // Windows sends an error the web client reads itself).
        let why = rdp::login_refused(member);
        context.fail(why.clone());
        return Served::Ended(why, true);
    }
    Served::Ended("the RDP connection ended".into(), false)
}

/// Size of one read from the guest's TLS stream (bytes): one websocket message at most.
const CHUNK: usize = 64 * 1024;

/// How a relay ended.
struct Relayed {
    /// The guest ended it (closed or failed), not the web client.
    guest_closed: bool,
    /// The web client sent a TPKT packet (RDP proper: MCS), so CredSSP, if any, was over.
    client_spoke_rdp: bool,
}

/// Carries plaintext RDP between the web client's websocket and the TLS stream to the guest
/// until either ends; the guest's RDP output goes one PDU a message ([`PduFramer`]). Two things
/// the web client the app ships cannot take are mended on the way: a Connect Initial announcing
/// client build 0 ([`client_core`]) and xrdp's header-only Deactivate All ([`DeactivateAll`]).
async fn relay<T, Tx, Rx>(tls: T, mut tx: Tx, mut rx: Rx, counters: &Counters) -> Relayed
where
    T: AsyncRead + AsyncWrite + Unpin,
    Tx: futures::Sink<Message> + Unpin,
    Rx: futures::Stream<Item = std::result::Result<Message, tokio_tungstenite::tungstenite::Error>>
        + Unpin,
{
    let _open = counters.opened();
    let (mut from_guest, mut to_guest) = tokio::io::split(tls);
    // Whether the web client sent a TPKT packet yet: CredSSP messages are DER (0x30), RDP's are
    // TPKT (version 3). From then on the guest speaks only RDP PDUs, which go one a message.
    let client_spoke_rdp = std::sync::atomic::AtomicBool::new(false);
    let down = async {
        let mut buf = vec![0u8; CHUNK];
        let mut framer = PduFramer::default();
        let mut deactivate = DeactivateAll::default();
        'read: loop {
            let n = match from_guest.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let messages = if client_spoke_rdp.load(Ordering::Acquire) {
                framer.push(&buf[..n])
            } else {
                vec![bytes::Bytes::copy_from_slice(&buf[..n])]
            };
            // Whole PDUs one a message until the connection is up (the web client drops what
            // follows the Font Map in a message); after it, a read's PDUs go as one message.
            let connected = deactivate.connected();
            let pdus: Vec<bytes::Bytes> = messages
                .into_iter()
                .flat_map(|pdu| deactivate.adapt(pdu))
                .collect();
            let out = if connected && pdus.len() > 1 {
                vec![pdus.concat().into()]
            } else {
                pdus
            };
            for data in out {
                if tx.send(Message::Binary(data)).await.is_err() {
                    break 'read;
                }
            }
        }
        if let Some(rest) = framer.remainder() {
            let _ = tx.send(Message::Binary(rest)).await;
        }
        let _ = tx.close().await;
    };
    let up = async {
        while let Some(Ok(frame)) = rx.next().await {
            let frame = match frame {
                // The first TPKT packet is the MCS Connect Initial: announce a build xrdp resizes.
                Message::Binary(data)
                    if data.first() == Some(&3) && !client_spoke_rdp.load(Ordering::Acquire) =>
                {
                    client_spoke_rdp.store(true, Ordering::Release);
                    let mut pdu = data.to_vec();
                    if client_core::announce_build(&mut pdu) {
                        tracing::debug!(
                            build = client_core::CLIENT_BUILD,
                            "announced client build"
                        );
                    }
                    Message::Binary(pdu.into())
                }
                other => other,
            };
            match frame {
                Message::Binary(data)
                    if to_guest.write_all(&data).await.is_err()
                        || to_guest.flush().await.is_err() =>
                {
                    break;
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = to_guest.shutdown().await;
    };
    let guest_closed = tokio::select! {
        () = down => true,
        () = up => false,
    };
    Relayed {
        guest_closed,
        client_spoke_rdp: client_spoke_rdp.into_inner(),
    }
}
