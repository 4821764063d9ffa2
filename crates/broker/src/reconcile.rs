//! One member's reconcile: read its VM, claim Lease and grant from the reflector stores, ask
//! [`crate::decide`] what to do, and do it against the API server.
//!
//! Every write is idempotent and conflict-safe: grants are server-side applied (field manager
//! `corral-vdi-broker`) only when they differ from what the broker writes; a stale Lease is
//! deleted with its resourceVersion as precondition; the VM is written with one merge patch
//! that touches only the broker's keys and carries the resourceVersion read (on a 409 the VM is
//! read again and the patch rebuilt, or given up when the member changed under it). An Event is
//! recorded only after the write it reports succeeded and changed something (a patch that finds
//! the VM as it should be sends nothing), so a reconcile that finds the work done, even through
//! a store lagging behind the broker's own writes, records nothing.
//!
//! Streams: a release ends the holder's console at once (a `vnc` opened without
//! preserveSession) and every other stream (`portforward`, `usbredir`) as the VM stops with its
//! VMI. A hand-over to another holder keeps the member for the new holder, so it is restarted
//! (KubeVirt's `restart` subresource: a new VMI) once the binding names the new holder; KubeVirt
//! has no other way to end an established stream.

use anyhow::Context as _;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Recorder, Reporter};
use vdi_core::audit::Facts;

use crate::events::{self, Act};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use vdi_core::clock::ServerClock;
use vdi_core::labels::{
    ASSIGNED_TO_LABEL, BROKER_NAME, BROKER_REASON_ANNOTATION, CLAIMED_AT_ANNOTATION,
    GRANTED_TO_ANNOTATION, POOL_LABEL, grant_name, lease_name,
};
use vdi_core::lease::{ClaimLease, lease_view};
use vdi_core::policy::DesktopPool;
use vdi_core::resources::VirtualMachine;
use vdi_core::stream::Subresource;

use crate::decide::{
    GrantFacts, GrantPlan, MemberFacts, Plan, Reason, RefusalPlan, TeardownPlan, VmFacts, decide,
    shown,
};
use crate::grant::{self, Owner, Target};

/// A member: its namespace and name (the work queue's key).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The member's namespace.
    pub namespace: String,
    /// The member (VM) name.
    pub member: String,
}

/// The cluster as the broker's watches hold it (objects trimmed to what the rules read).
#[derive(Clone)]
pub struct Stores {
    /// Pool members (VMs labelled `corral.dev/vdi-pool`).
    pub vms: Store<VirtualMachine>,
    /// Claim Leases (`corral-vdi-<member>`).
    pub leases: Store<ClaimLease>,
    /// The broker's grant Roles.
    pub roles: Store<Role>,
    /// The broker's grant RoleBindings.
    pub bindings: Store<RoleBinding>,
    /// Managed pools' policies (`DesktopPool`, named like their pool, in its namespace).
    pub pools: Store<DesktopPool>,
}

/// What every reconcile shares.
pub struct Context {
    /// The broker's client.
    pub client: Client,
    /// A client without automatic retries, for the `vnc` stream that cuts a console.
    pub streams: Client,
    /// The API server's clock.
    pub clock: ServerClock,
    /// The reclaim margin.
    pub margin: SignedDuration,
    /// This replica's identity (the Events' reportingInstance).
    pub identity: String,
    /// The watched state.
    pub stores: Stores,
}

/// How soon a member is looked at again when a start failed.
const START_RETRY: SignedDuration = SignedDuration::from_secs(30);
/// How soon a member is looked at again when it changed while it was being written.
const CHANGED_RETRY: SignedDuration = SignedDuration::from_secs(1);
/// The field manager of the broker's writes.
const FIELD_MANAGER: &str = BROKER_NAME;
/// What a teardown's Event says of a console it cut.
const CONSOLE_CUT: &str = "console cut";

