//! The leader's reconciler: reflectors over the pool member VMs, the claim Leases, the
//! broker's grants (Roles and RoleBindings), the DesktopPools and the VMIs (metadata: which
//! VMI runs a member) in every namespace, and one
//! work queue of members keyed by (namespace, member), which [`crate::reconcile::reconcile`]
//! works off, and of managed pools keyed by (namespace, pool), which
//! [`crate::pool::reconcile`] works off.
//!
//! Level-based: any change to one of a member's objects queues the member and its pool (the
//! VM's pool label, else the DesktopPool whose `<pool>-<index>` names the member); a change to
//! a DesktopPool queues the pool; a reconcile may ask
//! to be run again at a time (an active Lease's expiry plus the reclaim margin, a start to
//! retry); and every [`PASS_INTERVAL`] every known member and pool is queued again (a full pass), after
//! which the leader writes `corral.dev/broker-last-reconcile` on its Lease. Nothing runs before
//! all six watches have listed, so no member is judged on half the cluster. One member or
//! pool is never reconciled twice at once; up to [`CONCURRENCY`] are.
//!
//! Cheap at scale: the stores keep only what the rules read. VMs lose their template, the
//! rest of their spec and status, `managedFields` and kubectl's last-applied annotation (a
//! start or stop reads the VM whole); Leases other than claim Leases are never stored.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::pin::pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use tokio::task::JoinSet;
use tokio::time::Instant;
use vdi_core::lease::ClaimLease;
use vdi_core::names::{
    BROKER_LAST_RECONCILE_ANNOTATION, BROKER_NAME, BROKER_NAMESPACE, GRANT_PREFIX,
    MANAGED_BY_LABEL, MEMBER_LABEL, POOL_LABEL, member_of_lease,
};
use vdi_core::policy::DesktopPool;
use vdi_core::resources::{VirtualMachine, VirtualMachineInstance};

use crate::context::{Context, Key, PoolKey, Stores};
use crate::enforcement::{self, Enforcement};
use crate::reconcile::reconcile;
use crate::serve::{Health, Telemetry};
use std::sync::Arc;
use vdi_core::clock::ServerClock;
use vdi_core::policy::plan::index_of;

/// How many members are reconciled at once.
pub const CONCURRENCY: usize = 16;
/// How often every member is queued again (and the last-reconcile annotation written after).
pub const PASS_INTERVAL: Duration = Duration::from_secs(15);
/// How soon a member whose reconcile failed is tried again.
const ERROR_RETRY: Duration = Duration::from_secs(5);
/// The longest a member waits in the queue for its own time (a far expiry is looked at then).
const LONGEST_WAIT: Duration = Duration::from_secs(24 * 3600);

/// What the work queue holds: a member, or a managed pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Work {
    /// A member's reconcile ([`reconcile`]).
    Member(Key),
    /// A managed pool's reconcile ([`crate::pool::reconcile`]).
    Pool(PoolKey),
}

