//! What the end of a claim does to the member's power (`onRelease`): `keep` stops it (an
//! unmanaged pool's only way), or restarts it when the pool's warm buffer wants it running
//! ([`vdi_core::policy::plan::stays_warm`]); `restart` restarts it (KubeVirt's `restart`
//! subresource: a new VMI, so every open stream of the last holder ends; the member stays
//! running, free).

use anyhow::Context as _;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use vdi_core::claim::PowerAction;
use vdi_core::policy::plan::{index_of, stays_warm};
use vdi_core::resources::VirtualMachine;

use super::{Member, vm_facts};
use crate::context::PoolKey;
use crate::grant::Target;
use crate::pool::apply::gather;

/// What a restart on release ([`Member::restart_released`]) did, for `onRelease: restart`.
pub(super) const RESTARTED: &str =
    "VM restarted (every open stream ends with it; it stays running)";

/// What a restart on release did for `onRelease: keep` in a pool whose warm buffer wants the
/// member running: a fresh boot instead of a stop and a start.
pub(super) const RESTARTED_WARM: &str = "VM restarted to stay warm (every open stream ends with \
     it; its disk kept; the pool keeps its lowest free members running)";

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

    /// Whether the member, its claim ended, is one the pool's warm buffer keeps running (a
    /// managed pool whose policy reads; [`vdi_core::policy::plan::stays_warm`] over the
    /// stores' view of the pool).
    pub(super) fn stays_warm(&self) -> bool {
        let Target {
            namespace,
            member,
            pool,
        } = self.target;
        let key = PoolKey {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        };
        let policy = self
            .ctx
            .stores
            .pools
            .get(&ObjectRef::new(pool).within(namespace))
            .and_then(|p| p.policy().ok());
        let (Some(policy), Some(index)) = (policy, index_of(pool, member)) else {
            return false;
        };
        let seen = gather(self.ctx, &key).seen(self.ctx.clock.now(), self.ctx.margin);
        stays_warm(policy.size, policy.warm, &seen, index)
    }

    /// Restarts a released member, only while the claim's marks are still on it (read fresh)
    /// or its grant was `revoked` just now: a store lagging behind this broker's own teardown
    /// must not restart the next holder's desktop. A member that does not run stays as it is.
    /// What was done (`done`), if anything.
    ///
    /// Errors: it cannot be read, or KubeVirt refused the restart.
    pub(super) async fn restart_released(
        &self,
        revoked: bool,
        done: &str,
    ) -> anyhow::Result<Option<String>> {
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
        Ok(restarted.then(|| done.to_owned()))
    }
}
