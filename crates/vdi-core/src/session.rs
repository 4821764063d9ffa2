//! The session supervisor: every stream, local forward and helper process the app or the CLI
//! starts is one session here — listable, stoppable one by one, and all ended when the
//! [`Supervisor`] is dropped (the app's exit): tasks are aborted, listeners closed, helper
//! processes killed. Helpers also die with the process that started them (Linux
//! `PR_SET_PDEATHSIG`), so a crash leaves none behind.
//!
//! A forward listens on 127.0.0.1 only (an ephemeral port unless one is asked for) and opens
//! one KubeVirt stream per accepted connection, as virtctl does, so reconnecting works as
//! often as the user likes. Every listener serves only the user who started it: another
//! user's connection is closed before any stream is opened, and logged with its uid
//! ([`crate::peer`]); the USB bridge takes only its own usbredirect's. Bytes are copied both
//! ways with backpressure (a frame is sent before the next read), virt-api's pings are
//! answered, and the connection ends when either side ends.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use jiff::Timestamp;
use kube::Client;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_tungstenite::tungstenite::Message;
use ts_rs::TS;

use crate::error::{Error, Result};
use crate::stream::{self, Subresource, VmiStream};

/// What a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub enum SessionKind {
    /// The VNC console shown inside the app.
    Console,
    /// The VNC console in a native viewer (remote-viewer, TigerVNC).
    Viewer,
    /// An RDP client through a forward to the guest's port 3389.
    Rdp,
    /// SSH through a forward to the guest's port 22.
    Ssh,
    /// A plain port forward.
    Forward,
    /// A local USB device redirected into the desktop.
    Usb,
}

/// Where a session stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[ts(export)]
pub enum SessionState {
    /// Listening or connected.
    Active,
    /// Over; `reason` says why (stopped by the user, the helper exited, the stream ended…).
    Ended {
        /// Why it ended.
        reason: String,
        /// Whether its helper failed: exited with a non-zero status or by a signal, or could
        /// not be waited for (a viewer that found no display, a client that refused the
        /// server). `false` for every other end.
        failed: bool,
    },
}

/// One session, ready to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct SessionView {
    /// Unique within the supervisor, counting from 1.
    pub id: u32,
    /// Namespace of the member.
    pub namespace: String,
    /// The member (VMI) it reaches.
    pub member: String,
    /// What it is for.
    pub kind: SessionKind,
    /// What it reaches on the member: `vnc`, `port 22`, `usb 1050:0407`, …
    pub target: String,
    /// The local end (`127.0.0.1:PORT`), if it listens.
    pub local_address: Option<String>,
    /// The helper program's name and process id, if one runs.
    pub helper: Option<String>,
    /// Process id of the helper.
    pub helper_pid: Option<u32>,
    /// When it started.
    pub started_at: Timestamp,
    /// Bytes from the member to this machine.
    #[ts(type = "number")]
    #[specta(type = f64)]
    pub bytes_in: u64,
    /// Bytes from this machine to the member.
    #[ts(type = "number")]
    #[specta(type = f64)]
    pub bytes_out: u64,
    /// Streams open now.
    pub connections: u32,
    /// Streams opened so far.
    pub connections_total: u32,
    /// The last stream that could not be opened, and why (a connection attempt that failed
    /// does not end a forward: the next one may work).
    pub last_error: Option<String>,
    /// Where it stands.
    pub state: SessionState,
}

/// Byte and connection counters of one session, shared with its tasks.
#[derive(Debug, Default)]
pub struct Counters {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    open: AtomicU32,
    total: AtomicU32,
}

struct Entry {
    view: SessionView,
    counters: Arc<Counters>,
    last_error: Arc<Mutex<Option<String>>>,
    /// The forward's accept loop and the helper's watcher; aborted to stop the session.
    tasks: Vec<JoinHandle<()>>,
}

/// Keeps every session; dropping it ends them all.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

struct Inner {
    sessions: Mutex<BTreeMap<u32, Entry>>,
    next: AtomicU32,
    changed: watch::Sender<u64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut sessions) = self.sessions.lock() {
            for entry in sessions.values_mut() {
                for task in entry.tasks.drain(..) {
                    task.abort();
                }
            }
        }
    }
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}

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
    fn subresource(self) -> Subresource {
        match self {
            Target::Vnc { preserve_session } => Subresource::Vnc { preserve_session },
            Target::Port(port) => Subresource::PortForward { port },
        }
    }

    fn describe(self) -> String {
        match self {
            Target::Vnc { .. } => "vnc".to_owned(),
            Target::Port(port) => format!("port {port}"),
        }
    }
}

