//! The live view of pools: kube-rs reflectors over labelled VirtualMachines, claim Leases and
//! DesktopPools (managed pools' policies; optional, [`policies`]), regrouped on every change and
//! published as a whole [`PoolsSnapshot`].
//!
//! Changes arrive through watches. Two timers: the next Lease expiry or reclaim notice (the
//! moments a derived state changes without an event), and a heartbeat (`GET /version` every [`HEARTBEAT`]) that
//! notices an API server gone silent while its watch connections stay open, so that the view
//! never says "live" over data nobody is refreshing.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::ServerClock;
use crate::error::{Error, ErrorView, Result};
use crate::lease::{ClaimLease, concerns_claims};
use crate::names::POOL_LABEL;
use crate::policy::DesktopPool;
use crate::policy::plan::{DEFAULT_RECLAIM_MARGIN, PoolObjects, Seen};
use crate::resources::VirtualMachine;
use crate::scope::Scope;
use crate::state::{ClaimSide, PoolView, group_pools_with, next_expiry};

mod policies;

pub use policies::list as list_policies;

/// How long a burst of watch events is gathered before the pools are regrouped.
pub const COALESCE: StdDuration = StdDuration::from_millis(25);

/// How often the feed asks the API server whether it still answers.
pub const HEARTBEAT: StdDuration = StdDuration::from_secs(3);

/// How long the heartbeat waits for an answer before it calls the server silent.
pub const HEARTBEAT_TIMEOUT: StdDuration = StdDuration::from_secs(3);

/// The longest wait between two attempts to re-establish a failed watch. kube-rs's default
/// (client-go's: up to 30 s) is kind to a struggling server, but a console must be current
/// within seconds of the server answering again; jitter still spreads the clients.
pub const MAX_RETRY_DELAY: StdDuration = StdDuration::from_secs(2);

/// The watch retry policy: 200 ms doubling to [`MAX_RETRY_DELAY`], with jitter, reset after a
/// minute without failures (and only then: [`TimerResetOnly`]).
fn retry_backoff() -> TimerResetOnly<ResetTimerBackoff<watcher::ExponentialBackoff>> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(StdDuration::from_millis(200))
        .with_max_delay(MAX_RETRY_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    TimerResetOnly(ResetTimerBackoff::new(
        exponential.into(),
        StdDuration::from_secs(60),
    ))
}

/// kube-runtime's default watch retry policy (800 ms doubling to 30 s, with jitter), reset only
/// by its own timer ([`TimerResetOnly`]): for the watches other than the pool feed's, the
/// broker's included.
pub fn default_backoff() -> TimerResetOnly<watcher::DefaultBackoff> {
    TimerResetOnly(watcher::DefaultBackoff::default())
}

/// A watch retry policy that starts again from its shortest delay only by its own timer
/// (a [`ResetTimerBackoff`] inside: a whole period without a failure), never because the
/// stream yielded an item.
///
/// kube-runtime's `StreamBackoff` resets its policy on every `Ok` item, and its watcher yields
/// `Ok(Event::Init)` as each list *begins*, before the API server has answered it (kube-runtime
/// 5.0, `watcher.rs`: the step out of `State::Empty`). A list refused every time (a 403 on a
/// cluster-wide list) was therefore retried at the shortest delay for ever: about six requests
/// a second from one window. With this the delays grow to their maximum while the refusals
/// last.
#[derive(Debug)]
pub struct TimerResetOnly<B>(B);

impl<B: Iterator<Item = StdDuration>> Iterator for TimerResetOnly<B> {
    type Item = StdDuration;

    fn next(&mut self) -> Option<StdDuration> {
        self.0.next()
    }
}

impl<B: Backoff> Backoff for TimerResetOnly<B> {
    fn reset(&mut self) {}
}

fn api<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match scope {
        Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
        Scope::All => Api::all(client.clone()),
    }
}

fn where_(scope: &Scope) -> String {
    match scope {
        Scope::Namespace(ns) => format!("in namespace \"{ns}\""),
        Scope::All => "in all namespaces".to_owned(),
    }
}

