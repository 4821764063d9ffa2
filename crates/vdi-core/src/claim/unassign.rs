//! Unassign (SPEC "Unassign"), step by step: read the member and its Lease, judge who may
//! release it ([`super::rules::may_release`]), ask the API server whether the Lease may be
//! deleted, remove the presentation, stop the VM, delete the Lease, and record a forced
//! release as an Event. With a broker on the cluster, a claim's release is the Lease's
//! deletion alone: the broker removes the grant, the label and its annotations, cuts the open
//! console and stops the VM.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::power::stop;
use super::rules::{check_unassign, force_refusal, may_release, no_such_member};
use super::{Released, UnassignOptions};
use crate::audit::{Act, Facts, record};
use crate::error::{Error, Result, is_status};
use crate::identity::Actor;
use crate::lease::ClaimLease;
use crate::names::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, POOL_LABEL, lease_name};
use crate::policy::release::ReleaseEffect;
use crate::resources::VirtualMachine;
use crate::state::{ClaimSide, MemberState, member_view_on};

/// Releases `member` as `actor` (SPEC "Unassign").
///
/// An active Lease may be released only by its holder; anyone else is refused with the holder
/// and the expiry, unless [`UnassignOptions::force`] (an administrator's act; the API server
/// judges it, and with the guard installed only administrators pass), which is recorded as an
/// Event on the VM naming who released it from whom. A member in conflict (label and Lease
/// disagree) is resolved only by an administrator. A stale Lease, or a label-only (Phase 1)
/// member, may be released by whoever RBAC (and the guard) allows. In order: the assigned-to
/// label and claimed-at annotation are removed (not blanked), the VM is stopped (unclaimed
/// desktops never stay running), and the Lease is deleted with its resourceVersion as a
/// precondition. If a step fails, the Lease is kept and running the same unassign again
/// finishes the job.
///
/// A member with neither a Lease nor the label is free: without a broker it is stopped still
/// (a release whose stop failed is finished so), but with a broker its power is the broker's
/// (it keeps the pool's warm members running and stops the rest), so it is left as it is
/// ([`super::PowerAction::LeftAsIs`]) and nothing is written.
///
/// With a broker installed ([`crate::broker::status`], read once), a member with a Lease and
/// no conflict is released by deleting the Lease alone (the same rules and Event); the broker
/// does the rest, and [`Released::power`] says what it does ([`super::PowerAction::BrokerReleases`]). A member in
/// conflict, or one with a label and no Lease, is released as without a broker (the broker
/// leaves labels it did not write alone).
///
/// Errors: [`Error::Invalid`] for a bad namespace or member name (no request sent) or a VM that
/// is no pool member; [`Error::Rejected`] `NotFound` for a VM that does not exist ("no such
/// member"); [`Error::Refused`] for someone else's active Lease or a
/// Lease that changed meanwhile; [`Error::Rejected`] (`Conflict`) for a conflict and a caller
/// who is no administrator; [`Error::Rejected`] (`Forbidden`, nothing changed) for a force by
/// someone who is no administrator while the guard is enforced; [`Error::Partial`] when the label was removed but stopping failed.
pub async fn unassign(
    actor: &Actor,
    namespace: &str,
    member: &str,
    options: &UnassignOptions,
) -> Result<Released> {
    check_unassign(namespace, member)?;
    let client = actor.client();
    let caller = actor.username();
    let admin = actor.identity().is_admin();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vm = read_member(&vms, namespace, member).await?;
    let lease = crate::lease::get(client, namespace, &lease_name(member)).await?;
    let has_presentation = vm.labels().contains_key(ASSIGNED_TO_LABEL)
        || vm.annotations().contains_key(CLAIMED_AT_ANNOTATION);
    let side = match (&lease, has_presentation) {
        (None, true) => ClaimSide::Client,
        _ => super::cluster_half::side(crate::broker::status(client).await.ok().as_ref()),
    };
    if lease.is_none() && !has_presentation && side == ClaimSide::Broker {
        tracing::info!(%namespace, %member, caller = %caller, "nothing to release: the member is free");
        return Ok(Released {
            namespace: namespace.to_owned(),
            member: member.to_owned(),
            previous_holder: None,
            lease_released: false,
            label_removed: false,
            power: super::PowerAction::LeftAsIs(
                "it is free, and the broker runs free members (warm ones kept, the rest stopped)"
                    .to_owned(),
            ),
            forced: false,
        });
    }
    let view = member_view_on(&vm, lease.as_ref(), actor.clock().now(), side);
    let foreign = may_release(
        &view,
        caller,
        admin,
        options.force,
        Some(actor.clock().now()),
    )?;
    if let Some(foreign) = &foreign
        && !admin
        && crate::guard::status(client)
            .await
            .is_ok_and(|s| s.enforced())
    {
        return Err(force_refusal(caller, member, foreign));
    }
    let forced = foreign.is_some();
    if let Some(lease) = lease
        .as_ref()
        .filter(|_| side == ClaimSide::Broker && view.state != MemberState::Conflict)
    {
        delete_lease(client, namespace, member, lease, false).await?;
        if forced {
            record_force_release(actor, namespace, &vm, view.holder.as_deref().unwrap_or("")).await;
        }
        tracing::info!(%namespace, %member, caller = %caller, previous = ?view.holder, forced, "claim released; the broker acts on the member");
        return Ok(Released {
            namespace: namespace.to_owned(),
            member: member.to_owned(),
            previous_holder: view.holder,
            lease_released: true,
            label_removed: false,
            power: super::PowerAction::BrokerReleases(
                broker_effect(actor, namespace, &vm).await.into(),
            ),
            forced,
        });
    }

    // The claim changes first and the power last: whether the Lease may be deleted (RBAC, the
    // guard) is asked with a dry run before anything changes, so a refusal leaves the VM as it
    // was. The Lease itself goes last, so nobody claims the member while it stops.
    if let Some(lease) = &lease {
        delete_lease(client, namespace, member, lease, true).await?;
    }
    if has_presentation {
        let patch = json!({ "metadata": {
            "labels": { ASSIGNED_TO_LABEL: null },
            "annotations": { CLAIMED_AT_ANNOTATION: null },
        } });
        vms.patch(member, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube(format!("remove the assignment label of {member}"), e))?;
    }
    let power = stop(client, namespace, &vm)
        .await
        .map_err(|e| Error::Partial {
            message: format!(
                "removed the assignment of {member}{}, but stopping the VM failed",
                if lease.is_some() {
                    " (its Lease is kept)"
                } else {
                    ""
                }
            ),
            suggestion: format!("fix the cause and run `corral-vdi unassign {member}` again"),
            source: Box::new(e),
        })?;
    if let Some(lease) = &lease {
        delete_lease(client, namespace, member, lease, false).await?;
    }
    if forced {
        record_force_release(actor, namespace, &vm, view.holder.as_deref().unwrap_or("")).await;
    }
    tracing::info!(%namespace, %member, caller = %caller, previous = ?view.holder, forced, "member released");
    Ok(Released {
        namespace: namespace.to_owned(),
        member: member.to_owned(),
        previous_holder: view.holder,
        lease_released: lease.is_some(),
        label_removed: has_presentation,
        power,
        forced,
    })
}

