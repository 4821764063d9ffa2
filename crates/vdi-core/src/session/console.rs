//! The in-app console: a websocket on 127.0.0.1 at a secret path, open only to the app's own
//! pages and this user, relaying RFB bytes between noVNC and the VMI's `vnc` stream.

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use kube::Client;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

use super::registry::admitted;
use super::{Counters, SessionKind, Supervisor, Target};
use crate::error::{Error, Result};
use crate::stream::{self, Subresource, VmiStream};

/// The in-app console of a member: a websocket on 127.0.0.1 that only the app can use (its
/// path holds a 128-bit secret made per session, only the app's own origins and its own user's
/// connections are accepted, and a client that has not done its handshake within 10 s is
/// closed), relaying RFB bytes to and from the VMI's `vnc` stream for noVNC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ConsoleEndpoint {
    /// The session's id.
    pub id: u32,
    /// `ws://127.0.0.1:PORT/SECRET`, for noVNC.
    pub url: String,
}

/// Origins allowed to open a console websocket: the app's own pages (Tauri serves them as
/// `tauri://localhost` on Linux and macOS, `http://tauri.localhost` on Windows).
pub const CONSOLE_ORIGINS: [&str; 3] = [
    "tauri://localhost",
    "http://tauri.localhost",
    "https://tauri.localhost",
];

/// A 128-bit random secret, as 32 lower-case hex digits (a session's path or token).
pub(super) fn secret() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Config(format!("no randomness for a console secret: {e}")))?;
    Ok(data_encoding::HEXLOWER.encode(&bytes))
}

impl Supervisor {
    /// Opens `member`'s VNC console for the app: first the VMI's `vnc` stream (so a refusal —
    /// someone viewing with `preserve_session`, not running — is reported at once and nothing
    /// is left listening), then a websocket on 127.0.0.1 at a secret path. Each connection to
    /// it (noVNC's reconnect) gets a stream of its own; the first gets the one opened here.
    ///
    /// Errors: the stream's refusal ([`Error::Stream`]); no port to listen on.
    pub async fn start_console(
        &self,
        client: Client,
        namespace: &str,
        member: &str,
        preserve_session: bool,
    ) -> Result<ConsoleEndpoint> {
        let first = stream::open(
            &client,
            namespace,
            member,
            Subresource::Vnc { preserve_session },
        )
        .await?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| Error::Config(format!("listen for the console on 127.0.0.1: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Config(format!("console listener address: {e}")))?;
        let token = secret()?;
        let id = self.register(
            namespace,
            member,
            SessionKind::Console,
            Target::Vnc {
                preserve_session: false,
            }
            .describe(),
            Some(local),
        );
        let (counters, last_error) = self.shared(id);
        let (ns, name) = (namespace.to_owned(), member.to_owned());
        let path: Arc<str> = format!("/{token}").into();
        let task = tokio::spawn(async move {
            let first = Arc::new(Mutex::new(Some(first)));
            let mut connections = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let (client, ns, name, path) =
                    (client.clone(), ns.clone(), name.clone(), path.clone());
                let (first, counters, last_error) =
                    (first.clone(), counters.clone(), last_error.clone());
                // Each connection on its own: a client that sends nothing holds up no other.
                connections.spawn(async move {
                    if !admitted(id, crate::peer::same_user(&tcp)) {
                        return;
                    }
                    let check = ConsoleGate { path };
                    let handshake = tokio_tungstenite::accept_hdr_async(tcp, check);
                    let Ok(Ok(local_ws)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await
                    else {
                        return;
                    };
                    let kept = first.lock().ok().and_then(|mut f| f.take());
                    let vmi_ws = match kept {
                        Some(ws) => Ok(ws),
                        None => {
                            stream::open(
                                &client,
                                &ns,
                                &name,
                                Subresource::Vnc {
                                    preserve_session: true,
                                },
                            )
                            .await
                        }
                    };
                    match vmi_ws {
                        Ok(vmi_ws) => relay(vmi_ws, local_ws, &counters).await,
                        Err(e) => {
                            if let Ok(mut last) = last_error.lock() {
                                *last = Some(e.to_string());
                            }
                            let mut local_ws = local_ws;
                            let _ = local_ws.close(None).await;
                        }
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        });
        self.add_task(id, task);
        Ok(ConsoleEndpoint {
            id,
            url: format!("ws://{local}/{token}"),
        })
    }
}

/// How long a console client has to complete its websocket handshake; one that connects and
/// sends nothing is closed then.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Lets only the app's own pages open a console websocket: the secret path (compared in
/// constant time), and an origin of [`CONSOLE_ORIGINS`] (or none: a native client on this
/// machine).
pub(super) struct ConsoleGate {
    /// `/SECRET`.
    pub(super) path: Arc<str>,
}

impl tokio_tungstenite::tungstenite::handshake::server::Callback for ConsoleGate {
    fn on_request(
        self,
        request: &tokio_tungstenite::tungstenite::handshake::server::Request,
        response: tokio_tungstenite::tungstenite::handshake::server::Response,
    ) -> std::result::Result<
        tokio_tungstenite::tungstenite::handshake::server::Response,
        tokio_tungstenite::tungstenite::handshake::server::ErrorResponse,
    > {
        let origin = request
            .headers()
            .get(http::header::ORIGIN)
            .and_then(|o| o.to_str().ok());
        // A debug build also serves its pages from Vite's dev server (`tauri dev`).
        let dev = cfg!(debug_assertions) && origin == Some("http://localhost:1420");
        let origin_ok = dev || origin.is_none_or(|o| CONSOLE_ORIGINS.contains(&o));
        let secret_ok: bool =
            subtle::ConstantTimeEq::ct_eq(request.uri().path().as_bytes(), self.path.as_bytes())
                .into();
        if secret_ok && origin_ok {
            Ok(response)
        } else {
            let mut refusal =
                tokio_tungstenite::tungstenite::handshake::server::ErrorResponse::new(None);
            *refusal.status_mut() = http::StatusCode::FORBIDDEN;
            Err(refusal)
        }
    }
}

/// Relays binary frames between the VMI's stream and a local websocket (noVNC) until either
/// ends; pings from virt-api are answered by the websocket library itself here, since both
/// sides are read continuously.
async fn relay<S>(vmi: VmiStream, local: tokio_tungstenite::WebSocketStream<S>, counters: &Counters)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _open = counters.opened();
    let (mut vmi_tx, mut vmi_rx) = vmi.split();
    let (mut local_tx, mut local_rx) = local.split();
    let down = async {
        while let Some(Ok(frame)) = vmi_rx.next().await {
            if let Message::Binary(data) = frame {
                counters
                    .bytes_in
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                if local_tx.send(Message::Binary(data)).await.is_err() {
                    break;
                }
            }
        }
        let _ = local_tx.close().await;
    };
    let up = async {
        while let Some(Ok(frame)) = local_rx.next().await {
            match frame {
                Message::Binary(data) => {
                    counters
                        .bytes_out
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    if vmi_tx.send(Message::Binary(data)).await.is_err() {
                        break;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = vmi_tx.close().await;
    };
    tokio::select! {
        () = down => {}
        () = up => {}
    }
}
