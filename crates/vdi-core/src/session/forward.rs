//! Local forwards: a listener on 127.0.0.1 that opens one KubeVirt stream (the VNC console or
//! a guest port) per accepted connection of this user, as virtctl does, and bridges it.

use std::net::{Ipv4Addr, SocketAddr};

use kube::Client;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::bridge;
use super::registry::admitted;
use super::{SessionKind, Supervisor};
use crate::error::{Error, Result};
use crate::stream::{self, Subresource};

/// What a forward's listener opens on the member for each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The VNC console (`preserve_session`: refuse while someone else views).
    Vnc {
        /// Keep an existing viewer connected (`preserveSession=true`).
        preserve_session: bool,
    },
    /// A guest TCP port.
    Port(u16),
}

impl Target {
    /// The KubeVirt subresource a connection to this target opens.
    pub fn subresource(self) -> Subresource {
        match self {
            Target::Vnc { preserve_session } => Subresource::Vnc { preserve_session },
            Target::Port(port) => Subresource::PortForward { port },
        }
    }

    /// What the Sessions view names as the session's target: `display (VNC)` for the VM's
    /// `vnc` subresource, `port 3389` for a port of the guest.
    pub fn describe(self) -> String {
        match self {
            Target::Vnc { .. } => "display (VNC)".to_owned(),
            Target::Port(port) => format!("port {port}"),
        }
    }
}

/// A forward that was started: its session and where it listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The session's id.
    pub id: u32,
    /// The local address it listens on (127.0.0.1).
    pub local: SocketAddr,
}

impl Supervisor {
    /// Starts a forward: listens on 127.0.0.1 (`local_port`, or an ephemeral port) and, for
    /// every accepted connection of this process's user ([`crate::peer::same_user`]; others
    /// are closed at once), opens `target` on `member` through `client` (a
    /// [`stream::stream_client`]) and copies bytes both ways.
    ///
    /// Errors: the local port cannot be bound (in use).
    pub async fn start_forward(
        &self,
        client: Client,
        namespace: &str,
        member: &str,
        kind: SessionKind,
        target: Target,
        local_port: Option<u16>,
    ) -> Result<Started> {
        crate::validate::namespace(namespace)?;
        crate::validate::member_name(member)?;
        let bind = SocketAddr::from((Ipv4Addr::LOCALHOST, local_port.unwrap_or(0)));
        let listener = TcpListener::bind(bind).await.map_err(|e| {
            Error::invalid(
                format!("cannot listen on {bind}: {e}"),
                "pick another local port, or leave it out for a free one",
            )
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Config(format!("listener address: {e}")))?;
        let id = self.register(namespace, member, kind, target.describe(), Some(local));
        let (counters, last_error) = self.shared(id);
        let (ns, name) = (namespace.to_owned(), member.to_owned());
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    continue;
                };
                let (client, ns, name) = (client.clone(), ns.clone(), name.clone());
                let (counters, last_error) = (counters.clone(), last_error.clone());
                connections.spawn(async move {
                    if !admitted(id, crate::peer::same_user(&tcp)) {
                        return;
                    }
                    match stream::open(&client, &ns, &name, target.subresource()).await {
                        Ok(ws) => {
                            tracing::debug!(%peer, member = %name, target = ?target, "stream opened");
                            let (rd, wr) = tcp.into_split();
                            bridge(ws, rd, wr, &counters).await;
                        }
                        Err(e) => {
                            tracing::warn!(member = %name, error = %e, "stream refused");
                            if let Ok(mut last) = last_error.lock() {
                                *last = Some(e.to_string());
                            }
                        }
                    }
                });
                // Forget finished connections so the set does not grow.
                while connections.try_join_next().is_some() {}
            }
        });
        self.add_task(id, task);
        Ok(Started { id, local })
    }
}