/// Reads the VM of `member`, which must be a pool member.
///
/// Errors: [`Error::Rejected`] `NotFound` for a VM that does not exist; [`Error::Invalid`] for
/// one without the pool label; the read's error.
async fn read_member(
    vms: &Api<VirtualMachine>,
    namespace: &str,
    member: &str,
) -> Result<VirtualMachine> {
    let vm = vms
        .get_opt(member)
        .await
        .map_err(|e| {
            Error::kube(
                format!("read VirtualMachine {member} in namespace \"{namespace}\""),
                e,
            )
        })?
        .ok_or_else(|| no_such_member(namespace, member, ": nothing to release"))?;
    if !vm.labels().contains_key(POOL_LABEL) {
        return Err(Error::invalid(
            format!(
                "VirtualMachine \"{member}\" is not a pool member (it has no {POOL_LABEL} label)"
            ),
            "unassign works on pool members only",
        ));
    }
    Ok(vm)
}

/// Deletes `member`'s claim Lease with its resourceVersion and uid as preconditions, or with
/// `dry_run` only asks the API server (RBAC, the guard) whether it would. Gone already is
/// fine.
///
/// Errors: [`Error::Refused`] when the Lease changed meanwhile (409: someone claimed it);
/// [`Error::Kube`] for any other refusal (a guard denial names its rule).
async fn delete_lease(
    client: &Client,
    namespace: &str,
    member: &str,
    lease: &ClaimLease,
    dry_run: bool,
) -> Result<()> {
    let params = DeleteParams {
        dry_run,
        preconditions: Some(Preconditions {
            resource_version: lease.resource_version(),
            uid: lease.uid(),
        }),
        ..Default::default()
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.delete(&lease.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) if is_status(&e, 409) => Err(Error::Refused {
            message: format!(
                "the Lease of {member} changed while it was being released (someone claimed it \
                 meanwhile){}",
                if dry_run { "; nothing was changed" } else { "" }
            ),
            suggestion: Some("list the pool again to see who holds it".into()),
        }),
        Err(e) => Err(Error::kube(
            format!(
                "release Lease {}{}",
                lease.name_any(),
                if dry_run {
                    " (asked before anything changed: nothing was)"
                } else {
                    ""
                }
            ),
            e,
        )),
    }
}