/// Lists the pools in `scope` once, judged at the API server's time, on a cluster without a
/// broker ([`list_pools_on`] with [`ClaimSide::Client`]).
///
/// Errors: [`list_pools_on`]'s.
pub async fn list_pools(
    client: &Client,
    scope: &Scope,
    clock: &ServerClock,
) -> Result<Vec<PoolView>> {
    list_pools_on(client, scope, clock, ClaimSide::Client).await
}

/// Lists the pools in `scope` once, judged at the API server's time where `side` does the
/// cluster's half of claims (with a broker, an active claim reads "granting" until the broker
/// has finished it).
///
/// Leases are listed whole (not by label) and joined to members by name
/// ([`crate::lease`]): an unlabelled claim Lease still keeps its member from being shown free.
/// DesktopPools are listed too, and make their pools managed; when they cannot be read (no
/// CRD, RBAC) the pools show unmanaged ([`policies`]).
///
/// Errors: [`Error::Invalid`] for a bad namespace name (no request sent); the list of
/// VirtualMachines or Leases failed (403 names the namespace; 404 means KubeVirt's CRDs are
/// not installed). A Lease that cannot be judged never fails it: its member shows it.
pub async fn list_pools_on(
    client: &Client,
    scope: &Scope,
    clock: &ServerClock,
    side: ClaimSide,
) -> Result<Vec<PoolView>> {
    crate::validate::scope(scope)?;
    let vms = api::<VirtualMachine>(client, scope)
        .list(&ListParams::default().labels(POOL_LABEL))
        .await
        .map_err(|e| Error::kube(format!("list VirtualMachines {}", where_(scope)), e))?;
    let leases = crate::lease::list(client, scope).await?;
    let policies = policies::list(client, scope).await;
    Ok(group_pools_with(
        &vms.items,
        &leases,
        &policies,
        clock.now(),
        side,
    ))
}

/// A running live view. Dropping it stops the watches.
pub struct PoolFeed {
    rx: watch::Receiver<PoolsSnapshot>,
    task: JoinHandle<()>,
    vms: Store<VirtualMachine>,
    leases: Store<ClaimLease>,
}

impl PoolFeed {
    /// Starts watching labelled VMs and claim Leases in `scope`, on a cluster without a
    /// broker ([`PoolFeed::spawn_on`] a side that stays [`ClaimSide::Client`]).
    pub fn spawn(client: Client, scope: Scope, clock: ServerClock) -> Self {
        Self::spawn_on(client, scope, clock, watch::channel(ClaimSide::Client).1)
    }

    /// Starts watching labelled VMs and claim Leases in `scope`, judging the members where
    /// `side` (as it is now, and again whenever it changes) does the cluster's half of claims.
    ///
    /// The first snapshot has status `Syncing`; once both initial lists have arrived, status is
    /// `Live` and every change produces a new snapshot. Failures (403, unreachable server)
    /// become status `Failing` with the error, while the watchers retry with backoff.
    pub fn spawn_on(
        client: Client,
        scope: Scope,
        clock: ServerClock,
        side: watch::Receiver<ClaimSide>,
    ) -> Self {
        let initial = PoolsSnapshot {
            scope: scope.clone(),
            status: FeedStatus::Syncing,
            pools: Vec::new(),
            judged_at: clock.now(),
        };
        let (tx, rx) = watch::channel(initial);
        let (vm_store, vm_writer) = reflector::store::<VirtualMachine>();
        let (lease_store, lease_writer) = reflector::store::<ClaimLease>();
        let writers = (vm_writer, lease_writer);
        let stores = (vm_store.clone(), lease_store.clone());
        let task = tokio::spawn(async move {
            supervise(&tx, run(client, scope, clock, side, stores, writers, &tx)).await;
        });
        PoolFeed {
            rx,
            task,
            vms: vm_store,
            leases: lease_store,
        }
    }

    /// The members of `pool` in `namespace` as the broker's pool loop reads them
    /// ([`PoolObjects::seen`] at `now`, with the broker's default margin), from this feed's
    /// watches: what [`crate::policy::plan::resize_preview`] previews a resize with.
    pub fn pool_seen(&self, namespace: &str, pool: &str, now: Timestamp) -> Vec<Seen> {
        PoolObjects::gather(namespace, pool, self.vms.state(), self.leases.state())
            .seen(now, DEFAULT_RECLAIM_MARGIN)
    }

