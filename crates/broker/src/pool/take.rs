//! Taking a member of a managed pool for removal (SPEC "Pool policy and lifecycle": shrink and
//! `onRelease: reset`): the broker first makes the member's claim Lease its own, so no claim can
//! win it meanwhile, and only then marks the VM with [`REMOVING_ANNOTATION`]. The pool loop
//! ([`super`]) finishes what it finds marked: the VM deleted, then the Lease.
//!
//! First writer wins on the Lease: a create answered 409 AlreadyExists means a claim got there
//! first; a replace under the resourceVersion read answered 409 Conflict means someone renewed,
//! took or released it meanwhile. Either way nothing is marked and the member stays.

use anyhow::Context as _;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde_json::json;
use vdi_core::audit::Facts;
use vdi_core::lease::ClaimLease;
use vdi_core::names::{
    BROKER_NAME, BROKER_USER, DEFAULT_LEASE_SECONDS, MEMBER_LABEL, POOL_LABEL, REMOVING_ANNOTATION,
    lease_name,
};
use vdi_core::policy::plan::Removal;
use vdi_core::resources::VirtualMachine;

use crate::context::Context;
use crate::events::{self, Act};

/// The Lease the broker holds while it removes `member` of `pool` (labelled as a claim's, both
/// times written so the guard's rules for a held claim hold), replacing `previous` if given.
fn broker_lease(
    namespace: &str,
    pool: &str,
    member: &str,
    previous: Option<&ClaimLease>,
) -> ClaimLease {
    let now = MicroTime(Timestamp::now());
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(member)),
            namespace: Some(namespace.to_owned()),
            resource_version: previous.and_then(|l| l.resource_version()),
            labels: Some(
                [
                    (POOL_LABEL.to_owned(), pool.to_owned()),
                    (MEMBER_LABEL.to_owned(), member.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(BROKER_USER.to_owned()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_duration_seconds: Some(DEFAULT_LEASE_SECONDS),
            lease_transitions: Some(previous.map_or(0, |l| l.transitions().saturating_add(1))),
            ..Default::default()
        }),
    };
    ClaimLease::from(lease)
}

/// Takes `member` (in `namespace`) for removal: its claim Lease becomes the broker's
/// ([`BROKER_USER`]), then its VM is annotated [`REMOVING_ANNOTATION`]`=<why>` and a
/// `MemberRemoving` Event recorded. `lease`: the member's current Lease (one being reclaimed or
/// stale), replaced under its resourceVersion; `None` when there is none, then one is created.
///
/// Returns `Ok(false)`, having changed nothing, when a claim won the race (the create answered
/// 409 AlreadyExists, the replace 409 Conflict) or the VM is gone; `Ok(true)` once the Lease is
/// the broker's and the VM marked (a Lease the broker held already is kept as it is).
///
/// Errors: a request failed otherwise (the Lease may then be the broker's without the mark: the
/// pool loop gives such a Lease back).
pub async fn take_for_removal(
    ctx: &Context,
    namespace: &str,
    member: &str,
    why: Removal,
    lease: Option<&ClaimLease>,
) -> anyhow::Result<bool> {
    let client = &ctx.client;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let Some(vm) = vms
        .get_opt(member)
        .await
        .with_context(|| format!("read VirtualMachine {member} in namespace \"{namespace}\""))?
    else {
        return Ok(false);
    };
    let pool = vm.labels().get(POOL_LABEL).cloned().unwrap_or_default();
    let leases: Api<ClaimLease> = Api::namespaced(client.clone(), namespace);
    let params = PostParams {
        field_manager: Some(BROKER_NAME.into()),
        ..PostParams::default()
    };
    let name = lease_name(member);
    let held = lease.is_some_and(|l| l.holder() == Some(BROKER_USER));
    if !held {
        let ours = broker_lease(namespace, &pool, member, lease);
        let taken = match lease {
            None => leases.create(&params, &ours).await,
            Some(_) => leases.replace(&name, &params, &ours).await,
        };
        match taken {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::info!(
                    namespace,
                    member,
                    why = why.as_str(),
                    "a claim won {member}: not removed"
                );
                return Ok(false);
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("take Lease {name} in namespace \"{namespace}\""));
            }
        }
    }
    let patch = json!({ "metadata": { "annotations": { REMOVING_ANNOTATION: why.as_str() } } });
    let patched = vms
        .patch(
            member,
            &PatchParams {
                field_manager: Some(BROKER_NAME.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await;
    let vm = match patched {
        Ok(vm) => vm,
        // Gone meanwhile: the pool loop gives the Lease back.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
        Err(e) => {
            return Err(e).with_context(|| {
                format!("mark VirtualMachine {member} in namespace \"{namespace}\" as removing")
            });
        }
    };
    let act = Act {
        reason: "MemberRemoving",
        action: match why {
            Removal::Shrink => "Resize",
            Removal::Reset => "Reset",
        },
        warning: false,
        facts: Facts {
            by: Some(BROKER_USER.to_owned()),
            pool: pool.clone(),
            why: Some(why.as_str().to_owned()),
            ..Default::default()
        },
        text: format!(
            "{member} is being removed ({}): its Lease {name} is the broker's, so no one can claim it (member {member}, pool {pool})",
            match why {
                Removal::Shrink => "above the pool's size",
                Removal::Reset =>
                    "released in a pool that resets members; cloned again from the golden VM",
            }
        ),
    };
    events::record(&recorder(ctx), &vm.object_ref(&()), namespace, act).await;
    Ok(true)
}

/// The recorder of the pool loop's Events: reporting controller `corral-vdi-broker`, instance
/// this replica ([`Context::identity`]).
pub(super) fn recorder(ctx: &Context) -> Recorder {
    let reporter = Reporter {
        controller: BROKER_NAME.into(),
        instance: Some(ctx.identity.clone()),
    };
    Recorder::new(ctx.client.clone(), reporter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_lease_is_a_held_claim_replacing_the_one_read() {
        let mut previous = ClaimLease::default();
        previous.metadata.resource_version = Some("42".into());
        previous.spec = Some(vdi_core::lease::RawLeaseSpec {
            holder_identity: Some("alice".into()),
            lease_transitions: Some(3),
            ..Default::default()
        });
        let lease = broker_lease("ns", "dev", "dev-5", Some(&previous));
        assert_eq!(lease.metadata.name.as_deref(), Some("corral-vdi-dev-5"));
        assert_eq!(lease.resource_version().as_deref(), Some("42"));
        assert_eq!(lease.holder(), Some(BROKER_USER));
        assert_eq!(lease.transitions(), 4);
        let spec = lease.spec.unwrap();
        assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());
        assert_eq!(lease.metadata.labels.unwrap()[MEMBER_LABEL], "dev-5");
        let fresh = broker_lease("ns", "dev", "dev-5", None);
        assert_eq!((fresh.resource_version(), fresh.transitions()), (None, 0));
    }
}
