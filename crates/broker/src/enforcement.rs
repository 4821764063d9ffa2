//! Whether the cluster enforces the claim rules the broker's grants rest on (SPEC "Broker":
//! the broker grants only where the claim rules are enforced).
//!
//! The broker hands a desktop to whoever a claim Lease names. Only the guard
//! (`guard/guard.yaml`, [`vdi_core::guard`]) makes the API server refuse a Lease that names
//! someone other than its writer, or that takes another's claim; without it, anyone who may
//! write Leases in a namespace could name themselves on another's claim and be granted the
//! desktop. So the leader reads the guard's status ([`vdi_core::guard::status`], which every
//! signed-in user may read) before its first reconcile and every [`CHECK_INTERVAL`] after,
//! and while the guard is not installed as this version ships it, every active claim is
//! refused (no grant, the grant made before revoked, the reason on the member) and the reason
//! is written on the leader Lease ([`vdi_core::names::BROKER_REFUSING_ANNOTATION`]), where
//! `corral-vdi broker status` and the app read it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use kube::Client;
use vdi_core::guard::{self, GuardState};
use vdi_core::names::BROKER_REFUSING_ANNOTATION;

/// How often the leader reads the guard's status again (seconds: a removed guard stops grants
/// within this, plus a reconcile).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// What the leader last read: `None` while the claim rules are enforced, else why not (also
/// before the first read).
#[derive(Clone, Debug)]
pub struct Enforcement(Arc<RwLock<Option<String>>>);

impl Default for Enforcement {
    fn default() -> Self {
        Enforcement(Arc::new(RwLock::new(Some(
            "the broker has not yet read whether the cluster enforces the claim rules".into(),
        ))))
    }
}

impl Enforcement {
    /// Why claims are not granted now; `None` while the claim rules are enforced.
    pub fn refusing(&self) -> Option<String> {
        self.0.read().map_or_else(
            |_| Some("the broker's record of the guard was lost".into()),
            |r| r.clone(),
        )
    }

    /// Records `now` (as [`Enforcement::refusing`] reads it); returns whether it changed.
    fn set(&self, now: Option<String>) -> bool {
        match self.0.write() {
            Ok(mut held) if *held != now => {
                *held = now;
                true
            }
            _ => false,
        }
    }
}

/// Why the claim rules are not enforced on this cluster, from the guard's status; `None` when
/// they are (the guard installed as this version ships it).
///
/// Errors: the status could not be read (the cluster unreachable): the caller keeps what it
/// knew.
pub async fn read(client: &Client) -> vdi_core::error::Result<Option<String>> {
    let status = guard::status(client).await?;
    Ok((status.state != GuardState::Installed).then(|| {
        format!(
            "the cluster does not enforce the claim rules, so the broker grants no desktop: {}",
            status.summary
        )
    }))
}

/// Reads the guard's status into `enforcement`; on a change, logs it and writes it on the
/// leader Lease. Returns whether it changed (every member is then looked at again).
pub async fn refresh(client: &Client, enforcement: &Enforcement) -> bool {
    let now = match read(client).await {
        Ok(now) => now,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the guard's status; keeping what was known");
            return false;
        }
    };
    if !enforcement.set(now.clone()) {
        return false;
    }
    match &now {
        Some(why) => tracing::warn!(%why, "refusing every claim"),
        None => tracing::info!("the claim rules are enforced: granting claims"),
    }
    crate::election::annotate_leader(client, BROKER_REFUSING_ANNOTATION, now.as_deref()).await;
    true
}
