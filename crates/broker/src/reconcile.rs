//! One member's reconcile: read its VM, claim Lease and grant from the reflector stores, ask
//! [`crate::decide`] what to do, and do it against the API server.
//!
//! Every write is idempotent and conflict-safe: grants are server-side applied (field manager
//! `corral-vdi-broker`) only when they differ from what the broker writes; a stale Lease is
//! deleted with its resourceVersion as precondition; the VM is written with one merge patch
//! that touches only the broker's keys and carries the resourceVersion read (on a 409 the VM is
//! read again and the patch rebuilt, or given up when the member changed under it). An Event is
//! recorded only after the write it reports succeeded and changed something (a patch that finds
//! the VM as it should be sends nothing), so a reconcile that finds the work done, even through
//! a store lagging behind the broker's own writes, records nothing.
//!
//! Streams: a release ends the holder's console at once (a `vnc` opened without
//! preserveSession) and every other stream (`portforward`, `usbredir`) as the VM stops with its
//! VMI. A hand-over to another holder keeps the member for the new holder, so it is restarted
//! (KubeVirt's `restart` subresource: a new VMI) once the binding names the new holder; KubeVirt
//! has no other way to end an established stream.

mod active;
mod adopt;
mod guest;
mod power;
mod teardown;
mod writes;

use anyhow::Context as _;
use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use vdi_core::lease::lease_view;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, BROKER_NAME, BROKER_REASON_ANNOTATION, CLAIMED_AT_ANNOTATION,
    GRANTED_TO_ANNOTATION, IDLE_SINCE_ANNOTATION, KEPT_AT_ANNOTATION, LAST_SESSION_ANNOTATION,
    OWNER_ANNOTATION, POOL_LABEL, REMOVING_ANNOTATION, grant_name, lease_name,
};
use vdi_core::resources::VirtualMachine;

use crate::context::{Context, Key};
use crate::decide::{GrantFacts, MemberFacts, NOTICE_ANNOTATION, Plan, Reason, VmFacts, decide};
use crate::entitled::Refusal;
use crate::grant::{self, Owner, Target};

/// How soon a member is looked at again when a start failed.
const START_RETRY: SignedDuration = SignedDuration::from_secs(30);
/// How soon a member is looked at again when it changed while it was being written.
const CHANGED_RETRY: SignedDuration = SignedDuration::from_secs(1);
/// How soon a claim waiting for the last session to end is looked at again (besides the VMI's
/// watch, which reports its end).
const AWAIT_RETRY: SignedDuration = SignedDuration::from_secs(2);
/// The field manager of the broker's writes.
const FIELD_MANAGER: &str = BROKER_NAME;
/// What a teardown's Event says of a console it cut.
const CONSOLE_CUT: &str = "console cut";