/// Watches `api` into a store as [`vdi_core::watch::reflected`] does (the objects `keep`
/// accepts, each trimmed with `trim`); yields the work key of every object that changed.
/// Each event counts as an answer of the API server, each error as a failing watch, for the
/// replica's readiness (`health`).
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    keep: fn(&K) -> bool,
    trim: fn(&mut K),
    key: fn(&K) -> Option<Work>,
    what: &'static str,
    health: Arc<Health>,
) -> (Store<K>, impl Stream<Item = Work> + Send)
where
    K: vdi_core::watch::Watched,
{
    let (store, writer) = reflector::store();
    let backoff = vdi_core::watch::default_backoff();
    let stream = vdi_core::watch::reflected(api, config, writer, keep, trim, backoff).filter_map(
        move |event| {
            std::future::ready(match event {
                Ok(event) => {
                    health.watch_ok(what);
                    match event {
                        Event::Apply(k) | Event::Delete(k) | Event::InitApply(k) => key(&k),
                        Event::Init | Event::InitDone => None,
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watch of {what} failed; retrying");
                    health.watch_failed(what, &e.to_string());
                    None
                }
            })
        },
    );
    (store, stream)
}

/// A claim Lease's member key (never the broker's own Lease).
fn lease_key(lease: &ClaimLease) -> Option<Key> {
    Some(Key {
        namespace: lease.namespace()?,
        member: member_of_lease(&lease.name_any())?.to_owned(),
    })
}

/// Whether a Lease is a claim Lease (named `corral-vdi-<member>`, outside the broker's own
/// namespace).
fn is_claim_lease(lease: &ClaimLease) -> bool {
    lease.metadata.namespace.as_deref() != Some(BROKER_NAMESPACE) && lease_key(lease).is_some()
}

/// A VM keeps only what the rules read: metadata, run strategy, printableStatus.
fn trim_vm(vm: &mut VirtualMachine) {
    vm.spec.template = None;
    vm.spec.other.clear();
    if let Some(status) = vm.status.as_mut() {
        status.other.clear();
    }
}

/// A grant's member key: its `corral.dev/vdi-member` label.
fn grant_key<K: Resource>(grant: &K) -> Option<Key> {
    Some(Key {
        namespace: grant.meta().namespace.clone()?,
        member: grant.meta().labels.as_ref()?.get(MEMBER_LABEL)?.clone(),
    })
}

/// Whether an object labelled as the broker's is one of its grants (`corral-vdi-claim-…`, with
/// a member label): nothing else it may find is ever deleted as an orphan.
fn is_grant<K: Resource>(grant: &K) -> bool {
    grant
        .meta()
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with(GRANT_PREFIX))
        && grant_key(grant).is_some()
}

fn vm_key(vm: &VirtualMachine) -> Option<Key> {
    Some(Key {
        namespace: vm.namespace()?,
        member: vm.name_any(),
    })
}

fn pool_key(pool: &DesktopPool) -> Option<PoolKey> {
    Some(PoolKey {
        namespace: pool.namespace()?,
        pool: pool.name_any(),
    })
}

/// The managed pool `key`'s member belongs to: its VM's pool label, else (a member without a
/// VM) the DesktopPool in its namespace whose `<pool>-<index>` is its name.
fn pool_of(stores: &Stores, key: &Key) -> Option<PoolKey> {
    let vm = stores
        .vms
        .get(&reflector::ObjectRef::new(&key.member).within(&key.namespace));
    let pool = match vm {
        Some(vm) => vm.labels().get(POOL_LABEL)?.clone(),
        None => stores
            .pools
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(key.namespace.as_str()))
            .map(|p| p.name_any())
            .find(|p| index_of(p, &key.member).is_some())?,
    };
    Some(PoolKey {
        namespace: key.namespace.clone(),
        pool,
    })
}

/// Queues `work` now; a member's pool with it.
fn schedule(queue: &mut Queue, stores: &Stores, work: Work, when: Instant) {
    if let Work::Member(key) = &work
        && let Some(pool) = pool_of(stores, key)
    {
        queue.schedule(Work::Pool(pool), when);
    }
    queue.schedule(work, when);
}

/// The work queue: each member at most once, at its earliest asked time.
#[derive(Default)]
struct Queue {
    due: BTreeSet<(Instant, Work)>,
    at: HashMap<Work, Instant>,
}

impl Queue {
    /// Queues `key` for `when`, unless it is queued for earlier already.
    fn schedule(&mut self, key: Work, when: Instant) {
        if let Some(&queued) = self.at.get(&key) {
            if queued <= when {
                return;
            }
            self.due.remove(&(queued, key.clone()));
        }
        self.at.insert(key.clone(), when);
        self.due.insert((when, key));
    }

    /// The first member due by `now`, with when it was due.
    fn pop_due(&mut self, now: Instant) -> Option<(Instant, Work)> {
        let (when, _) = self.due.first()?;
        if *when > now {
            return None;
        }
        let (when, key) = self.due.pop_first()?;
        self.at.remove(&key);
        Some((when, key))
    }