    /// A receiver of snapshots; `changed()` wakes on every new one.
    pub fn subscribe(&self) -> watch::Receiver<PoolsSnapshot> {
        self.rx.clone()
    }
}

impl Drop for PoolFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Which watch (or the heartbeat, or the claim side) an item came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Vms,
    Leases,
    Policies,
    Heartbeat,
    Side,
}

/// What one watch reported.
enum Update {
    /// The initial list is complete (again, after a re-list).
    Synced(Source),
    /// Some object changed.
    Changed(Source),
    /// The watch failed (or the heartbeat went unanswered); it retries by itself.
    Failed(Source, Error),
    /// The heartbeat was answered.
    Answered,
    /// A Lease's expiry came due.
    Tick,
}

/// What a watch keeps in a store: a typed Kubernetes object that may cross threads.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The annotation `kubectl apply` leaves on what it applied: a copy of the object, dropped from
/// every watched object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Watches `api` into `writer`, as both the app's pools feed and the broker's controller do:
/// the first list served from the API server's watch cache, `backoff` between failures, only
/// the objects `keep` accepts (one that stops being kept, its labels changed, leaves the store
/// as a `Delete`; a change to one never kept is no event at all), each trimmed before it is
/// stored (its managedFields and `kubectl apply`'s copy always, then `trim`). Yields each event
/// after the store has it, and each watch error (the watcher retries by itself).
pub fn reflected<K>(
    api: Api<K>,
    mut config: watcher::Config,
    writer: reflector::store::Writer<K>,
    keep: fn(&K) -> bool,
    trim: fn(&mut K),
    backoff: impl Backoff + 'static,
) -> impl Stream<Item = std::result::Result<Event<K>, watcher::Error>> + Send
where
    K: Watched,
{
    // The first list is served from the API server's watch cache (resourceVersion "0", as
    // client-go's reflectors list), not page by page from etcd; the watch that follows
    // brings anything newer. kube-rs: `watcher::Config::any_semantic`, and no page size:
    // kube-core leaves resourceVersion "0" out of a list that has a limit (the API server
    // would ignore the limit), which would make it a quorum read from etcd in pages of 500.
    config = config.any_semantic();
    config.page_size = None;
    let store = writer.as_reader();
    watcher(api, config)
        .backoff(backoff)
        .try_filter_map(move |event| {
            // The store holds what the events before this one made of it: the stream is
            // sequential.
            let known = |k: &K| store.get(&ObjectRef::from_obj(k)).is_some();
            let event = match event {
                Event::Apply(k) | Event::Delete(k) if !keep(&k) => {
                    known(&k).then_some(Event::Delete(k))
                }
                Event::InitApply(k) if !keep(&k) => None,
                other => Some(other),
            };
            std::future::ready(Ok(event))
        })
        .modify(move |k| {
            k.meta_mut().managed_fields = None;
            if let Some(annotations) = k.meta_mut().annotations.as_mut() {
                annotations.remove(LAST_APPLIED);
            }
            trim(k);
        })
        .reflect(writer)
}

/// The feed's watch of `api` ([`reflected`]), as updates of `source`.
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    keep: fn(&K) -> bool,
    (source, backoff): (Source, impl Backoff + 'static),
    what: String,
) -> impl Stream<Item = Update>
where
    K: Watched,
{
    reflected(api, config, writer, keep, |_| {}, backoff).filter_map(move |item| {
        let update = match item {
            Ok(Event::InitDone) => Some(Update::Synced(source)),
            Ok(Event::Init | Event::InitApply(_)) => None,
            Ok(Event::Apply(_) | Event::Delete(_)) => Some(Update::Changed(source)),
            // 410 Gone ("too old resource version", after etcd compacted): the watcher
            // lists again by itself. A relist is not a failure; its InitDone follows.
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                tracing::debug!(what, "watch expired (410 Gone); listing again");
                None
            }
            Err(err) => Some(Update::Failed(source, watch_error(&what, err))),
        };
        std::future::ready(update)
    })
}

