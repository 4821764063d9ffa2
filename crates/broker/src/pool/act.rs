//! The pool loop's writes ([`super::apply`]): finishing and taking removals, the warm buffer,
//! and the grow. Every write is conditional on what was read (uid or resourceVersion
//! preconditions, a fresh read before a start or stop), so a member that changed meanwhile is
//! left for the next reconcile.

use anyhow::Context as _;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use vdi_core::claim::PowerAction;
use vdi_core::lease::ClaimLease;
use vdi_core::names::{ASSIGNED_TO_LABEL, BROKER_NAME, REMOVING_ANNOTATION, lease_name};
use vdi_core::pool::{CreateOptions, CreatePool, add_members};
use vdi_core::resources::VirtualMachine;

use vdi_core::policy::plan::{LeaseSeen, Plan, Removal, lease_seen};

use super::apply::{Members, Work, vm_ref};
use super::take::take_for_removal;

/// Delete with these preconditions; 404 and 409 (gone, or changed) are no error.
async fn delete<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<String>,
    rv: Option<String>,
) -> kube::Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: rv,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

impl Work<'_> {
    /// Does `planned` (for a pool that keeps `warm` free members running) but the grow;
    /// returns the errors met (each step is tried).
    pub(super) async fn act(
        &self,
        planned: &Plan,
        members: &Members,
        warm: u32,
    ) -> Vec<anyhow::Error> {
        let ns = self.key.namespace.as_str();
        let client = &self.ctx.client;
        let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
        let leases: Api<ClaimLease> = Api::namespaced(client.clone(), ns);
        let mut errors = Vec::new();
        for &i in &planned.delete_vms {
            let Some(vm) = members.vms.get(&i) else {
                continue;
            };
            let member = self.member(i);
            let why = vm
                .annotations()
                .get(REMOVING_ANNOTATION)
                .cloned()
                .unwrap_or_default();
            match delete(&vms, &member, vm.uid(), None).await {
                Ok(true) => {
                    let text = format!(
                        "{member} deleted ({why}){}",
                        if why == Removal::Reset.as_str() {
                            "; it is cloned again from the golden VM once its Lease is gone"
                        } else {
                            ""
                        }
                    );
                    self.record(
                        &vm_ref(ns, &member),
                        "MemberRemoved",
                        "Delete",
                        false,
                        Some(&why),
                        text,
                    )
                    .await;
                }
                Ok(false) => {}
                Err(e) => errors.push(anyhow::Error::new(e).context(format!(
                    "delete VirtualMachine {member} in namespace \"{ns}\""
                ))),
            }
        }
        for &i in &planned.delete_leases {
            let Some(lease) = members.leases.get(&i) else {
                continue;
            };
            let name = lease_name(&self.member(i));
            if let Err(e) = delete(&leases, &name, None, lease.resource_version()).await {
                errors.push(
                    anyhow::Error::new(e)
                        .context(format!("delete Lease {name} in namespace \"{ns}\"")),
                );
            }
        }
        for &(i, why) in &planned.take {
            let member = self.member(i);
            let lease = members.leases.get(&i).map(|l| l.as_ref());
            if let Err(e) = take_for_removal(self.ctx, ns, &member, why, lease).await {
                errors.push(e);
            }
        }
        for &i in &planned.unmark {
            let member = self.member(i);
            let patch = json!({ "metadata": { "annotations": { REMOVING_ANNOTATION: null } } });
            if let Err(e) = vms.patch(&member, &params(), &Patch::Merge(&patch)).await {
                errors
                    .push(anyhow::Error::new(e).context(format!("unmark VirtualMachine {member}")));
            }
        }
        let power = (planned.start.iter().map(|&i| (i, true)))
            .chain(planned.stop.iter().map(|&i| (i, false)));
        for (i, start) in power {
            if let Err(e) = self.power(&vms, &leases, i, start, warm).await {
                errors.push(e);
            }
        }
        errors
    }

    /// Starts (`start`) or stops member `index` of the warm buffer (`warm` members), read fresh
    /// first: left alone if it is labelled or its Lease is held by now. A start or stop that
    /// KubeVirt accepted is recorded (`WarmStarted`, `WarmStopped`).
    async fn power(
        &self,
        vms: &Api<VirtualMachine>,
        leases: &Api<ClaimLease>,
        index: u32,
        start: bool,
        warm: u32,
    ) -> anyhow::Result<()> {
        let ns = self.key.namespace.as_str();
        let member = self.member(index);
        let Some(vm) = vms
            .get_opt(&member)
            .await
            .with_context(|| format!("read VirtualMachine {member}"))?
        else {
            return Ok(());
        };
        let lease = leases
            .get_opt(&lease_name(&member))
            .await
            .with_context(|| format!("read Lease {}", lease_name(&member)))?;
        let now = self.ctx.clock.now();
        let held = lease.is_some_and(|l| {
            matches!(
                lease_seen(&l, now, self.ctx.margin),
                LeaseSeen::Claimed | LeaseSeen::Broker | LeaseSeen::Taking
            )
        });
        if held
            || vm
                .labels()
                .get(ASSIGNED_TO_LABEL)
                .is_some_and(|l| !l.is_empty())
        {
            return Ok(());
        }
        let client = &self.ctx.client;
        let action = if start {
            vdi_core::claim::start(client, ns, &vm).await
        } else {
            vdi_core::claim::stop(client, ns, &vm).await
        }
        .with_context(|| {
            format!(
                "{} warm member {member}",
                if start { "start" } else { "stop" }
            )
        })?;
        tracing::info!(namespace = ns, member, ?action, "warm buffer");
        let (reason, verb, text) = match action {
            PowerAction::Started => (
                "WarmStarted",
                "Start",
                format!(
                    "{member} started: the pool keeps {warm} free member{} running (warm), the \
                     lowest first",
                    if warm == 1 { "" } else { "s" }
                ),
            ),
            PowerAction::Stopped => (
                "WarmStopped",
                "Stop",
                format!(
                    "{member} stopped: more free members run than the pool keeps warm ({warm}); \
                     the lowest stay running"
                ),
            ),
            _ => return Ok(()),
        };
        self.record(
            &vm_ref(ns, &member),
            reason,
            verb,
            false,
            Some("warm"),
            text,
        )
        .await;
        Ok(())
    }

    /// Clones members `indices` from `golden`; the failure as one sentence (cause: fix), if any.
    pub(super) async fn grow(&self, golden: &str, indices: &[u32]) -> Option<String> {
        let ns = self.key.namespace.as_str();
        let request = CreatePool {
            namespace: ns.to_owned(),
            name: self.key.pool.clone(),
            golden: golden.to_owned(),
            size: 0,
            options: CreateOptions::default(),
        };
        let (created, failed) = match add_members(&self.ctx.client, &request, indices, |_| {}).await
        {
            Ok(done) => (done.members, None),
            Err(vdi_core::Error::PoolIncomplete(f)) => {
                let why = vdi_core::Error::PoolIncomplete(f.clone());
                (f.created.clone(), Some(why))
            }
            Err(e) => (Vec::new(), Some(e)),
        };
        for member in created {
            let text = format!("{member} cloned from {golden} (stopped, free)");
            self.record(
                &vm_ref(ns, &member),
                "MemberAdded",
                "Create",
                false,
                None,
                text,
            )
            .await;
        }
        failed.map(|e| {
            let text = format!(
                "DesktopPool {} in namespace \"{ns}\" cannot grow: {e}",
                self.key.pool
            );
            match e.suggestion() {
                Some(fix) => format!("{text}: {fix}"),
                None => text,
            }
        })
    }
}

/// The broker's patch parameters.
fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(BROKER_NAME.into()),
        ..PatchParams::default()
    }
}
