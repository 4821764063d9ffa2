//! Pool create, SPEC steps 5–7: cloning the members. One `VirtualMachineClone` per member
//! (version by discovery), watched together; each member is waited for with its own timeout,
//! labelled with the pool, made sure to be halted, and its finished clone object removed. A
//! clone that fails, stalls or is cancelled is deleted, and so is a VM it produced anyway, so
//! the result says exactly which members exist.
//!
//! The parts: `member` is one member's way from clone object to labelled VM (or clean-up);
//! this file starts the run (the lock, the watch that reports every clone object to its
//! member) and gathers the outcomes. The clone objects themselves are read and named in
//! [`super::clone_object`].

mod member;

pub use member::format_duration;
use member::{CloneObs, Run, observe};

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::pin::pin;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::clone_object::{CloneApi, clone_name};
use super::free::Namespaced;
use super::{CLONE_KIND, CancelHandle, CreatePool, RUN_LABEL};
use crate::error::{Error, ErrorKind, PoolCreateFailure, Result, is_status};
use crate::pool::{CreateProgress, CreateStarted, PoolCreated};

/// A run id: 16 hex digits, random per run (a label value).
fn new_run_id() -> String {
    let seed = (Timestamp::now().as_nanosecond(), std::process::id());
    format!("{:016x}", RandomState::new().hash_one(seed))
}

/// Keeps the watch of this run's clone objects running; aborts it when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the clone objects labelled with this run's id and hands each one's state to the
/// member waiting for it.
async fn dispatch(
    api: Api<DynamicObject>,
    run_id: String,
    senders: HashMap<String, watch::Sender<CloneObs>>,
    watch_error: Arc<Mutex<Option<String>>>,
) {
    let config = watcher::Config::default().labels(&format!("{RUN_LABEL}={run_id}"));
    let mut stream = pin!(watcher::watcher(api, config).backoff(crate::watch::default_backoff()));
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
                if let Some(tx) = senders.get(&obj.name_any()) {
                    tx.send_replace(observe(&obj));
                }
                if let Ok(mut err) = watch_error.lock() {
                    *err = None;
                }
            }
            Ok(Event::Delete(obj)) => {
                if let Some(tx) = senders.get(&obj.name_any()) {
                    let mut obs = observe(&obj);
                    obs.gone = true;
                    tx.send_replace(obs);
                }
            }
            Ok(Event::Init | Event::InitDone) => {}
            Err(e) => {
                tracing::debug!(error = %e, "watching VirtualMachineClones failed; retrying");
                if let Ok(mut err) = watch_error.lock() {
                    *err = Some(e.to_string());
                }
            }
        }
    }
}

/// SPEC steps 5–7, once every check has passed: one `VirtualMachineClone` per member, the
/// first one alone as the lock against a racing create of the same pool (then the names are
/// checked free again), the others all at once; each waited for, labelled, and its clone
/// object removed, or cleaned up when it fails, stalls or is cancelled.
///
/// Errors: those listed on [`super::create_pool`] from "another create of the same pool got
/// there first" on.
pub(super) async fn clone_members<P>(
    client: &Client,
    request: &CreatePool,
    scope: Namespaced,
    clone_api: CloneApi,
    started: Instant,
    progress: P,
) -> Result<PoolCreated>
where
    P: Fn(CreateProgress) + Send + Sync,
{
    let ns = scope.namespace.clone();
    let pool = scope.pool.clone();
    let members = scope.members.clone();
    let mut senders = HashMap::new();
    let mut statuses = HashMap::new();
    for member in &members {
        let (tx, rx) = watch::channel(CloneObs::default());
        senders.insert(clone_name(member), tx);
        statuses.insert(clone_name(member), rx);
    }
    let slots = request
        .options
        .clone_concurrency
        .unwrap_or(members.len())
        .clamp(1, members.len());
    let run = Run {
        golden: request.golden.clone(),
        run_id: new_run_id(),
        clone_api: clone_api.resource.clone(),
        timeout: request.options.timeout,
        api_permits: Semaphore::new(request.options.api_concurrency.max(1)),
        clone_slots: Semaphore::new(slots),
        bounded: slots < members.len(),
        started,
        progress: &progress,
        statuses,
        watch_error: Arc::new(Mutex::new(None)),
        events: Api::namespaced(client.clone(), &ns),
        cancel: request.options.cancel.clone(),
        scope,
    };

    if request
        .options
        .cancel
        .as_ref()
        .is_some_and(CancelHandle::is_cancelled)
    {
        return Err(Error::rejected(
            ErrorKind::Other,
            format!("pool create of \"{pool}\" was cancelled before anything was created"),
            "run it again when you are ready",
        ));
    }
    // The first member's clone is the lock: of two racing creates, one gets AlreadyExists.
    let first = &members[0];
    let lock = match run.create_clone(first).await {
        Ok(lock) => lock,
        Err(e) if is_status(&e, 409) => {
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "{CLONE_KIND} \"{}\" already exists in namespace \"{ns}\": another create of \
                     pool \"{pool}\" got there first",
                    clone_name(first)
                ),
                format!(
                    "wait for it to finish and look with corral-vdi pool list -n {ns}; nothing was \
                     created by this run"
                ),
            ));
        }
        Err(e) => {
            return Err(Error::kube(
                format!(
                    "create {CLONE_KIND} \"{}\" in namespace \"{ns}\"",
                    clone_name(first)
                ),
                e,
            ));
        }
    };
    // Holding the lock, check again: a create that finished meanwhile, or debris, shows now.
    if let Err(e) = run.scope.check_free(Some(&run.run_id)).await {
        let _ = run.delete_clone(&lock).await;
        return Err(e);
    }

    progress(CreateProgress::Started(CreateStarted {
        namespace: ns.clone(),
        pool: pool.clone(),
        golden: request.golden.clone(),
        members: members.clone(),
        clone_api_version: clone_api.version.clone(),
        run_id: run.run_id.clone(),
    }));
    let _watch = AbortOnDrop(tokio::spawn(dispatch(
        run.scope.clones.clone(),
        run.run_id.clone(),
        senders,
        run.watch_error.clone(),
    )));

    let mut lock = Some(lock);
    let outcomes = futures::future::join_all(members.iter().map(|m| {
        let pre = if m == first { lock.take() } else { None };
        run.member(m.clone(), pre)
    }))
    .await;

    let mut created = Vec::new();
    let mut failed = Vec::new();
    let mut leftovers = Vec::new();
    let mut warnings = Vec::new();
    for outcome in outcomes {
        match outcome.failure {
            None => created.push(outcome.member),
            Some(failure) => failed.push(failure),
        }
        leftovers.extend(outcome.leftovers);
        warnings.extend(outcome.warnings);
    }
    if failed.is_empty() {
        return Ok(PoolCreated {
            namespace: ns,
            name: pool,
            golden: request.golden.clone(),
            members: created,
            clone_api_version: clone_api.version,
            elapsed_ms: u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX),
            warnings,
            entitled: Vec::new(),
        });
    }
    leftovers.extend(warnings);
    Err(Error::PoolIncomplete(Box::new(PoolCreateFailure {
        namespace: ns,
        pool,
        requested: request.size,
        created,
        failed,
        leftovers,
    })))
}