    /// How many members and pools wait.
    fn len(&self) -> usize {
        self.due.len()
    }

    /// When the next member is due.
    fn next(&self) -> Option<Instant> {
        self.due.first().map(|(when, _)| *when)
    }
}

/// Starts the watches and runs the reconciler on them until aborted (leadership lost).
pub async fn lead(
    client: Client,
    streams: Client,
    identity: String,
    clock: ServerClock,
    margin: jiff::SignedDuration,
    telemetry: Telemetry,
) {
    let health = &telemetry.health;
    let (vms, vm_keys) = reflect(
        Api::<VirtualMachine>::all(client.clone()),
        watcher::Config::default().labels(POOL_LABEL),
        |_| true,
        trim_vm,
        |vm| vm_key(vm).map(Work::Member),
        "pool member VirtualMachines",
        health.clone(),
    );
    let (leases, lease_keys) = reflect(
        Api::<ClaimLease>::all(client.clone()),
        // kubelet's node heartbeats (one Lease per node, renewed every 10 s) are never claims.
        watcher::Config::default().fields("metadata.namespace!=kube-node-lease"),
        is_claim_lease,
        |_| {},
        |l| lease_key(l).map(Work::Member),
        "claim Leases",
        health.clone(),
    );
    let managed = format!("{MANAGED_BY_LABEL}={BROKER_NAME}");
    let (roles, role_keys) = reflect(
        Api::<Role>::all(client.clone()),
        watcher::Config::default().labels(&managed),
        is_grant,
        |_| {},
        |r| grant_key(r).map(Work::Member),
        "grant Roles",
        health.clone(),
    );
    let (bindings, binding_keys) = reflect(
        Api::<RoleBinding>::all(client.clone()),
        watcher::Config::default().labels(&managed),
        is_grant,
        |_| {},
        |b| grant_key(b).map(Work::Member),
        "grant RoleBindings",
        health.clone(),
    );
    let (pools, pool_keys) = reflect(
        Api::<DesktopPool>::all(client.clone()),
        watcher::Config::default(),
        |_| true,
        |_| {},
        |p| pool_key(p).map(Work::Pool),
        "DesktopPools",
        health.clone(),
    );
    // A member's VMI (named like it): which session runs now, by uid. Trimmed to metadata.
    let (vmis, vmi_keys) = reflect(
        Api::<VirtualMachineInstance>::all(client.clone()),
        watcher::Config::default(),
        |_| true,
        |vmi| vmi.spec.other.clear(),
        |vmi| {
            Some(Work::Member(Key {
                namespace: vmi.namespace()?,
                member: vmi.name_any(),
            }))
        },
        "VirtualMachineInstances",
        health.clone(),
    );
    let stores = Stores {
        vms,
        leases,
        roles,
        bindings,
        pools,
        vmis,
    };
    let enforcement = Enforcement::default();
    enforcement::refresh(&client, &enforcement).await;
    let ctx = Arc::new(Context {
        client: client.clone(),
        streams,
        clock,
        margin,
        identity,
        stores: stores.clone(),
        idle: Default::default(),
        enforcement,
        telemetry: telemetry.clone(),
        reclaimed: Default::default(),
        usage: Default::default(),
    });
    let mut triggers = pin!(futures::stream::select(
        futures::stream::select(
            futures::stream::select(vm_keys, lease_keys),
            futures::stream::select(role_keys, binding_keys),
        ),
        futures::stream::select(pool_keys, vmi_keys),
    ));
    let ready = async {
        let _ = futures::join!(
            stores.vms.wait_until_ready(),
            stores.leases.wait_until_ready(),
            stores.roles.wait_until_ready(),
            stores.bindings.wait_until_ready(),
            stores.pools.wait_until_ready(),
            stores.vmis.wait_until_ready(),
        );
    };
    let mut ready = pin!(ready);
    let mut listed = false;
    let mut queue = Queue::default();
    let mut running: HashSet<Work> = HashSet::new();
    let mut again: HashSet<Work> = HashSet::new();
    let mut tasks: JoinSet<(Work, anyhow::Result<Option<jiff::Timestamp>>)> = JoinSet::new();
    let mut pass: Option<HashSet<Work>> = None;
    let mut passes = tokio::time::interval(PASS_INTERVAL);
    passes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut checks = tokio::time::interval(enforcement::CHECK_INTERVAL);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if listed {
            let now = Instant::now();
            while running.len() < CONCURRENCY {
                let Some((due, key)) = queue.pop_due(now) else {
                    break;
                };
                if running.contains(&key) {
                    again.insert(key);
                    continue;
                }
                let metrics = &telemetry.metrics;
                metrics
                    .queue_wait
                    .observe(now.duration_since(due).as_secs_f64());
                running.insert(key.clone());
                let ctx = ctx.clone();
                tasks.spawn(async move {
                    let started = Instant::now();
                    let result = match &key {
                        Work::Member(member) => reconcile(&ctx, member).await,
                        Work::Pool(pool) => crate::pool::reconcile(&ctx, pool).await,
                    };
                    ctx.telemetry.metrics.reconciled(started.elapsed(), &result);
                    (key, result)
                });
            }
        }
        telemetry
            .metrics
            .depth
            .set(i64::try_from(queue.len()).unwrap_or(i64::MAX));
        let next = queue
            .next()
            .filter(|_| listed && running.len() < CONCURRENCY);
        tokio::select! {
            key = triggers.next() => match key {
                Some(key) => schedule(&mut queue, &stores, key, Instant::now()),
                None => {
                    tracing::error!("the watches ended");
                    health.ended("the watches ended");
                    return;
                }
            },
            () = &mut ready, if !listed => {
                listed = true;
                health.listed();
                tracing::info!(
                    vms = stores.vms.state().len(),
                    leases = stores.leases.state().len(),
                    grants = stores.roles.state().len(),
                    "watches listed: reconciling every member"
                );
                pass = start_pass(&stores, &mut queue, &client, &ctx).await;
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                let Ok((key, result)) = done else { continue };
                running.remove(&key);
                match result {
                    Ok(Some(at)) => {
                        let wait = at.duration_since(ctx.clock.now()).max(jiff::SignedDuration::ZERO);
                        let wait = Duration::try_from(wait).unwrap_or(LONGEST_WAIT).min(LONGEST_WAIT);
                        queue.schedule(key.clone(), Instant::now() + wait);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let (namespace, name) = match &key {
                            Work::Member(k) => (&k.namespace, &k.member),
                            Work::Pool(k) => (&k.namespace, &k.pool),
                        };
                        tracing::warn!(%namespace, %name, "{e:#}; retrying in {}s", ERROR_RETRY.as_secs());
                        queue.schedule(key.clone(), Instant::now() + ERROR_RETRY);
                    }
                }
                if again.remove(&key) {
                    queue.schedule(key.clone(), Instant::now());
                }
                if let Some(remaining) = pass.as_mut() {
                    remaining.remove(&key);
                    if remaining.is_empty() {
                        pass = None;
                        last_reconcile(&client, &ctx.clock).await;
                    }
                }
            }
            () = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {}
            _ = checks.tick() => {
                // Whether claims may be granted changed: every member is looked at again.
                if enforcement::refresh(&client, &ctx.enforcement).await && listed {
                    for key in member_keys(&stores) {
                        queue.schedule(key, Instant::now());
                    }
                }
            }
            _ = passes.tick() => {
                if listed && pass.is_none() {
                    pass = start_pass(&stores, &mut queue, &client, &ctx).await;
                }
            }
        }
    }
}

