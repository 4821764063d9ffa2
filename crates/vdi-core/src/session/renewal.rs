//! Session-bound renewal (SPEC "Pool policy and lifecycle": clients renew while the holder has
//! a session open): while the [`Supervisor`] keeps a session open on a member — the app's
//! console, a viewer, RDP or SSH through a forward, a plain forward, USB — the actor's claim on
//! it is renewed every third of its Lease's duration ([`crate::claim::renew::renew`]); when
//! the member's last session ends, renewal stops, and the claim expires `disconnectGrace`
//! later unless a session opens again.
//!
//! Only the actor's own claims in managed pools are renewed (a pool with a readable
//! `DesktopPool` policy: elsewhere a Lease keeps the duration it was claimed with, as before);
//! a session on someone else's desktop renews nothing. A renewal that fails is logged and tried
//! again within [`RETRY`]; a claim found lost (someone else holds it, or its Lease is gone or
//! expired) stops the renewal, which is logged and told to the member's sessions
//! ([`super::SessionView::claim_lost`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::ResourceExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::registry::{SessionState, Supervisor, WeakSupervisor};
use crate::claim::renew::{own_claim, pool_policy, renew};
use crate::error::ErrorKind;
use crate::identity::Actor;
use crate::names::POOL_LABEL;

/// The longest wait before a failed renewal (or policy read) is tried again: 5 s.
pub const RETRY: Duration = Duration::from_secs(5);

/// The shortest time between two renewals: 1 s (a Lease of 3 s or less would otherwise be
/// renewed in a busy loop; a managed pool's Leases last at least 10 s).
const MIN_PERIOD: Duration = Duration::from_secs(1);

/// Renews claims while their sessions are open ([`Supervisor::renew_claims`]); dropping it
/// stops every renewal.
pub struct ClaimRenewal {
    task: JoinHandle<()>,
}

impl Drop for ClaimRenewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One member's renewal task, aborted when dropped.
struct Renewing(JoinHandle<()>);

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Supervisor {
    /// Starts renewing `actor`'s claims on the members this supervisor has sessions open on,
    /// as they open and close (see the module doc), until the returned handle is dropped or
    /// the supervisor is gone. Needs a Tokio runtime.
    pub fn renew_claims(&self, actor: Actor) -> ClaimRenewal {
        let task = tokio::spawn(follow(self.downgrade(), self.subscribe(), actor));
        ClaimRenewal { task }
    }
}

/// Follows the supervisor's sessions: a renewal per member with an open session.
async fn follow(supervisor: WeakSupervisor, mut changes: watch::Receiver<u64>, actor: Actor) {
    let mut renewing: BTreeMap<(String, String), Renewing> = BTreeMap::new();
    loop {
        let Some(open) = supervisor.with(|s| {
            s.list()
                .into_iter()
                .filter(|v| v.state == SessionState::Active)
                .map(|v| (v.namespace, v.member))
                .collect::<BTreeSet<_>>()
        }) else {
            return;
        };
        renewing.retain(|(namespace, member), _| {
            let keep = open.contains(&(namespace.clone(), member.clone()));
            if !keep {
                tracing::info!(%namespace, %member, "the member's last session ended: its claim is no longer renewed");
            }
            keep
        });
        for key in open {
            renewing.entry(key.clone()).or_insert_with(|| {
                Renewing(tokio::spawn(keep_renewing(
                    supervisor.clone(),
                    actor.clone(),
                    key,
                )))
            });
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Renews `actor`'s claim on `member` while it is theirs, in a managed pool.
async fn keep_renewing(
    supervisor: WeakSupervisor,
    actor: Actor,
    (namespace, member): (String, String),
) {
    let (ns, member) = (namespace.as_str(), member.as_str());
    // Whether there is anything to renew: the actor's own claim, in a managed pool.
    loop {
        let lease = match own_claim(&actor, ns, member).await {
            Ok(lease) => lease,
            // Not this identity's claim, or no such member (any more): nothing to renew.
            Err(e) if matches!(e.kind(), ErrorKind::Refused | ErrorKind::NotFound) => {
                tracing::debug!(namespace = %ns, %member, reason = %e, "session on a member this identity does not hold: no renewal");
                return;
            }
            Err(e) => {
                tracing::warn!(namespace = %ns, %member, error = %e, "cannot read the claim to renew it; trying again");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let Some(pool) = lease.labels().get(POOL_LABEL) else {
            return;
        };
        match pool_policy(&actor, ns, pool).await {
            Ok(Some(_)) => break,
            Ok(None) => {
                tracing::debug!(namespace = %ns, %member, %pool, "not a managed pool: the claim keeps its duration");
                return;
            }
            Err(e) => {
                tracing::warn!(namespace = %ns, %member, error = %e, "cannot read the pool's policy; trying again");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    let mut period = RETRY;
    loop {
        match renew(&actor, ns, member).await {
            Ok(renewed) => {
                let duration = u64::try_from(renewed.duration_seconds).unwrap_or(0);
                period = Duration::from_secs(duration).div_f64(3.0).max(MIN_PERIOD);
                tracing::debug!(namespace = %ns, %member, expires_at = %renewed.expires_at, next_in = ?period, "claim renewed for its open session");
            }
            // Lost: the Lease is gone or someone else's, or the member itself is gone.
            Err(e) if matches!(e.kind(), ErrorKind::Refused | ErrorKind::NotFound) => {
                let text = format!("the claim on {member} was lost: {e}");
                tracing::warn!(namespace = %ns, %member, "{text}; renewal stopped");
                supervisor.claim_lost(ns, member, &text);
                return;
            }
            Err(e) => {
                tracing::warn!(namespace = %ns, %member, error = %e, "renewing the claim failed; trying again");
                period = period.min(RETRY);
            }
        }
        tokio::time::sleep(period).await;
    }
}
