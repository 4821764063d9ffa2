//! The broker's writes for one member: grant objects, the VM's claim marks, the console cut,
//! Events.

use anyhow::Context as _;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use vdi_core::audit::Facts;
use vdi_core::names::grant_name;
use vdi_core::resources::VirtualMachine;
use vdi_core::stream::Subresource;

use super::{FIELD_MANAGER, Member, VmWrite};
use crate::decide::Reason;
use crate::events::{self, Act};
use crate::grant::Target;

impl Member<'_> {
    /// Server-side applies a grant object (field manager `corral-vdi-broker`, forced: the
    /// broker owns these objects).
    pub(super) async fn apply<K>(&self, object: &K) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), self.target.namespace);
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .with_context(|| {
            format!(
                "apply {} {name} in namespace \"{}\"",
                K::kind(&()),
                self.target.namespace
            )
        })?;
        Ok(())
    }

    /// Deletes the RoleBinding (which revokes at once), then the Role; absent ones are fine.
    /// Whether either existed.
    pub(super) async fn delete_grant(&self) -> anyhow::Result<bool> {
        let name = grant_name(self.target.member);
        let namespace = self.target.namespace;
        let bindings: Api<RoleBinding> = Api::namespaced(self.ctx.client.clone(), namespace);
        let roles: Api<Role> = Api::namespaced(self.ctx.client.clone(), namespace);
        let mut existed = false;
        for deleted in [
            bindings
                .delete(&name, &DeleteParams::default())
                .await
                .map(|_| ()),
            roles
                .delete(&name, &DeleteParams::default())
                .await
                .map(|_| ()),
        ] {
            match deleted {
                Ok(()) => existed = true,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("delete grant {name} in namespace \"{namespace}\"")
                    });
                }
            }
        }
        Ok(existed)
    }

    /// Ends whoever views the member's console: opens `vnc` without preserveSession (virt-api
    /// then disconnects the current viewer) and closes it. A member without a VMI has nobody to
    /// cut; a failure is logged, never fatal (the grant is already gone). Whether a console
    /// was open to cut (virt-api answered the upgrade).
    pub(super) async fn cut_console(&self) -> bool {
        let Target {
            namespace, member, ..
        } = self.target;
        let vnc = Subresource::Vnc {
            preserve_session: false,
        };
        match vdi_core::stream::open(&self.ctx.streams, namespace, member, vnc).await {
            Ok(mut stream) => {
                let closed =
                    tokio::time::timeout(std::time::Duration::from_secs(2), stream.close(None));
                let _ = closed.await;
                tracing::info!(namespace, member, "console cut");
                true
            }
            Err(vdi_core::Error::Stream(refusal)) if refusal.status == 404 => {
                tracing::debug!(namespace, member, "no console to cut: not running");
                false
            }
            Err(e) => {
                tracing::warn!(namespace, member, error = %e, "cannot cut the console");
                false
            }
        }
    }

    /// Merge-patches the VM with what `build` makes of it, carrying its resourceVersion; on a
    /// 409 reads it again and rebuilds (three tries). [`VmWrite::AlreadySo`] when the VM
    /// already holds what the patch writes (no request), [`VmWrite::Declined`] when `build`
    /// declines or the VM kept changing or is gone.
    ///
    /// Errors: the patch failed for another reason.
    pub(super) async fn patch_vm(
        &self,
        vm: &VirtualMachine,
        build: impl Fn(&VirtualMachine) -> Option<Value>,
    ) -> anyhow::Result<VmWrite> {
        let Target {
            namespace, member, ..
        } = self.target;
        let api: Api<VirtualMachine> = Api::namespaced(self.ctx.client.clone(), namespace);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let mut fresh: Option<VirtualMachine> = None;
        for _ in 0..3 {
            let current = fresh.as_ref().unwrap_or(vm);
            let Some(mut patch) = build(current) else {
                return Ok(VmWrite::Declined);
            };
            if !changes(current, &patch) {
                return Ok(VmWrite::AlreadySo);
            }
            patch["metadata"]["resourceVersion"] = json!(current.resource_version());
            match api.patch(member, &params, &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(VmWrite::Written),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    match api.get_opt(member).await.with_context(|| {
                        format!("read VirtualMachine {member} in namespace \"{namespace}\"")
                    })? {
                        Some(vm) => fresh = Some(vm),
                        None => return Ok(VmWrite::Declined),
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(VmWrite::Declined),
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("write VirtualMachine {member} in namespace \"{namespace}\"")
                    });
                }
            }
        }
        Ok(VmWrite::Declined)
    }

    /// Records an Event on the member's VM and the same as a log line ([`crate::events`]).
    /// `why`: the reclaim rule's word (`maxSession`, …), if one is the reason.
    pub(super) async fn record(
        &self,
        vm: &VirtualMachine,
        reason: Reason,
        user: &str,
        why: Option<&str>,
        note: String,
    ) {
        self.record_by(vm, reason, user, None, why, note).await;
    }

    /// [`Self::record`] of an act someone else asked for on `user`'s behalf (`by`: an
    /// administrator who assigned them the desktop).
    pub(super) async fn record_by(
        &self,
        vm: &VirtualMachine,
        reason: Reason,
        user: &str,
        by: Option<&str>,
        why: Option<&str>,
        note: String,
    ) {
        let Target {
            namespace, pool, ..
        } = self.target;
        let act = Act {
            reason: reason.as_str(),
            action: match reason {
                Reason::Claimed | Reason::HolderChanged => "Grant",
                Reason::Released | Reason::Reclaimed => "Revoke",
                Reason::Conflict | Reason::UnreadableClaim | Reason::NotGranted => "Refuse",
                Reason::StartFailed => "Start",
                Reason::ReclaimSoon => "Notify",
            },
            warning: matches!(
                reason,
                Reason::Conflict
                    | Reason::UnreadableClaim
                    | Reason::StartFailed
                    | Reason::NotGranted
            ),
            facts: Facts {
                user: Some(user.to_owned()),
                by: by.map(str::to_owned),
                pool: pool.to_owned(),
                why: why.map(str::to_owned),
            },
            text: note,
        };
        events::record(&self.recorder, &vm.object_ref(&()), namespace, act).await;
    }
}

/// Whether merge patch `patch` of labels and annotations changes anything on `vm` (a `null`
/// removes a key).
fn changes(vm: &VirtualMachine, patch: &Value) -> bool {
    [("labels", vm.labels()), ("annotations", vm.annotations())]
        .into_iter()
        .any(|(section, current)| {
            patch["metadata"][section].as_object().is_some_and(|keys| {
                keys.iter()
                    .any(|(key, value)| current.get(key).map(String::as_str) != value.as_str())
            })
        })
}