/// Asks the API server for its version every [`HEARTBEAT`]; an answer later than
/// [`HEARTBEAT_TIMEOUT`] (or an error) counts as silence.
fn heartbeat(client: Client) -> impl Stream<Item = Update> {
    ticks(HEARTBEAT).then(move |()| {
        let client = client.clone();
        async move {
            let started = tokio::time::Instant::now();
            match tokio::time::timeout(HEARTBEAT_TIMEOUT, client.apiserver_version()).await {
                Ok(Ok(_)) => Update::Answered,
                Ok(Err(e)) => Update::Failed(
                    Source::Heartbeat,
                    Error::kube("ask the API server whether it answers (GET /version)", e),
                ),
                Err(_) => Update::Failed(
                    Source::Heartbeat,
                    Error::Silent {
                        seconds: started.elapsed().as_secs(),
                    },
                ),
            }
        }
    })
}

/// An update each time `side` changes; ends when its sender is gone.
fn side_changes(side: watch::Receiver<ClaimSide>) -> impl Stream<Item = Update> {
    futures::stream::unfold(side, |mut side| async move {
        side.changed().await.ok()?;
        Some((Update::Changed(Source::Side), side))
    })
}

/// A tick every `period`, the first one after `period`.
fn ticks(period: StdDuration) -> impl Stream<Item = ()> {
    futures::stream::unfold(
        tokio::time::interval_at(tokio::time::Instant::now() + period, period),
        |mut interval| async move {
            interval.tick().await;
            Some(((), interval))
        },
    )
}

fn watch_error(what: &str, err: watcher::Error) -> Error {
    let source = match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => kube::Error::Api(status),
        watcher::Error::NoResourceVersion => {
            return Error::Config(format!("watch {what}: the server sent no resourceVersion"));
        }
    };
    Error::kube(format!("watch {what}"), source)
}

/// The stores the feed regroups.
struct Stores {
    vms: Store<VirtualMachine>,
    leases: Store<ClaimLease>,
    policies: Store<DesktopPool>,
}

fn snapshot(
    scope: &Scope,
    status: FeedStatus,
    stores: &Stores,
    side: ClaimSide,
    clock: &ServerClock,
) -> PoolsSnapshot {
    let now = clock.now();
    let vms = stores.vms.state();
    let leases = stores.leases.state();
    let policies = stores.policies.state();
    let pools = group_pools_with(
        vms.iter().map(Arc::as_ref),
        leases.iter().map(Arc::as_ref),
        policies.iter().map(Arc::as_ref),
        now,
        side,
    );
    PoolsSnapshot {
        scope: scope.clone(),
        status,
        pools,
        judged_at: now,
    }
}

/// Runs `feed` (the feed's loop, [`run`]) until it ends, which it does only when the feed's
/// receivers are gone. Should it end otherwise (a panic, or watch streams that ended, neither
/// of which it is built to do), the last snapshot turns `Failing` with
/// [`Error::FeedStopped`]: the view says so instead of "live" over a list nobody updates.
async fn supervise(tx: &watch::Sender<PoolsSnapshot>, feed: impl Future<Output = ()>) {
    let ended = std::panic::AssertUnwindSafe(feed).catch_unwind().await;
    if tx.is_closed() {
        return;
    }
    let why = match ended {
        Ok(()) => "its watches ended".to_owned(),
        Err(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "it panicked".to_owned()),
    };
    tracing::error!(%why, "pool feed stopped");
    let error = Error::FeedStopped { why }.view();
    tx.send_modify(|snap| snap.status = FeedStatus::Failing { error });
}