/// Reconciles the member `key`; returns when to look at it again without an event.
///
/// Errors: a request failed (it is retried by the caller).
pub async fn reconcile(ctx: &Context, key: &Key) -> anyhow::Result<Option<Timestamp>> {
    let Key { namespace, member } = key;
    let stores = &ctx.stores;
    let vm = stores.vms.get(&ObjectRef::new(member).within(namespace));
    let lease = stores
        .leases
        .get(&ObjectRef::new(&lease_name(member)).within(namespace));
    let name = grant_name(member);
    let role = stores.roles.get(&ObjectRef::new(&name).within(namespace));
    let binding = stores
        .bindings
        .get(&ObjectRef::new(&name).within(namespace));
    let now = ctx.clock.now();
    let view = lease.as_deref().map(|l| lease_view(l, now));
    let pool = vm
        .as_deref()
        .and_then(|vm| vm.labels().get(POOL_LABEL).cloned())
        .unwrap_or_default();
    let target = Target {
        namespace,
        member,
        pool: &pool,
    };
    let owner = lease.as_deref().and_then(|l| {
        l.metadata.uid.as_deref().map(|uid| Owner {
            name: l.metadata.name.as_deref().unwrap_or_default(),
            uid,
        })
    });
    let holder = view.as_ref().and_then(|v| v.holder.as_deref());
    let grant_facts = GrantFacts {
        exists: role.is_some() || binding.is_some(),
        bound: binding.as_deref().and_then(grant::bound),
        current: match (owner, holder, &role, &binding) {
            (Some(owner), Some(holder), Some(role), Some(binding)) => {
                grant::role_matches(role, &grant::role(target, owner))
                    && grant::binding_matches(binding, &grant::binding(target, owner, holder))
            }
            _ => false,
        },
    };
    let deleting = lease.as_deref().and_then(|l| {
        l.metadata
            .deletion_timestamp
            .as_ref()
            .map(|_| l.metadata.finalizers.as_deref().unwrap_or_default())
    });
    // A managed pool: its DesktopPool, named like the pool in its namespace, whose policy reads.
    let desktop_pool = stores.pools.get(&ObjectRef::new(&pool).within(namespace));
    let policy = desktop_pool.as_ref().and_then(|p| p.policy().ok());
    let policy_unreadable = desktop_pool.is_some() && policy.is_none();
    let kept_at = lease
        .as_deref()
        .and_then(|l| l.annotations().get(KEPT_AT_ANNOTATION))
        .and_then(|k| k.parse().ok());
    // The cluster does not enforce the claim rules, else the holder is not entitled (asked only
    // before a first grant).
    let (refusing, never) = match (
        ctx.enforcement.refusing(),
        vm.as_deref(),
        lease.as_deref(),
        holder,
    ) {
        (Some(why), ..) => (Some(why), None),
        (None, Some(vm), Some(lease), Some(holder)) => {
            match crate::entitled::refusal(&ctx.client, namespace, member, vm, lease, holder)
                .await?
            {
                Some(Refusal::NotYet(why)) => (Some(why), None),
                Some(Refusal::Never(why)) => (None, Some(why)),
                None => (None, None),
            }
        }
        _ => (None, None),
    };
    // A dedicated pool's member nobody owns yet, claimed by someone who owns another: asked of
    // the API server (a quorum read of the pool's members' metadata), not the store, which may
    // lag behind this broker's own owner marks.
    let owns_elsewhere = match (policy.as_ref(), vm.as_deref(), holder) {
        (Some(p), Some(vm), Some(holder))
            if p.dedicated() && !vm.annotations().contains_key(OWNER_ANNOTATION) =>
        {
            let vms: kube::Api<VirtualMachine> =
                kube::Api::namespaced(ctx.client.clone(), namespace);
            let members = vms
                .list_metadata(
                    &kube::api::ListParams::default().labels(&format!("{POOL_LABEL}={pool}")),
                )
                .await
                .with_context(|| {
                    format!("list the members of pool {pool} in namespace \"{namespace}\"")
                })?;
            members
                .items
                .iter()
                .find(|other| {
                    other.name_any() != *member
                        && other
                            .annotations()
                            .get(OWNER_ANNOTATION)
                            .map(String::as_str)
                            == Some(holder)
                })
                .map(|other| other.name_any())
        }
        _ => None,
    };
    let vmi = stores
        .vmis
        .get(&ObjectRef::new(member).within(namespace))
        .and_then(|vmi| vmi.metadata.uid.clone());
    let facts = MemberFacts {
        refusing: refusing.as_deref(),
        never: never.as_deref(),
        owns_elsewhere: owns_elsewhere.as_deref(),
        policy_unreadable,
        vm: vm.as_deref().map(|vm| VmFacts {
            vmi: vmi.as_deref(),
            ..vm_facts(vm)
        }),
        lease: view.as_ref(),
        lease_deleting: deleting,
        grant: grant_facts,
        now,
        margin: ctx.margin,
        policy: policy.as_ref(),
        kept_at,
    };
    let decision = decide(member, namespace, &facts);
    let member = Member {
        ctx,
        target,
        recorder: Recorder::new(
            ctx.client.clone(),
            Reporter {
                controller: BROKER_NAME.into(),
                instance: Some(ctx.identity.clone()),
            },
        ),
    };
    let vm = vm.as_deref();
    let mut retry = match decision.plan {
        Plan::Nothing => None,
        Plan::Grant(plan) => match (owner, vm) {
            (Some(owner), Some(vm)) => {
                let retry = member.grant(&plan, owner, vm).await?;
                // A new claim bound: how long since its Lease was written.
                if plan.apply_grant && plan.event == Some(Reason::Claimed) {
                    let acquired = view.as_ref().and_then(|v| v.acquired_at);
                    if let Some(written) = lease.as_deref().and_then(|l| written_at(l, acquired)) {
                        let took = now.duration_since(written).as_secs_f64().max(0.0);
                        ctx.telemetry.metrics.grant.observe(took);
                    }
                }
                retry
            }
            _ => None,
        },
        Plan::Refuse(plan) => match vm {
            Some(vm) => member.refuse(&plan, vm).await?,
            None => None,
        },
        Plan::Teardown(plan) => match vm {
            Some(vm) => member.teardown(&plan, vm, lease.as_deref()).await?,
            None => None,
        },
        Plan::Adopt(plan) => match vm {
            Some(vm) => {
                member
                    .adopt(&plan, vm, lease.as_deref(), policy.as_ref())
                    .await?
            }
            None => None,
        },
        Plan::AwaitSession(plan) => match vm {
            Some(vm) => member.await_session(&plan, vm).await?,
            None => None,
        },
        Plan::ClearReason => match vm {
            Some(vm) => {
                let patch = |_: &VirtualMachine| {
                    Some(json!({ "metadata": { "annotations": {
                        BROKER_REASON_ANNOTATION: null,
                        IDLE_SINCE_ANNOTATION: null,
                        NOTICE_ANNOTATION: null,
                    } } }))
                };
                (member.patch_vm(vm, patch).await? == VmWrite::Declined).then_some(CHANGED_RETRY)
            }
            None => None,
        },
        Plan::DeleteOrphanGrant => {
            member.delete_grant().await?;
            tracing::info!(namespace, member = %key.member, "deleted the grant of a member that is gone");
            None
        }
    };
    if decision.idle_poll
        && let Some(vm) = vm
    {
        let next = member.poll_idle(key, vm).await?;
        retry = Some(retry.map_or(next, |r| r.min(next)));
    } else {
        ctx.idle.forget(key);
    }
    let retry_at = retry.and_then(|r| ctx.clock.now().checked_add(r).ok());
    Ok(match (decision.requeue_at, retry_at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// When a claim's Lease was written, as far as the API server's clock says: its `acquireTime`
/// (`acquired`, read), never before its `creationTimestamp` (which the API server sets; a
/// takeover keeps the old one).
fn written_at(
    lease: &vdi_core::lease::ClaimLease,
    acquired: Option<Timestamp>,
) -> Option<Timestamp> {
    let created = lease.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (created, acquired) {
        (Some(c), Some(a)) => Some(c.max(a)),
        (c, a) => c.or(a),
    }
}

/// What the rules read of a VM (its VMI, which the VM does not say, absent).
fn vm_facts(vm: &VirtualMachine) -> VmFacts<'_> {
    let annotation = |key: &str| vm.annotations().get(key).map(String::as_str);
    VmFacts {
        label: vm
            .labels()
            .get(ASSIGNED_TO_LABEL)
            .map(String::as_str)
            .filter(|l| !l.is_empty()),
        granted_to: annotation(GRANTED_TO_ANNOTATION).filter(|g| !g.is_empty()),
        claimed_at: annotation(CLAIMED_AT_ANNOTATION),
        reason: annotation(BROKER_REASON_ANNOTATION),
        power: vm.printable_status(),
        idle_since: annotation(IDLE_SINCE_ANNOTATION),
        notice: annotation(NOTICE_ANNOTATION),
        removing: annotation(REMOVING_ANNOTATION),
        vmi: None,
        last_session: annotation(LAST_SESSION_ANNOTATION),
        owner: annotation(OWNER_ANNOTATION).filter(|o| !o.is_empty()),
    }
}

/// One member being reconciled.
struct Member<'a> {
    ctx: &'a Context,
    target: Target<'a>,
    recorder: Recorder,
}

/// What became of a VM write ([`Member::patch_vm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VmWrite {
    /// Written.
    Written,
    /// The VM held it already: nothing written (nothing to report).
    AlreadySo,
    /// Not written: the builder declined, or the VM kept changing or is gone.
    Declined,
}