/// Queues every known member and managed pool now; returns the members (the pass is complete
/// when each has run), or
/// `None` when there is none (the pass is complete at once: its annotation is written).
async fn start_pass(
    stores: &Stores,
    queue: &mut Queue,
    client: &Client,
    ctx: &Context,
) -> Option<HashSet<Work>> {
    let clock = &ctx.clock;
    census(stores, ctx);
    let now = Instant::now();
    let keys = member_keys(stores);
    // Pools too, but the pass does not wait for them: a pool's grow may take minutes.
    for pool in stores.pools.state().iter().filter_map(|p| pool_key(p)) {
        queue.schedule(Work::Pool(pool), now);
    }
    if keys.is_empty() {
        last_reconcile(client, clock).await;
        return None;
    }
    for key in &keys {
        queue.schedule(key.clone(), now);
    }
    Some(keys)
}

/// `corral_vdi_pool_members` from the stores, counted as the views count them.
fn census(stores: &Stores, ctx: &Context) {
    let (vms, leases, pools) = (
        stores.vms.state(),
        stores.leases.state(),
        stores.pools.state(),
    );
    let views = vdi_core::state::group_pools_with(
        vms.iter().map(AsRef::as_ref),
        leases.iter().map(AsRef::as_ref),
        pools.iter().map(AsRef::as_ref),
        ctx.clock.now(),
        vdi_core::state::ClaimSide::Broker,
    );
    ctx.telemetry.metrics.census(&views);
}