async fn run(
    client: Client,
    scope: Scope,
    clock: ServerClock,
    side: watch::Receiver<ClaimSide>,
    (vm_store, lease_store): (Store<VirtualMachine>, Store<ClaimLease>),
    (vm_writer, lease_writer): (
        reflector::store::Writer<VirtualMachine>,
        reflector::store::Writer<ClaimLease>,
    ),
    tx: &watch::Sender<PoolsSnapshot>,
) {
    let vms = reflect(
        api::<VirtualMachine>(&client, &scope),
        watcher::Config::default().labels(POOL_LABEL),
        vm_writer,
        |_| true,
        (Source::Vms, retry_backoff()),
        format!("VirtualMachines {}", where_(&scope)),
    );
    // Every Lease, not only labelled ones: a claim is joined by name (crate::lease).
    let mut lease_config = watcher::Config::default();
    if let Some(fields) = crate::lease::fields(&scope) {
        lease_config = lease_config.fields(fields);
    }
    let leases = reflect(
        api::<ClaimLease>(&client, &scope),
        lease_config,
        lease_writer,
        concerns_claims,
        (Source::Leases, retry_backoff()),
        format!("Leases {}", where_(&scope)),
    );
    // Optional: a missing CRD or a refusal leaves the pools unmanaged, never fails the feed
    // (policies.rs); retried on kube's slower schedule, as the CRD comes with a broker install.
    let (policy_store, policy_writer) = reflector::store::<DesktopPool>();
    let policy_updates = reflect(
        api::<DesktopPool>(&client, &scope),
        watcher::Config::default(),
        policy_writer,
        |_| true,
        (Source::Policies, default_backoff()),
        format!("DesktopPools {}", where_(&scope)),
    )
    .map(|update| match update {
        Update::Failed(Source::Policies, error) => {
            policies::log_failure(&error);
            Update::Synced(Source::Policies)
        }
        other => other,
    });
    let stores = Stores {
        vms: vm_store,
        leases: lease_store,
        policies: policy_store,
    };
    let mut updates = pin!(futures::stream::select(
        futures::stream::select(vms, futures::stream::select(leases, policy_updates)),
        futures::stream::select(heartbeat(client.clone()), side_changes(side.clone()))
    ));
    let (mut vms_synced, mut leases_synced, mut policies_synced) = (false, false, false);
    // Until the first live snapshot: when the feed started, for the log.
    let mut started = Some(std::time::Instant::now());
    let mut failure: Option<(Source, Error)> = None;
    let mut expiry: Option<tokio::time::Instant> = None;

    loop {
        let update = match expiry {
            Some(at) => tokio::select! {
                update = updates.next() => update,
                () = tokio::time::sleep_until(at) => Some(Update::Tick),
            },
            None => updates.next().await,
        };
        let Some(mut update) = update else { return };
        // Gather the rest of a burst so that a thousand events cost one regrouping.
        let deadline = tokio::time::Instant::now() + COALESCE;
        // Whether the burst changed anything to show (an answered heartbeat alone does not).
        let mut dirty = false;
        loop {
            dirty |= !matches!(update, Update::Answered);
            let healthy = match update {
                Update::Synced(source) => {
                    match source {
                        Source::Vms => vms_synced = true,
                        Source::Leases => leases_synced = true,
                        Source::Policies => policies_synced = true,
                        Source::Heartbeat | Source::Side => {}
                    }
                    Some(source)
                }
                Update::Changed(source) => Some(source),
                Update::Answered => Some(Source::Heartbeat),
                Update::Tick => None,
                Update::Failed(source, err) => {
                    tracing::warn!(error = %err, "pool feed failing; retrying");
                    failure = Some((source, err));
                    None
                }
            };
            if healthy.is_some() && failure.as_ref().map(|(s, _)| *s) == healthy {
                failure = None;
                dirty = true;
            }
            match tokio::time::timeout_at(deadline, updates.next()).await {
                Ok(Some(next)) => update = next,
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let status = match &failure {
            Some((_, err)) => FeedStatus::Failing { error: err.view() },
            None if vms_synced && leases_synced && policies_synced => FeedStatus::Live,
            None => FeedStatus::Syncing,
        };
        if !dirty || matches!(status, FeedStatus::Syncing) {
            continue;
        }
        let live = matches!(status, FeedStatus::Live);
        let on = *side.borrow();
        let snap = snapshot(&scope, status, &stores, on, &clock);
        if let Some(since) = started.take_if(|_| live) {
            tracing::info!(
                seconds = since.elapsed().as_secs_f64(),
                scope = %where_(&scope),
                vms = stores.vms.state().len(),
                leases = stores.leases.state().len(),
                pools = snap.pools.len(),
                "pools feed live"
            );
        }
        expiry = next_expiry(&snap.pools, snap.judged_at).and_then(|at| {
            let wait = StdDuration::try_from(at.duration_since(snap.judged_at)).ok()?;
            Some(tokio::time::Instant::now() + wait + StdDuration::from_millis(1))
        });
        if tx.send(snap).is_err() {
            return;
        }
    }
}

/// The live view's state of its connection to the cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum FeedStatus {
    /// The first full list has not arrived yet.
    Syncing,
    /// In sync; changes arrive as they happen.
    Live,
    /// The last request failed; the watcher retries with backoff and keeps the last data.
    Failing {
        /// Why, with a fix.
        error: ErrorView,
    },
}

/// Everything the pools view shows at one moment (the CLI's view; the app gets
/// [`PoolsUpdate`]s made from these).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolsSnapshot {
    /// Namespaces covered.
    pub scope: Scope,
    /// Connection state.
    pub status: FeedStatus,
    /// Pools sorted by (namespace, name).
    pub pools: Vec<PoolView>,
    /// API server's time at which the states were judged.
    pub judged_at: Timestamp,
}

