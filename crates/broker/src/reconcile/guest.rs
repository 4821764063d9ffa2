//! The idle reading of a claimed member's guest ([`crate::idle`]): `corral.dev/vdi-idle-since`
//! written when nobody is logged in, removed when someone is.

use jiff::SignedDuration;
use kube::ResourceExt;
use serde_json::json;
use vdi_core::names::IDLE_SINCE_ANNOTATION;
use vdi_core::resources::VirtualMachine;

use super::{Key, Member, VmWrite};
use crate::grant::Target;
use crate::idle;

impl Member<'_> {
    /// Asks the guest of member `key` who is logged in, unless it was asked less than
    /// [`idle::POLL_INTERVAL`] ago, and writes what it says on `vm`. When to ask again.
    ///
    /// Errors: the VM write failed (an error of the guest's answer is no reading, not an
    /// error).
    pub(super) async fn poll_idle(
        &self,
        key: &Key,
        vm: &VirtualMachine,
    ) -> anyhow::Result<SignedDuration> {
        let Target {
            namespace, member, ..
        } = self.target;
        let polls = &self.ctx.idle;
        let again = |wait: std::time::Duration| {
            SignedDuration::try_from(wait).unwrap_or(SignedDuration::from_secs(30))
        };
        if let Some(wait) = polls.wait(key, std::time::Instant::now()) {
            return Ok(again(wait));
        }
        let permit = polls.permit().await;
        let asked = tokio::time::timeout(
            idle::POLL_TIMEOUT,
            idle::users(&self.ctx.client, namespace, member),
        )
        .await;
        drop(permit);
        let anyone = match asked {
            Ok(Ok(users)) => users.anyone(),
            Ok(Err(e)) => {
                tracing::debug!(namespace, member, error = %e, "no user list from the guest");
                return Ok(again(idle::POLL_INTERVAL));
            }
            Err(_) => {
                tracing::debug!(namespace, member, "the guest's user list timed out");
                return Ok(again(idle::POLL_INTERVAL));
            }
        };
        let since = vdi_core::clock::annotation_time(self.ctx.clock.now());
        let patch = |fresh: &VirtualMachine| {
            let value = match fresh.annotations().get(IDLE_SINCE_ANNOTATION) {
                _ if anyone => None,
                Some(written) => Some(written.clone()),
                None => Some(since.clone()),
            };
            Some(json!({ "metadata": { "annotations": { IDLE_SINCE_ANNOTATION: value } } }))
        };
        if self.patch_vm(vm, patch).await? == VmWrite::Written {
            tracing::info!(
                namespace,
                member,
                anyone,
                "guest user list: {}",
                if anyone {
                    "someone is logged in"
                } else {
                    "nobody is logged in (idle since now)"
                }
            );
        }
        Ok(again(idle::POLL_INTERVAL))
    }
}