/// Reason of the Event a forced release leaves on the VM.
pub const FORCE_RELEASE_REASON: &str = "ForceReleased";

/// Records a forced release in the audit trail ([`crate::audit::record`]): an
/// events.k8s.io/v1 Event on the VM, related to the pool's DesktopPool, whose note names the
/// former holder (`user`), the administrator (`by`), the pool and `why: force`. A refusal to
/// write it is logged, not fatal: the release itself has happened.
async fn record_force_release(actor: &Actor, namespace: &str, vm: &VirtualMachine, from: &str) {
    let now = actor.clock().now();
    let member = vm.name_any();
    let regarding = crate::audit::vm_ref(namespace, vm);
    let act = Act {
        reason: FORCE_RELEASE_REASON,
        action: "ForceRelease",
        warning: true,
        facts: Facts {
            user: Some(from.to_owned()).filter(|f| !f.is_empty()),
            by: Some(actor.username().to_owned()),
            pool: vm.labels().get(POOL_LABEL).cloned().unwrap_or_default(),
            why: Some("force".into()),
        },
        text: format!(
            "{} force-released {member} from {from} at {}",
            actor.username(),
            now.round(jiff::Unit::Second).unwrap_or(now)
        ),
    };
    if let Err(e) = record(actor.client(), actor.username(), &regarding, act).await {
        tracing::warn!(%member, error = %e, "could not record the forced release as an Event");
    }
}

/// What the broker does to `vm` (a pool member: [`read_member`] refused any other) once its
/// claim is gone: its pool's policy, read now ([`super::renew::pool_policy`]; a pool without a
/// readable DesktopPool is unmanaged: the broker stops the member).
async fn broker_effect(actor: &Actor, namespace: &str, vm: &VirtualMachine) -> ReleaseEffect {
    let pool = vm.labels().get(POOL_LABEL).map_or("", String::as_str);
    let policy = super::renew::pool_policy(actor, namespace, pool)
        .await
        .ok()
        .flatten();
    ReleaseEffect::of(policy.as_ref(), pool, &vm.name_any())
}