/// Every member the stores know of: by its VM, its claim Lease or its grant.
fn member_keys(stores: &Stores) -> HashSet<Work> {
    stores
        .vms
        .state()
        .iter()
        .filter_map(|vm| vm_key(vm))
        .chain(stores.leases.state().iter().filter_map(|l| lease_key(l)))
        .chain(
            stores
                .roles
                .state()
                .iter()
                .filter_map(|r| grant_key(r.as_ref())),
        )
        .chain(
            stores
                .bindings
                .state()
                .iter()
                .filter_map(|b| grant_key(b.as_ref())),
        )
        .map(Work::Member)
        .collect()
}

/// Writes `corral.dev/broker-last-reconcile` = now (RFC 3339) on the leader Lease.
async fn last_reconcile(client: &Client, clock: &ServerClock) {
    let now = vdi_core::clock::annotation_time(clock.now());
    crate::election::annotate_leader(client, BROKER_LAST_RECONCILE_ANNOTATION, Some(&now)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(member: &str) -> Key {
        Key {
            namespace: "ns".into(),
            member: member.into(),
        }
    }

    fn work(member: &str) -> Work {
        Work::Member(key(member))
    }

    #[test]
    fn the_queue_holds_each_member_once_at_its_earliest_time() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut queue = Queue::default();
        queue.schedule(work("a"), later);
        queue.schedule(work("b"), now);
        queue.schedule(work("a"), now + Duration::from_secs(1));
        queue.schedule(work("a"), later);
        assert_eq!(queue.next(), Some(now));
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.pop_due(now), Some((now, work("b"))));
        assert_eq!(queue.pop_due(now), None, "a is due in 1 s, not now");
        assert_eq!(
            queue.pop_due(later),
            Some((now + Duration::from_secs(1), work("a")))
        );
        assert_eq!((queue.pop_due(later), queue.next()), (None, None));
    }

    #[test]
    fn only_claim_leases_and_grants_are_members_keys() {
        let mut lease = ClaimLease::default();
        lease.metadata.namespace = Some("ns".into());
        lease.metadata.name = Some("corral-vdi-dev-1".into());
        assert_eq!(lease_key(&lease), Some(key("dev-1")));
        assert!(is_claim_lease(&lease));
        lease.metadata.namespace = Some(BROKER_NAMESPACE.into());
        lease.metadata.name = Some(BROKER_NAME.into());
        assert!(!is_claim_lease(&lease), "the broker's own Lease");
        let mut role = Role::default();
        role.metadata.namespace = Some("ns".into());
        role.metadata.name = Some("corral-vdi:broker-status".into());
        role.metadata.labels = Some([(MEMBER_LABEL.to_owned(), "dev-1".to_owned())].into());
        assert!(
            !is_grant(&role),
            "not named as a grant: never deleted as an orphan"
        );
        role.metadata.name = Some("corral-vdi-claim-dev-1".into());
        assert!(is_grant(&role));
        assert_eq!(grant_key(&role), Some(key("dev-1")));
    }
}
