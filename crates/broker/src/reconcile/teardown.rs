//! A claim that ended: reclaim its Lease, revoke, cut, apply `onRelease`, clear.

use anyhow::Context as _;
use jiff::SignedDuration;
use kube::api::{Api, DeleteParams, Preconditions};
use serde_json::{Value, json};
use vdi_core::lease::ClaimLease;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, BROKER_REASON_ANNOTATION, CLAIMED_AT_ANNOTATION, GRANTED_TO_ANNOTATION,
    IDLE_SINCE_ANNOTATION, LAST_SESSION_ANNOTATION, lease_name,
};
use vdi_core::policy::OnRelease;
use vdi_core::policy::reclaim::ReclaimWhy;
use vdi_core::resources::VirtualMachine;

use super::power::{RESTARTED, RESTARTED_WARM};
use super::{CHANGED_RETRY, CONSOLE_CUT, Member, VmWrite, vm_facts};
use crate::decide::{NOTICE_ANNOTATION, Reason, TeardownPlan, shown};
use crate::grant::Target;
use crate::metrics::WhyLabel;
use crate::pool::take::take_for_removal;
use vdi_core::policy::plan::Removal;

impl Member<'_> {
    /// The claim ended: reclaim its Lease (a reset takes it instead), revoke, cut, apply
    /// `onRelease` (stop, restart; a reset was the take), clear; an Event naming what was done,
    /// if anything was. `lease`: the member's claim Lease as the store holds it.
    pub(super) async fn teardown(
        &self,
        plan: &TeardownPlan,
        vm: &VirtualMachine,
        lease: Option<&ClaimLease>,
    ) -> anyhow::Result<Option<SignedDuration>> {
        let Target {
            namespace, member, ..
        } = self.target;
        let mut done: Vec<String> = Vec::new();
        // A claim that ended without a reclaim (released: no Lease, or none held) is judged on
        // the store, which may lag: a member released and claimed again at once has a new
        // Lease the store has not seen. Nothing is torn down unless the API server agrees.
        if plan.reclaim.is_none() && !self.lease_is_still(lease).await? {
            return Ok(Some(CHANGED_RETRY));
        }
        if let Some(rv) = &plan.reclaim {
            match self.delete_lease(rv).await? {
                Some(deleted) => {
                    if plan.event == Some(Reason::Reclaimed) {
                        let why = match (plan.reclaim_why, &plan.why) {
                            _ if plan.unfit => "unfit",
                            (Some(rule), _) => rule.as_str(),
                            (None, Some(_)) => "invalid",
                            (None, None) => "expired",
                        };
                        let metrics = &self.ctx.telemetry.metrics;
                        metrics.reclaims.get_or_create(&WhyLabel { why }).inc();
                        self.ctx.count_reclaim(namespace, self.target.pool, why);
                    }
                    done.push(deleted);
                }
                // Renewed, taken over or deleted meanwhile: decide again on what is there now.
                None => return Ok(Some(CHANGED_RETRY)),
            }
        }
        let revoked = plan.delete_grant && self.delete_grant().await?;
        if revoked {
            done.push("access revoked".into());
        }
        if plan.cut_console && self.cut_console().await {
            done.push(CONSOLE_CUT.into());
        }
        match plan.on_release {
            Some(OnRelease::Keep) if self.stays_warm() => {
                done.extend(self.restart_released(revoked, RESTARTED_WARM).await?);
            }
            Some(OnRelease::Keep) => done.extend(self.stop().await?),
            Some(OnRelease::Restart) => {
                done.extend(self.restart_released(revoked, RESTARTED).await?);
            }
            Some(OnRelease::Reset) | None => {}
        }
        // A reset keeps granted-to until the member is taken: the mark that a reset is owed
        // (level-based: a take that failed is tried again).
        let reset = plan.on_release == Some(OnRelease::Reset);
        let mut written = VmWrite::AlreadySo;
        if plan.write_vm {
            let label = vm_facts(vm).label;
            let clear_label = plan.clear_label;
            let reason = plan.reason.as_deref();
            let patch = |fresh: &VirtualMachine| {
                // The label is removed only if it is still the one judged to be the claim's.
                let clear = clear_label && vm_facts(fresh).label == label;
                let mut patch = json!({ "metadata": { "annotations": {
                    BROKER_REASON_ANNOTATION: reason,
                    IDLE_SINCE_ANNOTATION: null,
                    NOTICE_ANNOTATION: null,
                } } });
                if !reset {
                    patch["metadata"]["annotations"][GRANTED_TO_ANNOTATION] = Value::Null;
                }
                if clear {
                    patch["metadata"]["labels"] = json!({ ASSIGNED_TO_LABEL: null });
                    patch["metadata"]["annotations"][CLAIMED_AT_ANNOTATION] = Value::Null;
                }
                if let Some(uid) = &plan.last_session {
                    patch["metadata"]["annotations"][LAST_SESSION_ANNOTATION] = json!(uid);
                }
                // A hand-over: the label follows the Lease at once (if it is still the one
                // judged), access once the last session ended.
                if let Some(next) = plan
                    .handover
                    .as_ref()
                    .filter(|_| vm_facts(fresh).label == label)
                {
                    patch["metadata"]["labels"] = json!({ ASSIGNED_TO_LABEL: next.label });
                    patch["metadata"]["annotations"][CLAIMED_AT_ANNOTATION] =
                        json!(next.claimed_at);
                    patch["metadata"]["annotations"][BROKER_REASON_ANNOTATION] =
                        json!(handover_reason(member));
                }
                Some(patch)
            };
            written = self.patch_vm(vm, patch).await?;
            if written == VmWrite::Written {
                done.push(if plan.clear_label {
                    "label cleared".into()
                } else {
                    "claim marks removed".into()
                });
            }
        }
        if reset {
            if written == VmWrite::Declined {
                return Ok(Some(CHANGED_RETRY));
            }
            // The member taken for removal (the pool loop deletes it and clones it again) once
            // it carries no label: a take the pool loop races (it gives back a broker Lease it
            // sees before the member's mark) is then finished by the pool loop itself. A
            // reclaimed Lease was deleted above, so one is created; a Lease without a holder is
            // replaced.
            let lease =
                lease.filter(|l| plan.reclaim.is_none() && l.metadata.deletion_timestamp.is_none());
            if !take_for_removal(self.ctx, namespace, member, Removal::Reset, lease).await? {
                return Ok(Some(CHANGED_RETRY));
            }
            done.push("taken for a reset (deleted and cloned again from the golden VM)".into());
            let last = |_: &VirtualMachine| {
                Some(json!({ "metadata": { "annotations": { GRANTED_TO_ANNOTATION: null } } }))
            };
            // Gone already, or going: nothing more to write.
            self.patch_vm(vm, last).await?;
        }
        // A console cut alone is no news: a reconcile on a store lagging behind this broker's
        // own teardown cuts again (the VM still stopping) but changes nothing else.
        let changed = done.iter().any(|d| d != CONSOLE_CUT);
        if let (Some(next), Some(event), true) = (&plan.handover, plan.event, changed) {
            let previous = shown(plan.holder.as_deref().unwrap_or("(unknown)"));
            let user = shown(&next.holder);
            let pool = self.target.pool;
            let note = format!(
                "{member} passed from {previous} to {user}: {}; restarted {member} so that \
                 {previous}'s open streams end; access goes to {user} once that session has \
                 ended (user {user}, member {member}, pool {pool})",
                done.join(", ")
            );
            self.record(vm, event, &next.holder, None, note).await;
        } else if let (Some(event), true) = (plan.event, changed) {
            let user = plan.holder.as_deref().unwrap_or("(unknown)");
            let shown_user = shown(user);
            let pool = self.target.pool;
            let what = match (event, &plan.why) {
                (Reason::Reclaimed, Some(why)) => format!("was reclaimed ({why})"),
                (Reason::Reclaimed, None) => "expired and was reclaimed".into(),
                (_, Some(why)) => format!("ended ({why})"),
                _ => "ended".into(),
            };
            let note = format!(
                "{shown_user}'s claim on {member} {what}: {} (user {shown_user}, member \
                 {member}, pool {pool})",
                done.join(", ")
            );
            let why = plan.reclaim_why.map(ReclaimWhy::as_str);
            self.record(vm, event, user, why, note).await;
        }
        Ok((written == VmWrite::Declined).then_some(CHANGED_RETRY))
    }

    /// Whether the member's claim Lease on the API server is still `seen` (the store's copy;
    /// `None`: no Lease), compared by resourceVersion.
    ///
    /// Errors: the Lease could not be read.
    async fn lease_is_still(&self, seen: Option<&ClaimLease>) -> anyhow::Result<bool> {
        let Target {
            namespace, member, ..
        } = self.target;
        let leases: Api<ClaimLease> = Api::namespaced(self.ctx.client.clone(), namespace);
        let name = lease_name(member);
        let now = leases
            .get_opt(&name)
            .await
            .with_context(|| format!("read Lease {name} in namespace \"{namespace}\""))?;
        let version = |l: Option<&ClaimLease>| l.and_then(|l| l.metadata.resource_version.clone());
        Ok(version(now.as_ref()) == version(seen))
    }

    /// Deletes the claim Lease with resourceVersion `rv` as precondition: what was done, or
    /// `None` when it changed or went meanwhile (409, 404).
    ///
    /// Errors: the delete failed otherwise.
    async fn delete_lease(&self, rv: &str) -> anyhow::Result<Option<String>> {
        let Target {
            namespace, member, ..
        } = self.target;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(rv.to_owned()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        // Read leniently: the answer may be the Lease with the times that made it reclaimed.
        let leases: Api<ClaimLease> = Api::namespaced(self.ctx.client.clone(), namespace);
        match leases.delete(&lease_name(member), &params).await {
            Ok(answer) => {
                let kept = answer
                    .left()
                    .and_then(|l| l.metadata.finalizers)
                    .filter(|f| !f.is_empty());
                Ok(Some(match kept {
                    Some(finalizers) => format!(
                        "Lease deleted (finalizers [{}] keep it until an administrator removes \
                         them)",
                        finalizers.join(", ")
                    ),
                    None => "Lease deleted".into(),
                }))
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(None),
            Err(e) => Err(e).with_context(|| {
                format!(
                    "reclaim Lease {} in namespace \"{namespace}\"",
                    lease_name(member)
                )
            }),
        }
    }
}

/// The reason left on a member handed over while it ran, until its new holder is granted.
fn handover_reason(member: &str) -> String {
    format!(
        "waiting for the last session on {member} to end: it was handed over and is restarting; \
         access follows then"
    )
}
