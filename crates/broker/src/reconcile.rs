//! One member's reconcile: read its VM, claim Lease and grant from the reflector stores, ask
//! [`crate::decide`] what to do, and do it against the API server.
//!
//! Every write is idempotent and conflict-safe: grants are server-side applied (field manager
//! `corral-vdi-broker`) only when they differ from what the broker writes; a stale Lease is
//! deleted with its resourceVersion as precondition; the VM is written with one merge patch
//! that touches only the broker's keys and carries the resourceVersion read (on a 409 the VM is
//! read again and the patch rebuilt, or given up when the member changed under it). An Event is
//! recorded only after the write it reports succeeded, so a reconcile that finds the work done
//! records nothing.

use anyhow::Context as _;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use vdi_core::clock::ServerClock;
use vdi_core::labels::{
    ASSIGNED_TO_LABEL, BROKER_NAME, BROKER_REASON_ANNOTATION, CLAIMED_AT_ANNOTATION,
    GRANTED_TO_ANNOTATION, POOL_LABEL, grant_name, lease_name,
};
use vdi_core::lease::{ClaimLease, lease_view};
use vdi_core::resources::VirtualMachine;
use vdi_core::stream::Subresource;

use crate::decide::{
    ConflictPlan, GrantFacts, GrantPlan, MemberFacts, Plan, Reason, TeardownPlan, VmFacts, decide,
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
/// The most characters an Event's note may have (events.k8s.io/v1: 1 kB).
const NOTE_MAX: usize = 1000;

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
    let facts = MemberFacts {
        vm: vm.as_deref().map(vm_facts),
        lease: view.as_ref(),
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
        Plan::Conflict(plan) => match vm {
            Some(vm) => {
                member
                    .conflict(&plan, &vm, holder.unwrap_or_default())
                    .await?
            }
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
                (!member.patch_vm(&vm, patch).await?).then_some(CHANGED_RETRY)
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
    /// An active claim: bind, cut the previous holder's console, start, label; then the Event.
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
        if plan.previous.is_some() {
            self.cut_console().await;
        }
        let mut failure = None;
        if plan.start {
            failure = self.start().await?;
        }
        let reason = failure.as_deref();
        let reason_changed = vm_facts(vm).reason != reason;
        let owed = reason.is_some() && reason_changed;
        let mut written = true;
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
        if !written {
            return Ok(Some(CHANGED_RETRY));
        }
        let user = &plan.holder;
        if let Some(event) = plan.event {
            let note = match (event, &plan.previous) {
                (Reason::HolderChanged, Some(previous)) => format!(
                    "{member} passed from {previous} to {user}: access moved to {user}, \
                     {previous}'s console cut (user {user}, member {member}, pool {})",
                    self.target.pool
                ),
                _ => format!(
                    "access to {member} granted to {user} (user {user}, member {member}, pool {})",
                    self.target.pool
                ),
            };
            self.record(vm, event, user, note).await;
        }
        match failure {
            Some(why) => {
                if owed {
                    let note = format!(
                        "{member} claimed by {user} cannot start: {why} (user {user}, member \
                         {member}, pool {})",
                        self.target.pool
                    );
                    self.record(vm, Reason::StartFailed, user, note).await;
                }
                tracing::debug!(namespace, member, "start retried in {START_RETRY}");
                Ok(Some(START_RETRY))
            }
            None => Ok(None),
        }
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
        let refusal = vdi_core::claim::StartCheck::new(&self.ctx.client)
            .refusal(&vm)
            .await;
        let refusal = match refusal {
            Ok(Some(refusal)) => Some(refusal),
            Ok(None) => None,
            Err(e) => return Ok(Some(sentence(&e))),
        };
        if let Some(refusal) = refusal {
            return Ok(Some(sentence(&refusal)));
        }
        match vdi_core::claim::start(&self.ctx.client, namespace, &vm).await {
            Ok(action) => {
                tracing::info!(namespace, member, ?action, "start");
                Ok(None)
            }
            Err(e) => Ok(Some(sentence(&e))),
        }
    }

    /// Label and Lease disagree: no grant, the reason, an Event.
    async fn conflict(
        &self,
        plan: &ConflictPlan,
        vm: &VirtualMachine,
        holder: &str,
    ) -> anyhow::Result<Option<SignedDuration>> {
        if plan.delete_grant {
            self.delete_grant().await?;
            self.cut_console().await;
        }
        if plan.write_vm {
            let reason = plan.reason.as_str();
            let patch = |_: &VirtualMachine| {
                Some(json!({ "metadata": { "annotations": {
                    BROKER_REASON_ANNOTATION: reason,
                    GRANTED_TO_ANNOTATION: null,
                } } }))
            };
            if !self.patch_vm(vm, patch).await? {
                return Ok(Some(CHANGED_RETRY));
            }
            let note = format!(
                "{reason} (user {holder}, member {}, pool {})",
                self.target.member, self.target.pool
            );
            self.record(vm, Reason::Conflict, holder, note).await;
        }
        Ok(None)
    }

    /// The claim ended: reclaim its stale Lease, revoke, cut, stop, clear; an Event.
    async fn teardown(
        &self,
        plan: &TeardownPlan,
        vm: &VirtualMachine,
    ) -> anyhow::Result<Option<SignedDuration>> {
        let Target {
            namespace, member, ..
        } = self.target;
        if let Some(rv) = &plan.reclaim {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(rv.clone()),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            let leases: Api<Lease> = Api::namespaced(self.ctx.client.clone(), namespace);
            match leases.delete(&lease_name(member), &params).await {
                Ok(_) => {}
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
        if plan.delete_grant {
            self.delete_grant().await?;
        }
        if plan.cut_console {
            self.cut_console().await;
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
            }
        }
        if plan.write_vm {
            let label = vm_facts(vm).label;
            let clear_label = plan.clear_label;
            let patch = |fresh: &VirtualMachine| {
                // The label is removed only if it is still the one judged to be the claim's.
                let clear = clear_label && vm_facts(fresh).label == label;
                let mut patch = json!({ "metadata": { "annotations": {
                    GRANTED_TO_ANNOTATION: null,
                    BROKER_REASON_ANNOTATION: null,
                } } });
                if clear {
                    patch["metadata"]["labels"] = json!({ ASSIGNED_TO_LABEL: null });
                    patch["metadata"]["annotations"][CLAIMED_AT_ANNOTATION] = Value::Null;
                }
                Some(patch)
            };
            if !self.patch_vm(vm, patch).await? {
                return Ok(Some(CHANGED_RETRY));
            }
        }
        if let Some(event) = plan.event {
            let user = plan.holder.as_deref().unwrap_or("(unknown)");
            let pool = self.target.pool;
            let done: Vec<&str> = [
                (plan.reclaim.is_some(), "Lease deleted"),
                (plan.delete_grant, "access revoked"),
                (plan.cut_console, "console cut"),
                (plan.stop, "VM stopped"),
                (plan.clear_label, "label cleared"),
            ]
            .into_iter()
            .filter_map(|(done, what)| done.then_some(what))
            .collect();
            let what = if event == Reason::Reclaimed {
                "expired and was reclaimed"
            } else {
                "ended"
            };
            let note = format!(
                "{user}'s claim on {member} {what}: {} (user {user}, member {member}, pool {pool})",
                done.join(", ")
            );
            self.record(vm, event, user, note).await;
        }
        Ok(None)
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
    async fn delete_grant(&self) -> anyhow::Result<()> {
        let name = grant_name(self.target.member);
        let namespace = self.target.namespace;
        let bindings: Api<RoleBinding> = Api::namespaced(self.ctx.client.clone(), namespace);
        let roles: Api<Role> = Api::namespaced(self.ctx.client.clone(), namespace);
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
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("delete grant {name} in namespace \"{namespace}\"")
                    });
                }
            }
        }
        Ok(())
    }

    /// Ends whoever views the member's console: opens `vnc` without preserveSession (virt-api
    /// then disconnects the current viewer) and closes it. A member without a VMI has nobody to
    /// cut; a failure is logged, never fatal (the grant is already gone).
    async fn cut_console(&self) {
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
            }
            Err(vdi_core::Error::Stream(refusal)) if refusal.status == 404 => {
                tracing::debug!(namespace, member, "no console to cut: not running");
            }
            Err(e) => tracing::warn!(namespace, member, error = %e, "cannot cut the console"),
        }
    }

    /// Merge-patches the VM with what `build` makes of it, carrying its resourceVersion; on a
    /// 409 reads it again and rebuilds (three tries). `false` when `build` declines or the VM
    /// kept changing or is gone.
    ///
    /// Errors: the patch failed for another reason.
    async fn patch_vm(
        &self,
        vm: &VirtualMachine,
        build: impl Fn(&VirtualMachine) -> Option<Value>,
    ) -> anyhow::Result<bool> {
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
                return Ok(false);
            };
            patch["metadata"]["resourceVersion"] = json!(current.resource_version());
            match api.patch(member, &params, &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    match api.get_opt(member).await.with_context(|| {
                        format!("read VirtualMachine {member} in namespace \"{namespace}\"")
                    })? {
                        Some(vm) => fresh = Some(vm),
                        None => return Ok(false),
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("write VirtualMachine {member} in namespace \"{namespace}\"")
                    });
                }
            }
        }
        Ok(false)
    }

    /// Records an Event on the member's VM (events.k8s.io/v1, reportingController
    /// `corral-vdi-broker`) and the same as a log line. A failed Event is logged, never fatal.
    async fn record(&self, vm: &VirtualMachine, reason: Reason, user: &str, note: String) {
        let Target {
            namespace,
            member,
            pool,
        } = self.target;
        let warning = matches!(reason, Reason::Conflict | Reason::StartFailed);
        // One line per Event, at warning level for the ones that say something is wrong.
        macro_rules! log {
            ($level:ident) => {
                tracing::$level!(
                    reason = reason.as_str(),
                    user,
                    member,
                    pool,
                    namespace,
                    "{note}"
                )
            };
        }
        if warning {
            log!(warn);
        } else {
            log!(info);
        }
        let note = if note.len() > NOTE_MAX {
            let mut end = NOTE_MAX;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &note[..end])
        } else {
            note
        };
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.as_str().into(),
            note: Some(note),
            action: match reason {
                Reason::Claimed | Reason::HolderChanged => "Grant",
                Reason::Released | Reason::Reclaimed => "Revoke",
                Reason::Conflict => "Refuse",
                Reason::StartFailed => "Start",
            }
            .into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &vm.object_ref(&())).await {
            tracing::warn!(namespace, member, error = %e, "cannot record Event {}", reason.as_str());
        }
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
