//! A live link to a cluster: one call ([`establish`]) connects to a kubeconfig context, asks
//! who acts and whether the guard is installed (at once), and starts the live pools feed — what
//! a front end does before it can show a cluster. The desktop app's `connect_cluster` command is
//! a thin adapter over it.
//!
//! Layering: a feature above [`crate::cluster`], [`crate::identity`], [`crate::guard`] and
//! [`crate::watch`]; none of them imports it.

use crate::clock::ServerClock;
use crate::cluster::{Connection, KubeconfigSource};
use crate::guard::{self, GuardStatus};
use crate::identity::Actor;
use crate::scope::Scope;
use crate::watch::PoolFeed;
use crate::{Error, Result};

/// A connection made, who acts, the guard's state and the live pools feed started.
/// Dropping it stops the feed.
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
    /// The live pools feed for the scope asked for.
    pub feed: PoolFeed,
}

/// Connects to `context` (`None`: the current context) and starts the live pools feed for
/// `scope`, asking who acts and whether the guard is installed at the same time. Identity and
/// guard failures do not fail it (see [`Link::actor`], [`Link::guard`]): the feed reports
/// reachability and RBAC problems itself.
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
    let (actor, guard) = tokio::join!(Actor::connect(conn.client.clone()), async {
        guard::status(&conn.client).await.ok()
    });
    let clock = match &actor {
        Ok(actor) => *actor.clock(),
        Err(_) => ServerClock::measure(&conn.client)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "API server clock unknown; judging with the local clock");
                ServerClock::default()
            }),
    };
    let feed = PoolFeed::spawn(conn.client.clone(), scope.clone(), clock);
    Ok(Link {
        conn,
        actor,
        clock,
        guard,
        feed,
    })
}