/// What a session is about: the member it reaches, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct About {
    /// Namespace of the member.
    pub namespace: String,
    /// The member.
    pub member: String,
    /// What the session is for.
    pub kind: SessionKind,
    /// What it reaches on the member (`port 22`, …).
    pub target: String,
}

/// A forward that was started: its session and where it listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The session's id.
    pub id: u32,
    /// The local address it listens on (127.0.0.1).
    pub local: SocketAddr,
}

/// A handle the supervisor's own tasks keep, so that they never keep it alive: when the last
/// [`Supervisor`] is dropped, its sessions end.
#[derive(Clone)]
struct WeakSupervisor(std::sync::Weak<Inner>);

impl WeakSupervisor {
    fn end(&self, id: u32, reason: &str) {
        self.finish(id, reason, false);
    }

    fn finish(&self, id: u32, reason: &str, failed: bool) {
        if let Some(inner) = self.0.upgrade() {
            Supervisor { inner }.finish(id, reason, failed);
        }
    }
}

impl Supervisor {
    fn downgrade(&self) -> WeakSupervisor {
        WeakSupervisor(Arc::downgrade(&self.inner))
    }

    /// An empty supervisor.
    pub fn new() -> Self {
        Supervisor {
            inner: Arc::new(Inner {
                sessions: Mutex::new(BTreeMap::new()),
                next: AtomicU32::new(1),
                changed: watch::Sender::new(0),
            }),
        }
    }

    /// A receiver woken on every change of the session list (or of a session's state).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    fn touch(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Every session, oldest first, with its counters as of now.
    pub fn list(&self) -> Vec<SessionView> {
        let Ok(sessions) = self.inner.sessions.lock() else {
            return Vec::new();
        };
        sessions
            .values()
            .map(|e| {
                let mut view = e.view.clone();
                view.bytes_in = e.counters.bytes_in.load(Ordering::Relaxed);
                view.bytes_out = e.counters.bytes_out.load(Ordering::Relaxed);
                view.connections = e.counters.open.load(Ordering::Relaxed);
                view.connections_total = e.counters.total.load(Ordering::Relaxed);
                view.last_error = e.last_error.lock().ok().and_then(|l| l.clone());
                view
            })
            .collect()
    }

    /// One session as of now.
    pub fn get(&self, id: u32) -> Option<SessionView> {
        self.list().into_iter().find(|s| s.id == id)
    }

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