/// Reconciles the member `key`; returns when to look at it again without an event.
///
/// Errors: a request failed (it is retried by the caller).
pub async fn reconcile(ctx: &Context, key: &Key) -> anyhow::Result<Option<Timestamp>> {
    let Key { namespace, member } = key;
    let stores = &ctx.stores;
    let vm = stores.vms.get(&ObjectRef::new(member).within(namespace));
    let lease = stores
        .leases
        .get(&ObjectRef::new(&lease_name(member)).within(namespace));
    let name = grant_name(member);
    let role = stores.roles.get(&ObjectRef::new(&name).within(namespace));
    let binding = stores
        .bindings
        .get(&ObjectRef::new(&name).within(namespace));
    let now = ctx.clock.now();
    let view = lease.as_deref().map(|l| lease_view(l, now));
    let pool = vm
        .as_deref()
        .and_then(|vm| vm.labels().get(POOL_LABEL).cloned())
        .unwrap_or_default();
    let target = Target {
        namespace,
        member,
        pool: &pool,
    };
    let owner = lease.as_deref().and_then(|l| {
        l.metadata.uid.as_deref().map(|uid| Owner {
            name: l.metadata.name.as_deref().unwrap_or_default(),
            uid,
        })
    });
    let holder = view.as_ref().and_then(|v| v.holder.as_deref());
    let grant_facts = GrantFacts {
        exists: role.is_some() || binding.is_some(),
        bound: binding.as_deref().and_then(grant::bound),
        current: match (owner, holder, &role, &binding) {
            (Some(owner), Some(holder), Some(role), Some(binding)) => {
                grant::role_matches(role, &grant::role(target, owner))
                    && grant::binding_matches(binding, &grant::binding(target, owner, holder))
            }
            _ => false,
        },
    };
    let deleting = lease.as_deref().and_then(|l| {
        l.metadata
            .deletion_timestamp
            .as_ref()
            .map(|_| l.metadata.finalizers.as_deref().unwrap_or_default())
    });
    let facts = MemberFacts {
        vm: vm.as_deref().map(vm_facts),
        lease: view.as_ref(),
        lease_deleting: deleting,
        grant: grant_facts,
        now,
        margin: ctx.margin,
    };
    let decision = decide(member, namespace, &facts);
    let member = Member {
        ctx,
        target,
        recorder: Recorder::new(
            ctx.client.clone(),
            Reporter {
                controller: BROKER_NAME.into(),
                instance: Some(ctx.identity.clone()),
            },
        ),
    };
    let retry = match decision.plan {
        Plan::Nothing => None,
        Plan::Grant(plan) => match (owner, vm) {
            (Some(owner), Some(vm)) => member.grant(&plan, owner, &vm).await?,
            _ => None,
        },
        Plan::Refuse(plan) => match vm {
            Some(vm) => member.refuse(&plan, &vm).await?,
            None => None,
        },
        Plan::Teardown(plan) => match vm {
            Some(vm) => member.teardown(&plan, &vm).await?,
            None => None,
        },
        Plan::ClearReason => match vm {
            Some(vm) => {
                let patch = |_: &VirtualMachine| {
                    Some(
                        json!({ "metadata": { "annotations": { BROKER_REASON_ANNOTATION: null } } }),
                    )
                };
                (member.patch_vm(&vm, patch).await? == VmWrite::Declined).then_some(CHANGED_RETRY)
            }
            None => None,
        },
        Plan::DeleteOrphanGrant => {
            member.delete_grant().await?;
            tracing::info!(namespace, member = %key.member, "deleted the grant of a member that is gone");
            None
        }
    };
    let retry_at = retry.and_then(|r| ctx.clock.now().checked_add(r).ok());
    Ok(match (decision.requeue_at, retry_at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// What the rules read of a VM.
fn vm_facts(vm: &VirtualMachine) -> VmFacts<'_> {
    let annotation = |key: &str| vm.annotations().get(key).map(String::as_str);
    VmFacts {
        label: vm
            .labels()
            .get(ASSIGNED_TO_LABEL)
            .map(String::as_str)
            .filter(|l| !l.is_empty()),
        granted_to: annotation(GRANTED_TO_ANNOTATION).filter(|g| !g.is_empty()),
        claimed_at: annotation(CLAIMED_AT_ANNOTATION),
        reason: annotation(BROKER_REASON_ANNOTATION),
        power: vm.printable_status(),
    }
}

/// One member being reconciled.
struct Member<'a> {
    ctx: &'a Context,
    target: Target<'a>,
    recorder: Recorder,
}

impl Member<'_> {
    /// An active claim: bind; on a hand-over restart the member (every stream of the previous
    /// holder ends with its VMI); start; label; then the Event, if the VM write changed
    /// something.
    async fn grant(
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
        // The binding names the new holder now: end the old holder's open streams.
        let mut fresh = None;
        let mut restarted = None;
        if plan.restart {
            // Read fresh, not from the store: a store lagging behind this broker's own hand-over
            // must not restart the new holder's desktop a second time.
            let api = Api::<VirtualMachine>::namespaced(self.ctx.client.clone(), namespace);
            let Some(now) = api
                .get_opt(member)
                .await
                .with_context(|| format!("read VirtualMachine {member}"))?
            else {
                return Ok(None);
            };
            if vm_facts(&now).granted_to != Some(plan.label.as_str()) {
                match vdi_core::claim::restart(&self.ctx.client, namespace, member).await {
                    Ok(done) => restarted = Some(done),
                    Err(e) => {
                        // At least the console ends; the restart is tried again.
                        self.cut_console().await;
                        return Err(e.into());
                    }
                }
            }
            fresh = Some(now);
        } else if plan.previous.is_some() {
            self.cut_console().await;
        }
        let vm = fresh.as_ref().unwrap_or(vm);
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
                        json!({ "metadata": {
                            "labels": { ASSIGNED_TO_LABEL: encoded },
                            "annotations": {
                                CLAIMED_AT_ANNOTATION: plan.claimed_at,
                                GRANTED_TO_ANNOTATION: encoded,
                                BROKER_REASON_ANNOTATION: reason,
                            },
                        } })
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
                    self.record_grant(vm, plan, event, restarted).await;
                }
                if let (Some(why), true) = (&failure, reason_changed) {
                    let user = shown(&plan.holder);
                    let note = format!(
                        "{member} claimed by {user} cannot start: {why} (user {user}, member \
                         {member}, pool {})",
                        self.target.pool
                    );
                    self.record(vm, Reason::StartFailed, &plan.holder, note)
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

    /// The Event of a grant: `Claimed`, or `HolderChanged` saying how the previous holder's
    /// streams ended (`restarted`: the restart's answer, if one was asked).
    async fn record_grant(
        &self,
        vm: &VirtualMachine,
        plan: &GrantPlan,
        event: Reason,
        restarted: Option<bool>,
    ) {
        let Target { member, pool, .. } = self.target;
        let user = shown(&plan.holder);
        let note = match (event, &plan.previous) {
            (Reason::HolderChanged, Some(previous)) => {
                let previous = shown(previous);
                let ended = match restarted {
                    Some(true) => {
                        format!("restarted {member} so that {previous}'s open streams end")
                    }
                    Some(false) => {
                        format!("{member} was not running, so {previous} had no open streams")
                    }
                    None => format!("{previous}'s console cut"),
                };
                format!(
                    "{member} passed from {previous} to {user}: access moved to {user}; {ended} \
                     (user {user}, member {member}, pool {pool})"
                )
            }
            _ => format!(
                "access to {member} granted to {user} (user {user}, member {member}, pool {pool})"
            ),
        };
        self.record(vm, event, &plan.holder, note).await;
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
    async fn refuse(
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
                    self.record(vm, plan.event, &plan.holder, note).await;
                }
            }
        }
        Ok(None)
    }

    /// The claim ended: reclaim its Lease, revoke, cut, stop, clear; an Event naming what was
    /// done, if anything was.
    async fn teardown(
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

    /// Server-side applies a grant object (field manager `corral-vdi-broker`, forced: the
    /// broker owns these objects).
    async fn apply<K>(&self, object: &K) -> anyhow::Result<()>
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
    async fn delete_grant(&self) -> anyhow::Result<bool> {
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
    async fn cut_console(&self) -> bool {
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
    async fn patch_vm(
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
    async fn record(&self, vm: &VirtualMachine, reason: Reason, user: &str, note: String) {
        let Target {
            namespace, pool, ..
        } = self.target;
        let act = Act {
            reason: reason.as_str(),
            action: match reason {
                Reason::Claimed | Reason::HolderChanged => "Grant",
                Reason::Released | Reason::Reclaimed => "Revoke",
                Reason::Conflict | Reason::UnreadableClaim => "Refuse",
                Reason::StartFailed => "Start",
            },
            warning: matches!(
                reason,
                Reason::Conflict | Reason::UnreadableClaim | Reason::StartFailed
            ),
            facts: Facts {
                user: Some(user.to_owned()),
                pool: pool.to_owned(),
                ..Default::default()
            },
            text: note,
        };
        events::record(&self.recorder, &vm.object_ref(&()), namespace, act).await;
    }
}

/// What became of a VM write ([`Member::patch_vm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VmWrite {
    /// Written.
    Written,
    /// The VM held it already: nothing written (nothing to report).
    AlreadySo,
    /// Not written: the builder declined, or the VM kept changing or is gone.
    Declined,
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
