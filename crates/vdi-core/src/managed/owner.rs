//! Who owns a member of a dedicated pool (SPEC "Pool policy and lifecycle": assignment). The
//! broker makes a member its first holder's ([`OWNER_ANNOTATION`]); an administrator moves or
//! frees it here (`corral-vdi pool owner`), recorded as an Event ([`OWNER_CHANGED_REASON`]).

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::ops::managed;
use crate::audit::{Act, Facts, record};
use crate::error::{Error, ErrorKind, Result};
use crate::identity::Actor;
use crate::names::{OWNER_ANNOTATION, POOL_LABEL, lease_name};
use crate::resources::VirtualMachine;
use crate::validate;

/// The reason of the Event that records a change of owner.
pub const OWNER_CHANGED_REASON: &str = "OwnerChanged";

/// A change of owner, as made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerChange {
    /// The member.
    pub member: String,
    /// Its pool.
    pub pool: String,
    /// Its owner before (full identity), if any.
    pub from: Option<String>,
    /// Its owner now, if any.
    pub to: Option<String>,
}

impl OwnerChange {
    /// The sentence: "dev-2 is now bob's (was alice's)", "dev-2 is now nobody's …".
    pub fn sentence(&self) -> String {
        let whose = |o: &Option<String>| {
            o.as_deref()
                .map_or("nobody's".to_owned(), |o| format!("{o}'s"))
        };
        if self.from == self.to {
            return format!("{} is already {}", self.member, whose(&self.to));
        }
        format!(
            "{} is now {} (was {})",
            self.member,
            whose(&self.to),
            whose(&self.from)
        )
    }
}

/// Makes `member` in `namespace` `owner`'s (or nobody's, with `None`), as `actor` (an
/// administrator: the guard lets only them and the broker write the owner). Refused, with
/// nothing written, for a member of a floating pool and for a member someone other than the
/// new owner holds now (release it first: the broker would end their access at once).
///
/// Errors: [`Error::Invalid`] for a bad name or identity, or a VM that is no pool member;
/// [`Error::Rejected`] `NotFound` (no such VM), `Invalid` (the pool is not dedicated),
/// `Conflict` (claimed by someone else, or changed meanwhile); [`Error::Kube`] for a failed
/// request (403: not an administrator).
pub async fn set_owner(
    actor: &Actor,
    namespace: &str,
    member: &str,
    owner: Option<&str>,
) -> Result<OwnerChange> {
    validate::namespace(namespace)?;
    validate::member_name(member)?;
    if let Some(owner) = owner {
        validate::identity(owner)?;
    }
    let client = actor.client();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let what = format!("VirtualMachine {member} in namespace \"{namespace}\"");
    let vm = vms
        .get_opt(member)
        .await
        .map_err(|e| Error::kube(format!("read {what}"), e))?
        .ok_or_else(|| {
            Error::rejected(
                ErrorKind::NotFound,
                format!("{what} does not exist"),
                format!("corral-vdi pool list -n {namespace} lists the members"),
            )
        })?;
    let Some(pool) = vm.labels().get(POOL_LABEL).cloned() else {
        return Err(Error::invalid(
            format!("{what} is not a pool member (it has no {POOL_LABEL} label)"),
            "pool owner works on members of dedicated pools",
        ));
    };
    let policy = managed(client, namespace, &pool)
        .await?
        .policy()
        .map_err(|e| {
            Error::invalid(
                format!("pool \"{pool}\": {e}"),
                "fix the pool's policy first",
            )
        })?;
    if !policy.dedicated() {
        return Err(Error::rejected(
            ErrorKind::Invalid,
            format!(
                "pool \"{pool}\" is floating: its members go back to the pool and are nobody's; \
                 nothing was written"
            ),
            format!(
                "make it dedicated first: corral-vdi pool set {pool} --assignment dedicated -n {namespace}"
            ),
        ));
    }
    let from = vm
        .annotations()
        .get(OWNER_ANNOTATION)
        .filter(|o| !o.is_empty())
        .cloned();
    let change = OwnerChange {
        member: member.to_owned(),
        pool: pool.clone(),
        from: from.clone(),
        to: owner.map(str::to_owned),
    };
    if from.as_deref() == owner {
        return Ok(change);
    }
    let lease = crate::lease::get(client, namespace, &lease_name(member)).await?;
    let view = crate::state::member_view(&vm, lease.as_ref(), actor.clock().now());
    if let Some(holder) = view.holder.as_deref().filter(|h| Some(*h) != owner)
        && !view.state.claimable()
    {
        return Err(Error::rejected(
            ErrorKind::Conflict,
            format!(
                "{member} is claimed by {holder} ({}); moving it now would end their access at \
                 once, so nothing was written",
                view.state.label()
            ),
            format!(
                "release it first (corral-vdi unassign {member} --force -n {namespace}), then \
                 move it"
            ),
        ));
    }
    let patch = json!({ "metadata": {
        "resourceVersion": vm.resource_version(),
        "annotations": { OWNER_ANNOTATION: owner },
    } });
    vms.patch(member, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::kube(format!("write the owner of {what}"), e))?;
    let regarding = crate::audit::vm_ref(namespace, &vm);
    let act = Act {
        reason: OWNER_CHANGED_REASON,
        action: "ChangeOwner",
        warning: false,
        facts: Facts {
            user: owner.or(from.as_deref()).map(str::to_owned),
            by: Some(actor.username().to_owned()),
            pool,
            why: Some("owner".into()),
        },
        text: format!("{} made {}", actor.username(), change.sentence()),
    };
    if let Err(e) = record(client, actor.username(), &regarding, act).await {
        tracing::warn!(%member, error = %e, "could not record the change of owner as an Event");
    }
    Ok(change)
}