/// Names one pool: its namespace and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolKey {
    /// Namespace the pool lives in.
    pub namespace: String,
    /// Pool name.
    pub name: String,
}

/// What changed in the pools view since the previous update of the same feed: the desktop app
/// sends these instead of whole [`PoolsSnapshot`]s, so that one member's change costs one
/// pool's worth of serialization and re-rendering, not 10,000 members'.
///
/// A receiver keeps the pools of the last `full` update of a feed and applies each later
/// update of that feed in order: drop `removed`, replace or insert `changed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolsUpdate {
    /// Which feed this is (a new one per cluster connection); updates of another feed do not apply.
    pub feed: u32,
    /// Namespaces covered.
    pub scope: Scope,
    /// Connection state.
    pub status: FeedStatus,
    /// `true`: `changed` holds every pool and replaces whatever the receiver had.
    pub full: bool,
    /// Pools new or different since the previous update, sorted by (namespace, name).
    pub changed: Vec<PoolView>,
    /// Pools gone since the previous update.
    pub removed: Vec<PoolKey>,
    /// API server's time at which the states were judged.
    pub judged_at: Timestamp,
}

/// Turns the successive snapshots of one feed into [`PoolsUpdate`]s: the first is full, each
/// later one carries only the pools that differ (compared by value).
#[derive(Debug)]
pub struct PoolsDiff {
    feed: u32,
    last: Option<BTreeMap<PoolKey, PoolView>>,
}

impl PoolsDiff {
    /// A diff for feed number `feed`; its first update is full.
    pub fn new(feed: u32) -> Self {
        PoolsDiff { feed, last: None }
    }

