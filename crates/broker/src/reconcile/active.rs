//! An active claim: grant it (bind, restart on a hand-over, start, label), or refuse it.

use anyhow::Context as _;
use jiff::SignedDuration;
use kube::api::Api;
use serde_json::{Value, json};
use vdi_core::names::{
    ASSIGNED_TO_LABEL, BROKER_REASON_ANNOTATION, BROKER_USER, CLAIMED_AT_ANNOTATION,
    GRANTED_TO_ANNOTATION, LAST_SESSION_ANNOTATION, OWNER_ANNOTATION,
};
use vdi_core::policy::reclaim::ReclaimDue;
use vdi_core::resources::VirtualMachine;

use super::{AWAIT_RETRY, CHANGED_RETRY, Member, START_RETRY, VmWrite, vm_facts};
use crate::decide::{AwaitPlan, GrantPlan, NOTICE_ANNOTATION, Reason, RefusalPlan, shown};
use crate::grant::{self, Owner, Target};

impl Member<'_> {
    /// An active claim: bind; cut a previous holder's console; start; label; then the Event,
    /// if the VM write changed something.
    pub(super) async fn grant(
        &self,
        plan: &GrantPlan,
        owner: Owner<'_>,
        vm: &VirtualMachine,
    ) -> anyhow::Result<Option<SignedDuration>> {
        let Target {
            namespace, member, ..
        } = self.target;
        if plan.apply_grant {
            // The Role first: the API server lets the broker bind only a Role that exists and
            // grants no more than the broker holds (RBAC's escalation check).
            self.apply(&grant::role(self.target, owner)).await?;
            self.apply(&grant::binding(self.target, owner, &plan.holder))
                .await?;
        }
        // The binding names the new holder now: the old holder's console ends (a member that
        // ran their session was handed over through a restart first, decide::handover).
        if plan.previous.is_some() {
            self.cut_console().await;
        }
        let mut failure = None;
        if plan.start {
            failure = self.start().await?;
        }
        let reason = failure.as_deref();
        let reason_changed = vm_facts(vm).reason != reason;
        let mut written = VmWrite::AlreadySo;
        if plan.write_vm || reason_changed {
            let encoded = plan.label.as_str();
            written = self
                .patch_vm(vm, |vm| {
                    let facts = vm_facts(vm);
                    // A label someone else wrote meanwhile is not overwritten: the next
                    // reconcile sees the conflict.
                    let free = facts
                        .label
                        .is_none_or(|l| l == encoded || facts.granted_to == Some(l));
                    free.then(|| {
                        let mut patch = json!({ "metadata": {
                            "labels": { ASSIGNED_TO_LABEL: encoded },
                            "annotations": {
                                CLAIMED_AT_ANNOTATION: plan.claimed_at,
                                GRANTED_TO_ANNOTATION: encoded,
                                BROKER_REASON_ANNOTATION: reason,
                                NOTICE_ANNOTATION: plan.notice,
                                LAST_SESSION_ANNOTATION: null,
                            },
                        } });
                        // An owner written meanwhile (an administrator's move) is kept.
                        if let Some(owner) = plan.owner.as_deref().filter(|_| facts.owner.is_none())
                        {
                            patch["metadata"]["annotations"][OWNER_ANNOTATION] = owner.into();
                        }
                        patch
                    })
                })
                .await?;
        }
        match written {
            VmWrite::Declined => return Ok(Some(CHANGED_RETRY)),
            // Done already (by this broker a moment ago, seen through a lagging store):
            // nothing to report again.
            VmWrite::AlreadySo => {}
            VmWrite::Written => {
                if let Some(event) = plan.event {
                    self.record_grant(vm, plan, event).await;
                }
                if let Some(soon) = &plan.announce {
                    self.record_notice(vm, plan, soon).await;
                }
                if let (Some(why), true) = (&failure, reason_changed) {
                    let user = shown(&plan.holder);
                    let note = format!(
                        "{member} claimed by {user} cannot start: {why} (user {user}, member \
                         {member}, pool {})",
                        self.target.pool
                    );
                    self.record(vm, Reason::StartFailed, &plan.holder, None, note)
                        .await;
                }
            }
        }
        if failure.is_some() {
            tracing::debug!(namespace, member, "start retried in {START_RETRY}");
            return Ok(Some(START_RETRY));
        }
        Ok(None)
    }

    /// The Event of a grant: `Claimed`, or `HolderChanged` (a member handed over while it did
    /// not run: the previous holder had no open streams).
    async fn record_grant(&self, vm: &VirtualMachine, plan: &GrantPlan, event: Reason) {
        let Target { member, pool, .. } = self.target;
        let user = shown(&plan.holder);
        let note = match (event, &plan.previous) {
            (Reason::HolderChanged, Some(previous)) => {
                let previous = shown(previous);
                format!(
                    "{member} passed from {previous} to {user}: access moved to {user}; {member} \
                     was not running, so {previous} had no open streams (user {user}, member \
                     {member}, pool {pool})"
                )
            }
            _ => match &plan.assigned_by {
                // Written by the broker itself: an administrator's label-only assignment it
                // adopted (decide::AdoptPlan).
                Some(by) if by == BROKER_USER => format!(
                    "access to {member} granted to {user}, whom an administrator's assigned-to \
                     label named (a label-only assignment, adopted as a claim) (user {user}, \
                     member {member}, pool {pool})"
                ),
                Some(by) => {
                    let by = shown(by);
                    format!(
                        "access to {member} granted to {user}, assigned by {by} (user {user}, by \
                         {by}, member {member}, pool {pool})"
                    )
                }
                None => format!(
                    "access to {member} granted to {user} (user {user}, member {member}, pool \
                     {pool})"
                ),
            },
        };
        self.record_by(
            vm,
            event,
            &plan.holder,
            plan.assigned_by.as_deref(),
            None,
            note,
        )
        .await;
    }

    /// An active claim on a member still running the last claim's session: the reason written
    /// (no grant, no Event), the member restarted if that VMI would never end by itself; looked
    /// at again when the VMI goes (its watch), or in a second.
    pub(super) async fn await_session(
        &self,
        plan: &AwaitPlan,
        vm: &VirtualMachine,
    ) -> anyhow::Result<Option<SignedDuration>> {
        let Target {
            namespace, member, ..
        } = self.target;
        if plan.restart {
            let restarted = vdi_core::claim::restart(&self.ctx.client, namespace, member).await?;
            tracing::info!(namespace, member, holder = %shown(&plan.holder), restarted,
                "restarted the last session's VMI before granting");
        }
        if plan.write_vm {
            let reason = plan.reason.as_str();
            let patch = |_: &VirtualMachine| {
                Some(json!({ "metadata": { "annotations": { BROKER_REASON_ANNOTATION: reason } } }))
            };
            if self.patch_vm(vm, patch).await? == VmWrite::Declined {
                return Ok(Some(CHANGED_RETRY));
            }
        }
        Ok(Some(AWAIT_RETRY))
    }

    /// The Event `ReclaimSoon` of a managed pool's claim whose reclaim `soon` is near.
    async fn record_notice(&self, vm: &VirtualMachine, plan: &GrantPlan, soon: &ReclaimDue) {
        let Target { member, pool, .. } = self.target;
        let user = shown(&plan.holder);
        let why = soon.why.as_str();
        let keep = if soon.keepable {
            "Keep postpones it"
        } else {
            "Keep cannot postpone it"
        };
        let note = format!(
            "{user}'s claim on {member} will be reclaimed ({why}) at {}: {keep} (user {user}, \
             member {member}, pool {pool})",
            vdi_core::clock::annotation_time(soon.at)
        );
        self.record(vm, Reason::ReclaimSoon, &plan.holder, Some(why), note)
            .await;
    }

    /// The capacity check, then the start; the sentence for the reason annotation when the VM
    /// cannot start.
    ///
    /// Errors: the VM cannot be read.
    async fn start(&self) -> anyhow::Result<Option<String>> {
        let Target {
            namespace, member, ..
        } = self.target;
        // The store keeps VMs trimmed (no template): the check and the start read it whole.
        let vm = Api::<VirtualMachine>::namespaced(self.ctx.client.clone(), namespace)
            .get(member)
            .await
            .with_context(|| {
                format!("read VirtualMachine {member} in namespace \"{namespace}\"")
            })?;
        match vdi_core::claim::StartCheck::new(&self.ctx.client)
            .refusal(&vm)
            .await
        {
            Ok(None) => {}
            Ok(Some(refusal)) => return Ok(Some(sentence(&refusal))),
            Err(e) => return Ok(Some(sentence(&e))),
        }
        match vdi_core::claim::start(&self.ctx.client, namespace, &vm).await {
            Ok(action) => {
                tracing::info!(namespace, member, ?action, "start");
                Ok(None)
            }
            Err(e) => Ok(Some(sentence(&e))),
        }
    }

    /// No grant (label and Lease disagree, or the Lease cannot be read): revoke, write the
    /// reason, one Event.
    pub(super) async fn refuse(
        &self,
        plan: &RefusalPlan,
        vm: &VirtualMachine,
    ) -> anyhow::Result<Option<SignedDuration>> {
        if plan.delete_grant && self.delete_grant().await? {
            self.cut_console().await;
        }
        if plan.write_vm {
            let reason = plan.reason.as_str();
            let patch = |_: &VirtualMachine| {
                let mut patch = json!({ "metadata": { "annotations": {
                    BROKER_REASON_ANNOTATION: reason,
                } } });
                if plan.clear_granted_to {
                    patch["metadata"]["annotations"][GRANTED_TO_ANNOTATION] = Value::Null;
                }
                Some(patch)
            };
            match self.patch_vm(vm, patch).await? {
                VmWrite::Declined => return Ok(Some(CHANGED_RETRY)),
                VmWrite::AlreadySo => {}
                VmWrite::Written => {
                    let note = format!(
                        "{reason} (user {}, member {}, pool {})",
                        shown(&plan.holder),
                        self.target.member,
                        self.target.pool
                    );
                    self.record(vm, plan.event, &plan.holder, None, note).await;
                }
            }
        }
        Ok(None)
    }
}

/// An error as one sentence for the reason annotation: its message and, when it has one, the
/// fix. The capacity refusal's "nothing was claimed" is the client's word (the Lease is held
/// here), so it is left out.
fn sentence(e: &vdi_core::Error) -> String {
    let message = e.to_string();
    let message = message
        .strip_suffix("; nothing was claimed")
        .unwrap_or(&message);
    match e.suggestion() {
        Some(fix) => format!("{message}: {fix}"),
        None => message.to_owned(),
    }
}