    /// Starts a session that bridges one already-opened stream to a reader and a writer
    /// (e.g. stdin/stdout for `port-forward --stdio`), and ends with it.
    pub fn start_bridge<R, W>(&self, ws: VmiStream, local: (R, W), about: About) -> u32
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (rd, wr) = local;
        let id = self.register(
            &about.namespace,
            &about.member,
            about.kind,
            about.target,
            None,
        );
        let (counters, _) = self.shared(id);
        let this = self.downgrade();
        let task = tokio::spawn(async move {
            bridge(ws, rd, wr, &counters).await;
            this.end(id, "the stream ended");
        });
        self.add_task(id, task);
        id
    }

    /// Runs `program` with `args` (an argument vector, never a shell string) as the helper of
    /// session `id`, with `stdin` fed to it if given; the session ends when the helper exits
    /// (noticed at once) and the helper is killed when the session is stopped or the
    /// supervisor dropped. Returns its process id.
    ///
    /// Errors: the program is not installed ([`Error::Rejected`] `NotFound`, naming it), or
    /// cannot be started.
    pub fn attach_helper(
        &self,
        id: u32,
        program: &str,
        args: &[String],
        stdin: Option<Vec<u8>>,
    ) -> Result<u32> {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let mut child = command.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::rejected(
                    crate::error::ErrorKind::NotFound,
                    format!("{program} is not installed (not found on PATH)"),
                    crate::connect::install_hint(program),
                )
            } else {
                Error::Config(format!("start {program}: {e}"))
            }
        })?;
        let pid = child.id().unwrap_or(0);
        if let Some(bytes) = stdin
            && let Some(mut pipe) = child.stdin.take()
        {
            tokio::spawn(async move {
                let _ = pipe.write_all(&bytes).await;
                let _ = pipe.shutdown().await;
            });
        }
        let stderr = child.stderr.take();
        let this = self.downgrade();
        let name = program.to_owned();
        let watcher = tokio::spawn(async move {
            let mut errors = String::new();
            if let Some(mut err) = stderr {
                let _ = err.read_to_string(&mut errors).await;
            }
            let status = child.wait().await;
            let tail: String = errors
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" / ");
            let said = if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            };
            let (reason, failed) = match status {
                Ok(s) if s.success() => (format!("{name} exited{said}"), false),
                Ok(s) => (format!("{name} exited ({s}){said}"), true),
                Err(e) => (format!("{name} could not be waited for: {e}"), true),
            };
            this.finish(id, &reason, failed);
        });
        if let Ok(mut sessions) = self.inner.sessions.lock()
            && let Some(entry) = sessions.get_mut(&id)
        {
            entry.view.helper = Some(program.to_owned());
            entry.view.helper_pid = Some(pid);
            entry.tasks.push(watcher);
        }
        self.touch();
        Ok(pid)
    }

    /// Stops session `id`: closes its listener and streams, kills its helper. Returns whether
    /// it was running.
    pub fn stop(&self, id: u32) -> bool {
        self.end(id, "stopped")
    }

    /// Stops every running session (the app's exit).
    pub fn stop_all(&self) {
        let ids: Vec<u32> = self.list().iter().map(|s| s.id).collect();
        for id in ids {
            self.end(id, "the app is closing");
        }
    }

    /// Removes ended sessions from the list.
    pub fn forget_ended(&self) {
        if let Ok(mut sessions) = self.inner.sessions.lock() {
            sessions.retain(|_, e| e.view.state == SessionState::Active);
        }
        self.touch();
    }

    fn end(&self, id: u32, reason: &str) -> bool {
        self.finish(id, reason, false)
    }

    /// Ends session `id` for `reason` (`failed`: its helper failed); returns whether it was
    /// running.
    fn finish(&self, id: u32, reason: &str, failed: bool) -> bool {
        let was_active = {
            let Ok(mut sessions) = self.inner.sessions.lock() else {
                return false;
            };
            let Some(entry) = sessions.get_mut(&id) else {
                return false;
            };
            let active = entry.view.state == SessionState::Active;
            if active {
                entry.view.state = SessionState::Ended {
                    reason: reason.to_owned(),
                    failed,
                };
                entry.counters.open.store(0, Ordering::Relaxed);
            }
            for task in entry.tasks.drain(..) {
                task.abort();
            }
            active
        };
        if was_active {
            tracing::info!(session = id, reason, "session ended");
            self.touch();
        }
        was_active
    }

    fn register(
        &self,
        namespace: &str,
        member: &str,
        kind: SessionKind,
        target: String,
        local: Option<SocketAddr>,
    ) -> u32 {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let view = SessionView {
            id,
            namespace: namespace.to_owned(),
            member: member.to_owned(),
            kind,
            target,
            local_address: local.map(|a| a.to_string()),
            helper: None,
            helper_pid: None,
            started_at: Timestamp::now(),
            bytes_in: 0,
            bytes_out: 0,
            connections: 0,
            connections_total: 0,
            last_error: None,
            state: SessionState::Active,
        };
        if let Ok(mut sessions) = self.inner.sessions.lock() {
            sessions.insert(
                id,
                Entry {
                    view,
                    counters: Arc::new(Counters::default()),
                    last_error: Arc::new(Mutex::new(None)),
                    tasks: Vec::new(),
                },
            );
        }
        tracing::info!(session = id, %namespace, %member, ?kind, "session started");
        self.touch();
        id
    }

    fn shared(&self, id: u32) -> (Arc<Counters>, Arc<Mutex<Option<String>>>) {
        let sessions = self.inner.sessions.lock();
        sessions
            .ok()
            .and_then(|s| {
                s.get(&id)
                    .map(|e| (e.counters.clone(), e.last_error.clone()))
            })
            .unwrap_or_default()
    }

    fn add_task(&self, id: u32, task: JoinHandle<()>) {
        if let Ok(mut sessions) = self.inner.sessions.lock()
            && let Some(entry) = sessions.get_mut(&id)
        {
            entry.tasks.push(task);
            return;
        }
        task.abort();
    }
}

