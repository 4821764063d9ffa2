//! The session registry: the [`Supervisor`] that keeps every session (a numbered
//! [`SessionView`] with its counters, last error and tasks), lists them, tells subscribers of
//! every change, and ends them — one by one ([`Supervisor::stop`]), all at once
//! ([`Supervisor::stop_all`]), or all when the last handle is dropped (its tasks aborted,
//! which closes listeners and kills helpers). The other parts of [`crate::session`] start
//! sessions and register them here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum SessionKind {
    /// The VNC console shown inside the app.
    Console,
    /// The VNC console in a native viewer (remote-viewer, TigerVNC).
    Viewer,
    /// An RDP client through a forward to the guest's port 3389.
    Rdp,
    /// RDP in the app: IronRDP's web client in the window, through the app's proxy to the
    /// guest's port 3389.
    RdpInApp,
    /// SSH through a forward to the guest's port 22.
    Ssh,
    /// A plain port forward.
    Forward,
    /// A local USB device redirected into the desktop.
    Usb,
}

/// Where a session stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase", tag = "kind")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// Unique within the supervisor, counting from 1.
    pub id: u32,
    /// Namespace of the member.
    pub namespace: String,
    /// The member (VMI) it reaches.
    pub member: String,
    /// What it is for.
    pub kind: SessionKind,
    /// What it reaches on the member: `display (VNC)`, `port 22`, `usb 1050:0407`, …
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
    pub bytes_in: u64,
    /// Bytes from this machine to the member.
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
    /// Set when the claim this session's member was renewed for was found lost (someone else
    /// holds it, or its Lease is gone or expired): why, in a sentence
    /// ([`crate::session::ClaimRenewal`]).
    pub claim_lost: Option<String>,
}

/// Byte and connection counters of one session, shared with its tasks.
#[derive(Debug, Default)]
pub struct Counters {
    pub(super) bytes_in: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) open: AtomicU32,
    pub(super) total: AtomicU32,
}

impl Counters {
    /// Counts a stream opened (now and in the total) until the returned guard is dropped. The
    /// count never goes below zero: a session that ended sets it to zero while its relays are
    /// still winding down, and their ends must not wrap it round to 4294967295.
    pub(super) fn opened(&self) -> OpenStream<'_> {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        OpenStream(self)
    }
}

/// One open stream of a session ([`Counters::opened`]); closes it in the count when dropped.
pub(super) struct OpenStream<'a>(&'a Counters);

impl Drop for OpenStream<'_> {
    fn drop(&mut self) {
        // `fetch_update` with a saturating step: Err only when it would not change (zero).
        let _ = self
            .0
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
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

/// A handle the supervisor's own tasks keep, so that they never keep it alive: when the last
/// [`Supervisor`] is dropped, its sessions end.
#[derive(Clone)]
pub(super) struct WeakSupervisor(std::sync::Weak<Inner>);

impl WeakSupervisor {
    pub(super) fn end(&self, id: u32, reason: &str) {
        self.finish(id, reason, false);
    }

    pub(super) fn finish(&self, id: u32, reason: &str, failed: bool) {
        self.with(|s| s.finish(id, reason, failed));
    }

    /// `f` of the supervisor, if it is still there.
    pub(super) fn with<T>(&self, f: impl FnOnce(&Supervisor) -> T) -> Option<T> {
        self.0.upgrade().map(|inner| f(&Supervisor { inner }))
    }

    /// Tells every open session on `member` in `namespace` that its claim was lost (`why`).
    pub(super) fn claim_lost(&self, namespace: &str, member: &str, why: &str) {
        self.with(|s| s.claim_lost(namespace, member, why));
    }
}

impl Supervisor {
    pub(super) fn downgrade(&self) -> WeakSupervisor {
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

    pub(super) fn end(&self, id: u32, reason: &str) -> bool {
        self.finish(id, reason, false)
    }

    /// Records on every open session on `member` in `namespace` that its claim was lost
    /// (`why`).
    fn claim_lost(&self, namespace: &str, member: &str, why: &str) {
        if let Ok(mut sessions) = self.inner.sessions.lock() {
            for entry in sessions.values_mut().filter(|e| {
                e.view.state == SessionState::Active
                    && e.view.namespace == namespace
                    && e.view.member == member
            }) {
                entry.view.claim_lost = Some(why.to_owned());
            }
        }
        self.touch();
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

    pub(super) fn register(
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
            claim_lost: None,
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

    pub(super) fn shared(&self, id: u32) -> (Arc<Counters>, Arc<Mutex<Option<String>>>) {
        let sessions = self.inner.sessions.lock();
        sessions
            .ok()
            .and_then(|s| {
                s.get(&id)
                    .map(|e| (e.counters.clone(), e.last_error.clone()))
            })
            .unwrap_or_default()
    }

    /// Records `program` (process `pid`) as the helper of session `id`, with `watcher`, the
    /// task that waits for it to exit.
    pub(super) fn set_helper(&self, id: u32, program: &str, pid: u32, watcher: JoinHandle<()>) {
        if let Ok(mut sessions) = self.inner.sessions.lock()
            && let Some(entry) = sessions.get_mut(&id)
        {
            entry.view.helper = Some(program.to_owned());
            entry.view.helper_pid = Some(pid);
            entry.tasks.push(watcher);
        }
        self.touch();
    }

    pub(super) fn add_task(&self, id: u32, task: JoinHandle<()>) {
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
pub(super) fn admitted(id: u32, check: std::result::Result<(), crate::peer::Refused>) -> bool {
    match check {
        Ok(()) => true,
        Err(refused) => {
            tracing::warn!(session = id, peer = %refused.peer, uid = ?refused.uid, "{refused}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_count_never_wraps_below_zero_when_a_session_ends_before_its_streams() {
        let counters = Counters::default();
        let first = counters.opened();
        let second = counters.opened();
        assert_eq!(counters.open.load(Ordering::Relaxed), 2);
        // The session ends: its count reads zero at once, while its relays still wind down.
        counters.open.store(0, Ordering::Relaxed);
        drop(first);
        drop(second);
        assert_eq!(counters.open.load(Ordering::Relaxed), 0);
        assert_eq!(counters.total.load(Ordering::Relaxed), 2);
        let third = counters.opened();
        assert_eq!(counters.open.load(Ordering::Relaxed), 1);
        drop(third);
        assert_eq!(counters.open.load(Ordering::Relaxed), 0);
    }
}
