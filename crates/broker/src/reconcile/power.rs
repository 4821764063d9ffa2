//! What the end of a claim does to the member's power (`onRelease`): `keep` stops it (an
//! unmanaged pool's only way), `restart` restarts it (KubeVirt's `restart` subresource: a new
//! VMI, so every open stream of the last holder ends; the member stays running, free).

use anyhow::Context as _;
use kube::api::Api;
use vdi_core::claim::PowerAction;
use vdi_core::resources::VirtualMachine;

use super::{Member, vm_facts};
use crate::grant::Target;

impl Member<'_> {
    /// The member read whole (the store keeps it trimmed), if it still exists.
    ///
    /// Errors: the read failed.
    pub(super) async fn read_vm(&self) -> anyhow::Result<Option<VirtualMachine>> {
        let Target {
            namespace, member, ..
        } = self.target;
        Api::<VirtualMachine>::namespaced(self.ctx.client.clone(), namespace)
            .get_opt(member)
            .await
            .with_context(|| format!("read VirtualMachine {member} in namespace \"{namespace}\""))
    }

    /// Stops the member; what was done, if anything.
    ///
    /// Errors: it cannot be read, or KubeVirt refused the stop.
    pub(super) async fn stop(&self) -> anyhow::Result<Option<String>> {
        let Target {
            namespace, member, ..
        } = self.target;
        let Some(fresh) = self.read_vm().await? else {
            return Ok(None);
        };
        let action = vdi_core::claim::stop(&self.ctx.client, namespace, &fresh).await?;
        tracing::info!(namespace, member, ?action, "stop");
        Ok((action == PowerAction::Stopped)
            .then(|| "VM stopped (every open stream ends with it)".into()))
    }

    /// Restarts a released member, only while the claim's marks are still on it (read fresh)
    /// or its grant was `revoked` just now: a store lagging behind this broker's own teardown
    /// must not restart the next holder's desktop. A member that does not run stays as it is.
    /// What was done, if anything.
    ///
    /// Errors: it cannot be read, or KubeVirt refused the restart.
    pub(super) async fn restart_released(&self, revoked: bool) -> anyhow::Result<Option<String>> {
        let Target {
            namespace, member, ..
        } = self.target;
        let Some(fresh) = self.read_vm().await? else {
            return Ok(None);
        };
        if !revoked && vm_facts(&fresh).granted_to.is_none() {
            return Ok(None);
        }
        let restarted = vdi_core::claim::restart(&self.ctx.client, namespace, member).await?;
        tracing::info!(namespace, member, restarted, "restart on release");
        Ok(restarted
            .then(|| "VM restarted (every open stream ends with it; it stays running)".into()))
    }
}