/// Whether session `id` may serve a connection, as `check` ([`crate::peer`]) found; a refusal
/// is logged with the peer's uid, and the caller drops (closes at once) the connection.
fn admitted(id: u32, check: std::result::Result<(), crate::peer::Refused>) -> bool {
    match check {
        Ok(()) => true,
        Err(refused) => {
            tracing::warn!(session = id, peer = %refused.peer, uid = ?refused.uid, "{refused}");
            false
        }
    }
}

/// Size of one read from the local side, in bytes (one websocket frame at most).
const CHUNK: usize = 32 * 1024;

/// Copies bytes between a KubeVirt stream and a local reader/writer until either side ends
/// (as virtctl does: the first direction to finish ends the connection; what the local side
/// sent before it ended is delivered first). Binary frames carry the bytes; text frames are
/// ignored; pings are answered with pongs. A local read is never cancelled midway (stdin's
/// blocking read would lose its bytes): reads feed a bounded queue the websocket writer
/// drains, which is also where pongs go.
pub async fn bridge<R, W>(ws: VmiStream, mut rd: R, mut wr: W, counters: &Counters)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    counters.open.fetch_add(1, Ordering::Relaxed);
    counters.total.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut frames) = ws.split();
    let (data_tx, mut data_rx) = mpsc::channel::<bytes::Bytes>(4);
    let (pongs, mut pending_pongs) = mpsc::channel::<bytes::Bytes>(4);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if data_tx
                        .send(bytes::Bytes::copy_from_slice(&buf[..n]))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    };
    let writer = async {
        loop {
            tokio::select! {
                biased;
                data = data_rx.recv() => match data {
                    Some(data) => {
                        let n = data.len() as u64;
                        if sink.send(Message::Binary(data)).await.is_err() {
                            break;
                        }
                        counters.bytes_out.fetch_add(n, Ordering::Relaxed);
                    }
                    None => break,
                },
                Some(payload) = pending_pongs.recv() => {
                    if sink.send(Message::Pong(payload)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.close().await;
    };
    let upstream = async {
        tokio::join!(reader, writer);
    };
    let downstream = async {
        while let Some(frame) = frames.next().await {
            match frame {
                Ok(Message::Binary(data)) => {
                    // Flushed at once: a writer such as stdout buffers until a newline.
                    if wr.write_all(&data).await.is_err() || wr.flush().await.is_err() {
                        break;
                    }
                    counters
                        .bytes_in
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                Ok(Message::Ping(payload)) => {
                    let _ = pongs.try_send(payload);
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = wr.flush().await;
        let _ = wr.shutdown().await;
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
    counters.open.fetch_sub(1, Ordering::Relaxed);
}

/// Asks Linux to kill the helper when the thread that started it ends, so a crashed app
/// leaves no helper behind.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// The in-app console of a member: a websocket on 127.0.0.1 that only the app can use (its
/// path holds a 128-bit secret made per session, only the app's own origins and its own user's
/// connections are accepted, and a client that has not done its handshake within 10 s is
/// closed), relaying RFB bytes to and from the VMI's `vnc` stream for noVNC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
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

fn secret() -> Result<String> {
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
            "vnc".into(),
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
struct ConsoleGate {
    path: Arc<str>,
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
    counters.open.fetch_add(1, Ordering::Relaxed);
    counters.total.fetch_add(1, Ordering::Relaxed);
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
    counters.open.fetch_sub(1, Ordering::Relaxed);
}

impl Supervisor {
    /// Redirects a local USB device into `member` as KubeVirt's own client does: a listener on
    /// 127.0.0.1, `usbredirect --device <vid:pid> --to 127.0.0.1:PORT` (`program`), and its one
    /// connection bridged to the VMI's `usbredir` stream (a connection that is not this
    /// usbredirect's, whoever makes it, is closed at once: [`crate::peer::from_process`]). The
    /// session (kind `usb`) ends when the device goes (usbredirect exits), the desktop goes (the
    /// stream ends), or it is stopped (Detach). `spec` is how the device was named (passed to usbredirect as it is).
    /// Call [`crate::usb::check_redirect`] first.
    ///
    /// Errors: usbredirect exits before connecting — `NotFound` "device … is not present" when
    /// it says "Failed to open device" (it exits with status 0 then), else its message; the
    /// stream's refusal (409 no clientPassthrough, 503 four devices already); nothing left
    /// running in either case.
    pub async fn start_usb(
        &self,
        client: Client,
        namespace: &str,
        member: &str,
        device: &crate::usb::UsbDevice,
        spec: &crate::usb::DeviceSpec,
        program: &std::path::Path,
    ) -> Result<u32> {
        let at = format!(" at {} ", device.bus_address);
        if let Some(holder) = self.list().into_iter().find(|s| {
            s.kind == SessionKind::Usb && s.state == SessionState::Active && s.target.contains(&at)
        }) {
            return Err(Error::rejected(
                crate::error::ErrorKind::Busy,
                format!(
                    "{} ({}) is already attached to {}",
                    device.id,
                    device.describe(),
                    holder.member
                ),
                "detach it first (Sessions, or Ctrl-C in the command that attached it)",
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| Error::Config(format!("listen for usbredirect on 127.0.0.1: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Config(format!("usbredirect listener address: {e}")))?;
        let id = self.register(
            namespace,
            member,
            SessionKind::Usb,
            format!(
                "usb {} at {} ({})",
                device.id,
                device.bus_address,
                device.describe()
            ),
            Some(local),
        );
        // As the user named it: vendor:product, or bus-address when two of a kind are plugged
        // in (usbredirect takes both).
        let args = vec![
            "--device".to_owned(),
            spec.argument(),
            "--to".to_owned(),
            local.to_string(),
        ];
        let pid = match self.attach_helper(id, &program.display().to_string(), &args, None) {
            Ok(pid) => pid,
            Err(e) => {
                self.end(id, "usbredirect could not start");
                return Err(e);
            }
        };
        let mut changes = self.subscribe();
        let ended = async {
            loop {
                if let Some(SessionState::Ended { reason, .. }) = self.get(id).map(|s| s.state) {
                    return reason;
                }
                if changes.changed().await.is_err() {
                    return "the supervisor stopped".to_owned();
                }
            }
        };
        let accepted = tokio::select! {
            accepted = tokio::time::timeout(std::time::Duration::from_secs(15), accept_from(&listener, id, pid)) => accepted,
            reason = ended => {
                let not_present = reason.contains("Failed to open device");
                return Err(if not_present {
                    Error::rejected(
                        crate::error::ErrorKind::NotFound,
                        format!(
                            "device {} is not present (usbredirect: Failed to open device)",
                            spec.argument()
                        ),
                        "plug it in (and check that you may open it: corral-vdi usb list), then try again",
                    )
                } else {
                    Error::rejected(
                        crate::error::ErrorKind::Other,
                        format!("usbredirect ended before connecting: {reason}"),
                        "check the device with `corral-vdi usb list`, then try again",
                    )
                });
            }
        };
        let tcp = match accepted {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => {
                self.end(id, "usbredirect could not connect");
                return Err(Error::Config(format!(
                    "accept usbredirect's connection: {e}"
                )));
            }
            Err(_) => {
                self.end(id, "usbredirect did not connect");
                return Err(Error::Config(format!(
                    "usbredirect did not connect to {local} within 15 s"
                )));
            }
        };
        let ws = match stream::open(&client, namespace, member, Subresource::UsbRedir).await {
            Ok(ws) => ws,
            Err(e) => {
                self.end(id, "the desktop refused the device");
                return Err(e);
            }
        };
        let (counters, _) = self.shared(id);
        let this = self.downgrade();
        let task = tokio::spawn(async move {
            let (rd, wr) = tcp.into_split();
            bridge(ws, rd, wr, &counters).await;
            this.end(
                id,
                "the redirection ended (the device was unplugged or the desktop stopped)",
            );
        });
        self.add_task(id, task);
        Ok(id)
    }
}

/// The first connection to `listener` that process `pid` (session `id`'s helper) makes; any
/// other, another user's or another process's, is closed at once and logged.
///
/// Errors: the listener fails.
async fn accept_from(
    listener: &TcpListener,
    id: u32,
    pid: u32,
) -> std::io::Result<tokio::net::TcpStream> {
    loop {
        let (tcp, _) = listener.accept().await?;
        if admitted(id, crate::peer::from_process(&tcp, pid)) {
            return Ok(tcp);
        }
    }
}