    /// The update that takes a receiver from the previous snapshot to `snapshot`, each pool
    /// passed through `judge` first (the link fills what each member offers its identity): a
    /// pool counts as changed when what `judge` made of it differs.
    pub fn update(
        &mut self,
        snapshot: &PoolsSnapshot,
        judge: impl Fn(&mut PoolView),
    ) -> PoolsUpdate {
        let key = |p: &PoolView| PoolKey {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        };
        let next: BTreeMap<PoolKey, PoolView> = snapshot
            .pools
            .iter()
            .map(|p| {
                let mut judged = p.clone();
                judge(&mut judged);
                (key(p), judged)
            })
            .collect();
        let (full, changed, removed) = match self.last.take() {
            // The pools come sorted by (namespace, name), as the map keeps them.
            None => (true, next.values().cloned().collect(), Vec::new()),
            Some(last) => {
                let changed = next
                    .iter()
                    .filter(|(k, p)| last.get(k) != Some(p))
                    .map(|(_, p)| p.clone())
                    .collect();
                let removed = last.into_keys().filter(|k| !next.contains_key(k)).collect();
                (false, changed, removed)
            }
        };
        self.last = Some(next);
        PoolsUpdate {
            feed: self.feed,
            scope: snapshot.scope.clone(),
            status: snapshot.status.clone(),
            full,
            changed,
            removed,
            judged_at: snapshot.judged_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::PoolCounts;

    fn channel() -> (watch::Sender<PoolsSnapshot>, watch::Receiver<PoolsSnapshot>) {
        watch::channel(PoolsSnapshot {
            scope: Scope::All,
            status: FeedStatus::Live,
            pools: Vec::new(),
            judged_at: jiff::Timestamp::UNIX_EPOCH,
        })
    }

    #[tokio::test]
    async fn a_feed_that_panics_says_so_instead_of_staying_live() {
        let (tx, rx) = channel();
        supervise(&tx, async { panic!("adding to a timestamp overflowed") }).await;
        match &rx.borrow().status {
            FeedStatus::Failing { error } => {
                assert_eq!(
                    error.message,
                    "the live view stopped: adding to a timestamp overflowed; the pools shown \
                     are no longer updated"
                );
                assert!(!error.retryable);
            }
            other => panic!("still {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_feed_whose_watches_end_says_so_and_one_nobody_reads_says_nothing() {
        let (tx, rx) = channel();
        supervise(&tx, async {}).await;
        assert!(
            matches!(&rx.borrow().status, FeedStatus::Failing { error } if error.message.contains("its watches ended"))
        );
        let (tx, rx) = channel();
        drop(rx);
        supervise(&tx, async {}).await;
        assert_eq!(tx.borrow().status, FeedStatus::Live);
    }

    fn pool(name: &str, free: u32) -> PoolView {
        PoolView {
            namespace: "vdi".into(),
            name: name.into(),
            members: Vec::new(),
            counts: PoolCounts {
                free,
                claimed: 0,
                total: free,
            },
            stray_leases: Vec::new(),
            managed: false,
            policy: None,
            policy_problem: None,
            state_counts: Default::default(),
            resize_note: None,
            offer: None,
            usage: Vec::new(),
        }
    }

    fn snapshot(pools: Vec<PoolView>) -> PoolsSnapshot {
        PoolsSnapshot {
            scope: Scope::Namespace("vdi".into()),
            status: FeedStatus::Live,
            pools,
            judged_at: Timestamp::UNIX_EPOCH,
        }
    }

    fn key(name: &str) -> PoolKey {
        PoolKey {
            namespace: "vdi".into(),
            name: name.into(),
        }
    }

    #[test]
    fn first_update_is_full_then_only_what_changed() {
        let mut diff = PoolsDiff::new(7);
        let first = diff.update(&snapshot(vec![pool("a", 1), pool("b", 2)]), |_| {});
        assert!(first.full);
        assert_eq!(first.feed, 7);
        assert_eq!(first.changed, vec![pool("a", 1), pool("b", 2)]);

        let same = diff.update(&snapshot(vec![pool("a", 1), pool("b", 2)]), |_| {});
        assert!(!same.full);
        assert!(same.changed.is_empty() && same.removed.is_empty());

        let one = diff.update(
            &snapshot(vec![pool("a", 0), pool("b", 2), pool("c", 3)]),
            |_| {},
        );
        assert_eq!(one.changed, vec![pool("a", 0), pool("c", 3)]);
        assert!(one.removed.is_empty());

        let gone = diff.update(&snapshot(vec![pool("c", 3)]), |_| {});
        assert!(gone.changed.is_empty());
        assert_eq!(gone.removed, vec![key("a"), key("b")]);
    }

    #[test]
    fn a_status_change_alone_is_sent() {
        let mut diff = PoolsDiff::new(1);
        diff.update(&snapshot(vec![pool("a", 1)]), |_| {});
        let mut failing = snapshot(vec![pool("a", 1)]);
        failing.status = FeedStatus::Syncing;
        let update = diff.update(&failing, |_| {});
        assert_eq!(update.status, FeedStatus::Syncing);
        assert!(update.changed.is_empty());
    }

    #[test]
    fn what_the_judge_makes_of_a_pool_counts_as_a_change() {
        let mut diff = PoolsDiff::new(1);
        diff.update(&snapshot(vec![pool("a", 1)]), |_| {});
        // The same pools, judged differently (the identity's offers, the broker's side).
        let judged = diff.update(&snapshot(vec![pool("a", 1)]), |p| p.managed = true);
        assert_eq!(judged.changed.len(), 1);
        assert!(judged.changed[0].managed);
        let again = diff.update(&snapshot(vec![pool("a", 1)]), |p| p.managed = true);
        assert!(again.changed.is_empty());
    }
}
