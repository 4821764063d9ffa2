//! A live link to a cluster: one call ([`establish`]) connects to a kubeconfig context, asks
//! who acts, whether the guard is installed and whether a broker runs (at once), and starts the
//! live pools feed — what a front end does before it can show a cluster. The desktop app's
//! `connect_cluster` command is a thin adapter over it.
//!
//! The broker's status stays live while the link lives: a watch on its one leader Lease (the
//! field selector `metadata.name=corral-vdi-broker`, all that RBAC lets a signed-in user watch),
//! judged again every [`BROKER_RECHECK`] as well, since a leader that stops renewing changes
//! nothing on the Lease. The pools feed judges the members by it (with a broker, an active
//! claim reads "granting" until the broker has finished it).
//!
//! While it lives, [`Link::forward`] sends its live state to a front end (the app's window):
//! the pools as diffs, each member judged for the link's identity ([`crate::claim::offers`]),
//! the credentials' state and the broker's badge.
//!
//! Layering: a feature above [`crate::cluster`], [`crate::identity`], [`crate::guard`],
//! [`crate::broker`], [`crate::claim`] and [`crate::watch`]; none of them imports it.

use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::broker::{self, BrokerStatus};
use crate::claim::cluster_half::{BrokerBadge, broker_badge, side};
use crate::claim::offers::{self, Viewer};
use crate::clock::ServerClock;
use crate::cluster::{Connection, KubeconfigSource};
use crate::credentials::CredentialState;
use crate::guard::{self, GuardStatus};
use crate::identity::Actor;
use crate::lease::ClaimLease;
use crate::names::{BROKER_NAME, BROKER_NAMESPACE};
use crate::scope::Scope;
use crate::state::ClaimSide;
use crate::watch::{PoolFeed, PoolsDiff, PoolsUpdate};
use crate::{Error, Result};

/// How often a live link judges the broker's Lease again without an event: a leader that
/// stopped renewing shows as "no leader" this long after its Lease ran out, at most.
pub const BROKER_RECHECK: Duration = Duration::from_secs(5);

/// A connection made, who acts, the guard's and the broker's state and the live pools feed
/// started. Dropping it stops the feed and the broker's watch.
pub struct Link {
    /// The clients for the context asked for.
    pub conn: Connection,
    /// Who acts, from the cluster (SelfSubjectReview), or why the cluster could not say: actions
    /// are then refused, while the feed still reports reachability and RBAC problems itself.
    pub actor: std::result::Result<Actor, Error>,
    /// The API server's clock: the actor's, else measured on its own, else this machine's
    /// (logged as a warning).
    pub clock: ServerClock,
    /// Whether the cluster has Corral VDI's guard; `None` when it could not be read.
    pub guard: Option<GuardStatus>,
    /// Whether a broker runs, as read when the link was made; `None` when it could not be
    /// read (the cluster did not answer).
    pub broker: Option<BrokerStatus>,
    /// The broker's badge (and notice) as it is now: updated while the link lives when the
    /// leader, the replicas or the verdict change.
    pub broker_live: watch::Receiver<BrokerBadge>,
    /// The live pools feed for the scope asked for.
    pub feed: PoolFeed,
    /// Who does the cluster's half of claims now, as the feed judges by it.
    side: watch::Receiver<ClaimSide>,
    /// Keeps [`Link::broker_live`] current; stopped with the link.
    broker_watch: Option<JoinHandle<()>>,
}

/// Where a link's live state goes ([`Link::forward`]): one callback each, called from the
/// link's own tasks, in order.
pub struct Sinks {
    /// The pools: the whole list first, then the pools that changed
    /// ([`crate::watch::PoolsDiff`]), every member's [`crate::state::MemberView::offers`]
    /// judged for the link's identity (none when it is unknown).
    pub pools: Box<dyn Fn(PoolsUpdate) + Send + Sync>,
    /// Where the credentials stand, now and on every change.
    pub credentials: Box<dyn Fn(CredentialState) + Send + Sync>,
    /// The broker's badge, on every change after the link was made (the badge as it was then
    /// is [`Link::broker_live`]'s to read).
    pub broker: Box<dyn Fn(BrokerBadge) + Send + Sync>,
}

/// The tasks of [`Link::forward`]; dropping it stops them.
pub struct Forwarding(Vec<JoinHandle<()>>);

