//! An administrator's label-only assignment of a free member (the seed's Go CLI writes the
//! assigned-to label alone), adopted as a claim: a Lease for the labelled user once RBAC
//! entitles them to the member's pool; the grant follows that Lease as it follows any claim.

use anyhow::Context as _;
use jiff::SignedDuration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use vdi_core::claim::Adoption;
use vdi_core::entitlement::is_entitled;
use vdi_core::lease::ClaimLease;
use vdi_core::names::{BROKER_NAME, BROKER_USER, DEFAULT_LEASE_SECONDS, lease_name};
use vdi_core::policy::Policy;
use vdi_core::resources::VirtualMachine;

use super::{CHANGED_RETRY, Member, vm_facts};
use crate::decide::{AdoptPlan, Reason, RefusalPlan, label_not_entitled_reason, shown};
use crate::grant::Target;

/// How soon a label the broker did not adopt for want of entitlement is looked at again: an
/// administrator's RoleBinding is no event of the member's.
const ENTITLEMENT_RETRY: SignedDuration = SignedDuration::from_secs(30);

impl Member<'_> {
    /// Claims `vm` for the user its label names ([`AdoptPlan::holder`]), if RBAC entitles them
    /// to its pool (a SubjectAccessReview with the groups every request of theirs carries):
    /// the Lease created, or a Lease without a holder (`lease`, as the store holds it) replaced
    /// under its resourceVersion, recorded as written by the broker, for the pool's
    /// `disconnectGrace` (`policy`), else one hour. Not entitled: the reason written on the
    /// member, one Event, nothing else; looked at again in [`ENTITLEMENT_RETRY`].
    ///
    /// Errors: the review or the Lease write failed (a lost race, 409, is looked at again).
    pub(super) async fn adopt(
        &self,
        plan: &AdoptPlan,
        vm: &VirtualMachine,
        lease: Option<&ClaimLease>,
        policy: Option<&Policy>,
    ) -> anyhow::Result<Option<SignedDuration>> {
        let Target {
            namespace,
            member,
            pool,
        } = self.target;
        let holder = plan.holder.as_str();
        if !is_entitled(&self.ctx.client, namespace, pool, holder).await? {
            let reason = label_not_entitled_reason(member, namespace, pool, holder);
            let refusal = RefusalPlan {
                event: Reason::NotGranted,
                holder: holder.to_owned(),
                write_vm: vm_facts(vm).reason != Some(reason.as_str()),
                reason,
                delete_grant: false,
                clear_granted_to: false,
            };
            self.refuse(&refusal, vm).await?;
            return Ok(Some(ENTITLEMENT_RETRY));
        }
        let adoption = Adoption {
            namespace,
            pool,
            member,
            assignee: holder,
            writer: BROKER_USER,
            lease_seconds: policy.map_or(DEFAULT_LEASE_SECONDS, Policy::lease_seconds),
        };
        let written = adoption.lease(self.ctx.clock.now(), lease);
        let leases: Api<Lease> = Api::namespaced(self.ctx.client.clone(), namespace);
        let params = PostParams {
            field_manager: Some(BROKER_NAME.into()),
            ..PostParams::default()
        };
        let name = lease_name(member);
        let result = match lease {
            None => leases.create(&params, &written).await,
            Some(_) => leases.replace(&name, &params, &written).await,
        };
        match result {
            Ok(_) => {
                tracing::info!(namespace, member, holder = %shown(holder),
                    "adopted a label-only assignment as a claim");
                Ok(None)
            }
            // A claim or another write won the member meanwhile: decide again on it.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Some(CHANGED_RETRY)),
            Err(e) => Err(e).with_context(|| {
                format!(
                    "claim {member} for {} (Lease {name} in namespace \"{namespace}\"), whom \
                     its assigned-to label names",
                    shown(holder)
                )
            }),
        }
    }
}
