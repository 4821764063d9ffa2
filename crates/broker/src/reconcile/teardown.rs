//! A claim that ended: reclaim its Lease, revoke, cut, stop, clear.

use anyhow::Context as _;
use jiff::SignedDuration;
use kube::api::{Api, DeleteParams, Preconditions};
use serde_json::{Value, json};
use vdi_core::labels::{
    ASSIGNED_TO_LABEL, BROKER_REASON_ANNOTATION, CLAIMED_AT_ANNOTATION, GRANTED_TO_ANNOTATION,
    lease_name,
};
use vdi_core::lease::ClaimLease;
use vdi_core::resources::VirtualMachine;

use super::{CHANGED_RETRY, CONSOLE_CUT, Member, VmWrite, vm_facts};
use crate::decide::{Reason, TeardownPlan, shown};
use crate::grant::Target;

impl Member<'_> {
    /// The claim ended: reclaim its Lease, revoke, cut, stop, clear; an Event naming what was
    /// done, if anything was.
    pub(super) async fn teardown(
        &self,
        plan: &TeardownPlan,
        vm: &VirtualMachine,
    ) -> anyhow::Result<Option<SignedDuration>> {
        let Target {
            namespace, member, ..
        } = self.target;
        let mut done: Vec<String> = Vec::new();
        if let Some(rv) = &plan.reclaim {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(rv.clone()),
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
                    done.push(match kept {
                        Some(finalizers) => format!(
                            "Lease deleted (finalizers [{}] keep it until an administrator \
                             removes them)",
                            finalizers.join(", ")
                        ),
                        None => "Lease deleted".into(),
                    });
                }
                // Renewed, taken over or deleted meanwhile: decide again on what is there now.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    return Ok(Some(CHANGED_RETRY));
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "reclaim Lease {} in namespace \"{namespace}\"",
                            lease_name(member)
                        )
                    });
                }
            }
        }
        if plan.delete_grant && self.delete_grant().await? {
            done.push("access revoked".into());
        }
        if plan.cut_console && self.cut_console().await {
            done.push(CONSOLE_CUT.into());
        }
        if plan.stop {
            let api = Api::<VirtualMachine>::namespaced(self.ctx.client.clone(), namespace);
            if let Some(fresh) = api
                .get_opt(member)
                .await
                .with_context(|| format!("read VirtualMachine {member}"))?
            {
                let action = vdi_core::claim::stop(&self.ctx.client, namespace, &fresh).await?;
                tracing::info!(namespace, member, ?action, "stop");
                if action == vdi_core::claim::PowerAction::Stopped {
                    done.push("VM stopped (every open stream ends with it)".into());
                }
            }
        }
        let mut written = VmWrite::AlreadySo;
        if plan.write_vm {
            let label = vm_facts(vm).label;
            let clear_label = plan.clear_label;
            let reason = plan.reason.as_deref();
            let patch = |fresh: &VirtualMachine| {
                // The label is removed only if it is still the one judged to be the claim's.
                let clear = clear_label && vm_facts(fresh).label == label;
                let mut patch = json!({ "metadata": { "annotations": {
                    GRANTED_TO_ANNOTATION: null,
                    BROKER_REASON_ANNOTATION: reason,
                } } });
                if clear {
                    patch["metadata"]["labels"] = json!({ ASSIGNED_TO_LABEL: null });
                    patch["metadata"]["annotations"][CLAIMED_AT_ANNOTATION] = Value::Null;
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
        // A console cut alone is no news: a reconcile on a store lagging behind this broker's
        // own teardown cuts again (the VM still stopping) but changes nothing else.
        let changed = done.iter().any(|d| d != CONSOLE_CUT);
        if let (Some(event), true) = (plan.event, changed) {
            let user = plan.holder.as_deref().unwrap_or("(unknown)");
            let shown_user = shown(user);
            let pool = self.target.pool;
            let what = match (event, &plan.why) {
                (Reason::Reclaimed, Some(why)) => format!("was reclaimed ({why})"),
                (Reason::Reclaimed, None) => "expired and was reclaimed".into(),
                _ => "ended".into(),
            };
            let note = format!(
                "{shown_user}'s claim on {member} {what}: {} (user {shown_user}, member \
                 {member}, pool {pool})",
                done.join(", ")
            );
            self.record(vm, event, user, note).await;
        }
        Ok((written == VmWrite::Declined).then_some(CHANGED_RETRY))
    }
}