impl Drop for Forwarding {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Link {
    /// Sends the link's live state to `sinks` until the returned [`Forwarding`] (or the link)
    /// is dropped; `feed` numbers the pools updates ([`PoolsUpdate::feed`]).
    pub fn forward(&self, feed: u32, sinks: Sinks) -> Forwarding {
        let Sinks {
            pools,
            credentials,
            broker,
        } = sinks;
        let identity = self
            .actor
            .as_ref()
            .ok()
            .map(|a| (a.username().to_owned(), a.identity().is_admin()));
        let guarded = self.guard.as_ref().is_some_and(GuardStatus::enforced);
        let side = self.side.clone();
        let mut rx = self.feed.subscribe();
        let mut diff = PoolsDiff::new(feed);
        let pools = tokio::spawn(async move {
            loop {
                let viewer = identity.as_ref().map(|(username, admin)| Viewer {
                    username: username.clone(),
                    admin: *admin,
                    guarded,
                    side: *side.borrow(),
                });
                let update = diff.update(&rx.borrow_and_update(), |pool| {
                    if let Some(viewer) = &viewer {
                        offers::fill(pool, viewer);
                    }
                });
                tracing::debug!(
                    full = update.full,
                    changed = update.changed.len(),
                    "pools update sent"
                );
                pools(update);
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        let mut credential_rx = self.conn.credentials.clone();
        let credentials = tokio::spawn(async move {
            loop {
                credentials(credential_rx.borrow_and_update().clone());
                if credential_rx.changed().await.is_err() {
                    return;
                }
            }
        });
        let mut broker_rx = self.broker_live.clone();
        let broker = tokio::spawn(async move {
            while broker_rx.changed().await.is_ok() {
                broker(broker_rx.borrow_and_update().clone());
            }
        });
        Forwarding(vec![pools, credentials, broker])
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(task) = &self.broker_watch {
            task.abort();
        }
    }
}

/// Connects to `context` (`None`: the current context) and starts the live pools feed for
/// `scope`, asking who acts, whether the guard is installed and whether a broker runs at the
/// same time. Identity, guard and broker failures do not fail it (see [`Link::actor`],
/// [`Link::guard`], [`Link::broker`]): the feed reports reachability and RBAC problems itself.
/// The broker's Lease is watched only when it could be read.
///
/// Errors: [`Error::Invalid`] for a bad namespace name in `scope`; [`Error::Config`] when the
/// kubeconfig cannot be read, names no such context or has unusable credentials.
pub async fn establish(
    source: &KubeconfigSource,
    context: Option<&str>,
    scope: &Scope,
) -> Result<Link> {
    crate::validate::scope(scope)?;
    let conn = source.connect(context).await?;
    let (actor, guard, broker) = tokio::join!(
        Actor::connect(conn.client.clone()),
        async { guard::status(&conn.client).await.ok() },
        async { broker::status(&conn.client).await.ok() }
    );
    let clock = match &actor {
        Ok(actor) => *actor.clock(),
        Err(_) => ServerClock::measure(&conn.client)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "API server clock unknown; judging with the local clock");
                ServerClock::default()
            }),
    };
    let (badge_tx, broker_live) = watch::channel(broker_badge(broker.clone()));
    let (side_tx, side_rx) = watch::channel(side(broker.as_ref()));
    // A Lease this identity may read (present or not) is worth watching; a refusal is not.
    let readable = broker
        .as_ref()
        .is_some_and(|s| s.state != broker::BrokerState::Unknown);
    let broker_watch = readable
        .then(|| tokio::spawn(follow_broker(conn.client.clone(), clock, badge_tx, side_tx)));
    let feed = PoolFeed::spawn_on(conn.client.clone(), scope.clone(), clock, side_rx.clone());
    Ok(Link {
        conn,
        actor,
        clock,
        guard,
        broker,
        broker_live,
        feed,
        side: side_rx,
        broker_watch,
    })
}

/// Follows the broker's leader Lease (a watch on it alone) and judges it again on every event
/// and every [`BROKER_RECHECK`] ([`broker::status_of`], by `clock`): sends a new badge when the
/// verdict, the leader or the replicas change, and the claim side when it changes. Ends when
/// the link's receivers are gone, or when the Lease may no longer be read (403).
async fn follow_broker(
    client: Client,
    clock: ServerClock,
    badge: watch::Sender<BrokerBadge>,
    claim_side: watch::Sender<ClaimSide>,
) {
    let api: Api<ClaimLease> = Api::namespaced(client, BROKER_NAMESPACE);
    let config = watcher::Config::default().fields(&format!("metadata.name={BROKER_NAME}"));
    let mut events = pin!(watcher(api, config).backoff(crate::watch::default_backoff()));
    let mut recheck = tokio::time::interval(BROKER_RECHECK);
    // The Lease as last listed or watched; `listing` gathers a (re)list until it is done.
    let (mut lease, mut listing, mut known) = (None, None, false);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Init)) => listing = Some(None),
                Some(Ok(Event::InitApply(l))) => listing = Some(Some(l)),
                Some(Ok(Event::InitDone)) => {
                    lease = listing.take().flatten();
                    known = true;
                }
                Some(Ok(Event::Apply(l))) => lease = Some(l),
                Some(Ok(Event::Delete(_))) => lease = None,
                Some(Err(watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e)))
                    if crate::error::is_status(&e, 403) => return,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "watching the broker's Lease; retrying");
                    continue;
                }
                None => return,
            },
            _ = recheck.tick() => {}
        }
        if !known {
            continue;
        }
        let status = broker::status_of(lease.as_ref(), clock.now());
        claim_side.send_if_modified(|current| {
            let now = side(Some(&status));
            std::mem::replace(current, now) != now
        });
        let next = broker_badge(Some(status));
        let sent = badge.send_if_modified(|current| {
            let changed = !same_broker(current.status.as_ref(), next.status.as_ref());
            if changed {
                *current = next;
            }
            changed
        });
        if sent {
            tracing::info!(badge = %badge.borrow().text, "broker status changed");
        }
        if badge.is_closed() && claim_side.is_closed() {
            return;
        }
    }
}

/// Whether two readings of the broker say the same for a badge: the verdict, the leader and
/// the replicas' identities (heartbeat times alone change every few seconds).
fn same_broker(a: Option<&BrokerStatus>, b: Option<&BrokerStatus>) -> bool {
    let key = |s: Option<&BrokerStatus>| {
        s.map(|s| {
            (
                s.state,
                s.leader.clone(),
                s.replicas
                    .iter()
                    .map(|r| (r.identity.clone(), r.leader))
                    .collect::<Vec<_>>(),
            )
        })
    };
    key(a) == key(b)
}
