//! Pool create as both front ends (CLI `pool create`, the app's New pool dialog) run it: one
//! rule for what a new pool is. On a cluster whose broker does the cluster's half of claims
//! ([`ClaimSide::Broker`]) a new pool is managed: its members, then its DesktopPool with the
//! policy asked for, and the broker's right to act in the namespace. Without a broker it is a
//! label-only pool, and a policy (which only a broker acts on) is refused before anything is
//! created.

use kube::Client;
use serde::{Deserialize, Serialize};

use super::change::{PolicyChanges, spec_for};
use super::ops;
use crate::entitlement::Who;
use crate::error::{Error, ErrorKind, Result};
use crate::policy::{DesktopPool, DesktopPoolSpec};
use crate::pool::{
    CreateOptions, CreatePool, CreateProgress, PoolCreated, create_pool, validate_create,
};
use crate::state::ClaimSide;

/// What the app's "New pool" dialog asks for: the pool and, on a cluster with a broker, its
/// policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct NewPool {
    /// Namespace of the golden VM and of the pool.
    pub namespace: String,
    /// Pool name (a DNS-1123 label).
    pub name: String,
    /// The golden VM.
    pub golden: String,
    /// Number of members.
    pub size: u32,
    /// Clone a golden VM that is not stopped (crash-consistent disks).
    pub allow_running: bool,
    /// Per-member clone timeout, in seconds.
    pub timeout_seconds: u32,
    /// The policy beyond golden VM and size (warm, durations, on release); empty for the
    /// defaults, and on a cluster without a broker.
    pub policy: PolicyChanges,
}

impl NewPool {
    /// The create request and the policy.
    pub fn split(self) -> (CreatePool, PolicyChanges) {
        let request = CreatePool {
            namespace: self.namespace,
            name: self.name,
            golden: self.golden,
            size: self.size,
            options: CreateOptions {
                timeout: std::time::Duration::from_secs(u64::from(self.timeout_seconds)),
                allow_running: self.allow_running,
                ..Default::default()
            },
        };
        (request, self.policy)
    }
}

/// Checks a create without a request, as [`create`] does first: the pool's input
/// ([`validate_create`]; with a broker, a name short enough for a DesktopPool:
/// [`crate::pool::check_managed_name`]), the policy's bounds ([`spec_for`]) and that a policy
/// has a broker to run it; returns the member names the pool would get.
///
/// Errors: those of [`validate_create`], [`crate::pool::check_managed_name`] and [`spec_for`];
/// [`Error::Rejected`] `Invalid` for a policy where `side` is [`ClaimSide::Client`].
pub fn check(request: &CreatePool, policy: &PolicyChanges, side: ClaimSide) -> Result<Vec<String>> {
    checked(request, policy, side).map(|(members, _)| members)
}

/// [`check`], returning the member names and the DesktopPool's spec.
fn checked(
    request: &CreatePool,
    policy: &PolicyChanges,
    side: ClaimSide,
) -> Result<(Vec<String>, DesktopPoolSpec)> {
    let members = validate_create(request)?;
    if side == ClaimSide::Broker {
        crate::pool::check_managed_name(&request.name)?;
    }
    let spec = spec_for(&request.golden, request.size, policy)?;
    if side == ClaimSide::Client && !policy.is_empty() {
        return Err(Error::rejected(
            ErrorKind::Invalid,
            "warm members, disconnect grace, max session, idle timeout and on release are the \
             pool's policy, which the broker runs, and this cluster has no broker; nothing was \
             created",
            "install the broker (corral-vdi broker install), or create the pool without them",
        ));
    }
    Ok((members, spec))
}

/// A pool made by [`create`]: its members, and its DesktopPool when the cluster has a broker.
#[derive(Debug)]
pub struct Created {
    /// The members, and what deserves a look ([`PoolCreated::warnings`]).
    pub pool: PoolCreated,
    /// The DesktopPool written (a managed pool), `None` on a cluster without a broker.
    pub policy: Option<DesktopPool>,
}

/// Creates the pool `request` asks for ([`create_pool`], reporting each step to `progress`),
/// entitles `who` to claim from it ([`crate::entitlement::entitle`]; nobody named: everyone who
/// may claim in the namespace, [`Who::Everyone`]; a warning naming the command when it cannot)
/// and, where `side` is [`ClaimSide::Broker`] (the open link knows it: no read here), its
/// DesktopPool with `golden`, `size` and `policy` applied, then lets the broker act in the
/// namespace ([`crate::broker::namespaces::serve`]; a warning naming the command when it
/// cannot).
///
/// Errors, before anything is created: those of [`check`]. Then those of [`create_pool`]; and
/// [`Error::Partial`] when the members exist but the DesktopPool could not be written (the fix
/// names `pool adopt`).
pub async fn create<P>(
    client: &Client,
    request: &CreatePool,
    policy: &PolicyChanges,
    who: &[Who],
    side: ClaimSide,
    progress: P,
) -> Result<Created>
where
    P: Fn(CreateProgress) + Send + Sync,
{
    let (_, spec) = checked(request, policy, side)?;
    let mut pool = create_pool(client, request, progress).await?;
    entitle(client, &mut pool, who).await;
    if side == ClaimSide::Client {
        return Ok(Created { pool, policy: None });
    }
    let (ns, name) = (&pool.namespace, &pool.name);
    let written = ops::create(client, ns, name, spec)
        .await
        .map_err(|e| Error::Partial {
            message: format!(
                "pool \"{name}\" was created ({} members), but its DesktopPool was not",
                pool.members.len()
            ),
            suggestion: format!(
                "adopt it: corral-vdi pool adopt {name} -n {ns} --from {}, then pool set",
                pool.golden
            ),
            source: Box::new(e),
        })?;
    pool.warnings
        .extend(crate::broker::namespaces::serve_or_warn(client, ns).await);
    Ok(Created {
        pool,
        policy: Some(written),
    })
}

/// Entitles `who` (nobody named: [`Who::Everyone`]) to the new pool, as its creator; what it
/// could not write is a warning on the pool naming the command that does.
async fn entitle(client: &Client, pool: &mut PoolCreated, who: &[Who]) {
    let who = if who.is_empty() {
        vec![Who::Everyone]
    } else {
        who.to_vec()
    };
    let (ns, name) = (pool.namespace.clone(), pool.name.clone());
    let written = match crate::identity::whoami(client).await {
        Ok(me) => crate::entitlement::entitle(client, &ns, &name, &who, &me.username).await,
        Err(e) => Err(e),
    };
    match written {
        Ok(said) => pool.entitled = said,
        Err(e) => pool.warnings.push(format!(
            "nobody may claim from pool \"{name}\" yet: its entitlement was not written ({e}); \
             corral-vdi pool entitle {name} --everyone -n {ns} (or --user, --group) writes it"
        )),
    }
}
