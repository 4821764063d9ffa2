//! Pool delete (SPEC "Pool list / delete"): the members, their Leases, leftover clone objects
//! and VMs this pool's clone objects made that never got the pool label — only what it can
//! prove this product made for the pool. Whatever else claims to belong (a clone object
//! labelled with the pool that names an older VM, a Lease labelled with the pool under another
//! name) is left alone and listed with why ([`PoolDeleted::left_alone`]).

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::coordination::v1::Lease;

use crate::lease::ClaimLease;
use crate::policy::plan::{claim_of_pool, index_of};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::clone_object::{discover_clone_api, target_of};
use super::{CLONE_KIND, CREATION_MARK_ANNOTATION, RUN_LABEL, creation_mark};
use crate::clock::{ServerClock, exact_instant};
use crate::error::{Error, ErrorKind, Result, is_status};
use crate::names::{POOL_LABEL, lease_name};
use crate::policy::DesktopPool;
use crate::resources::VirtualMachine;
use crate::state::{MemberState, member_view};
use crate::validate;

/// What a pool delete removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolDeleted {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub name: String,
    /// Member VMs deleted (or already being deleted), in index order.
    pub members: Vec<String>,
    /// Claim Leases (`corral-vdi-<member>`) deleted.
    pub leases: Vec<String>,
    /// VirtualMachineClone objects deleted (left from an aborted or failed create, or by the Go
    /// CLI, which never deletes them).
    pub clones: Vec<String>,
    /// VMs that this pool's own clone objects produced but that never got the pool label (an
    /// interrupted create), deleted.
    pub unlabelled: Vec<String>,
    /// Members that were assigned and deleted anyway because of `force`, with their holder.
    pub forced: Vec<String>,
    /// What claims to belong to the pool but that delete cannot prove this product made, and
    /// so left alone, each with why: `VirtualMachine golden-desktop (named by clone object
    /// "x", but created before it …)`, `Lease other (labelled with the pool, but no member's
    /// claim Lease)`.
    pub left_alone: Vec<String>,
}

impl PoolDeleted {
    /// Whether there was nothing to delete.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
            && self.leases.is_empty()
            && self.clones.is_empty()
            && self.unlabelled.is_empty()
    }
}

/// What to delete: `pool delete <name> [-n ns] [--force]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletePool {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub name: String,
    /// Delete assigned members too.
    pub force: bool,
}

/// Why a member blocks a delete, or `None` if it may go: an assigned-to label, or an active
/// Lease (a claim in progress or stuck).
fn assignment(state: MemberState, holder: Option<&str>) -> Option<String> {
    let holder = holder.unwrap_or("unknown");
    match state {
        MemberState::Free | MemberState::FreeStaleLease => None,
        MemberState::Claiming => Some(format!(
            "claim in progress or stuck, Lease held by {holder}"
        )),
        MemberState::Granting => Some(format!("being granted to {holder} by the broker")),
        MemberState::AssignedLegacy => Some(format!("assigned to {holder}, label only")),
        MemberState::Assigned => Some(format!("assigned to {holder}")),
        MemberState::AssignedLeaseExpired => Some(format!("assigned to {holder}, lease expired")),
        MemberState::Conflict => Some(format!(
            "in conflict: Lease held by {holder}, label naming someone else"
        )),
        MemberState::Unreadable => Some(format!(
            "its Lease, held by {holder}, cannot be read, so it may be live"
        )),
        MemberState::Releasing => Some("being released by the broker".to_owned()),
        MemberState::Removing => Some("being removed by the broker".to_owned()),
    }
}

/// Deletes `pool`'s DesktopPool ([`crate::policy`]), if it has one: a pool without one, or a
/// cluster without the CRD, is fine.
///
/// Errors: [`Error::Kube`] naming the object (a 403: RBAC does not let the caller delete
/// DesktopPools; nothing was deleted yet).
async fn delete_desktop_pool(client: &Client, ns: &str, pool: &str) -> Result<()> {
    match Api::<DesktopPool>::namespaced(client.clone(), ns)
        .delete(pool, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(Error::kube(
            format!(
                "delete DesktopPool \"{pool}\" in namespace \"{ns}\" (before its members, so the \
                 broker does not grow the pool again; nothing was deleted)"
            ),
            e,
        )),
    }
}

/// Why the VM `vm` cannot be proven to be the product of `clone`, the pool's clone object that
/// names it as its target, or `None` when it is: it carries the creation mark our clone step
/// writes ([`creation_mark`] of that clone object's name and run id, [`CREATION_MARK_ANNOTATION`])
/// and was created no earlier than the clone object (KubeVirt creates the target only after its
/// clone object exists, and never over an existing VM). Anyone who may create clone objects can
/// label one with the pool and name any VM as its target; neither proves the VM was made by it.
pub(super) fn unproven(vm: &VirtualMachine, clone: &DynamicObject) -> Option<String> {
    let clone_name = clone.name_any();
    let created = |meta: &kube::api::ObjectMeta| meta.creation_timestamp.as_ref().map(|t| t.0);
    match (created(&vm.metadata), created(&clone.metadata)) {
        (Some(vm_at), Some(clone_at)) if vm_at < clone_at => {
            return Some(format!(
                "named by clone object \"{clone_name}\", but created at {}, before that object \
                 ({}): a clone never makes a VM that already exists",
                exact_instant(vm_at),
                exact_instant(clone_at)
            ));
        }
        (Some(_), Some(_)) => {}
        _ => {
            return Some(format!(
                "named by clone object \"{clone_name}\", but a creation time is missing, so \
                 which came first is unknown"
            ));
        }
    }
    let Some(run) = clone.labels().get(RUN_LABEL) else {
        return Some(format!(
            "named by clone object \"{clone_name}\", but that object has no {RUN_LABEL} \
             label: it is not one of ours, so no creation mark can be checked"
        ));
    };
    let expected = creation_mark(&clone_name, run);
    match vm.annotations().get(CREATION_MARK_ANNOTATION) {
        Some(mark) if *mark == expected => None,
        Some(mark) => Some(format!(
            "named by clone object \"{clone_name}\", but its {CREATION_MARK_ANNOTATION} is \
             \"{mark}\", not \"{expected}\""
        )),
        None => Some(format!(
            "named by clone object \"{clone_name}\", but without the \
             {CREATION_MARK_ANNOTATION} mark our clones write"
        )),
    }
}

/// Deletes a pool: its member VMs (the pool label), leftover clone objects (labelled with the
/// pool, or targeting a member name `<pool>-<n>`, as the Go CLI's `clone-<pool>-<n>-<time>`
/// do), the VMs without the pool label that such a clone object labelled with the pool provably
/// made (an interrupted create: the VM carries that object's [`crate::pool::creation_mark`] and
/// was created after it), and the claim Leases `corral-vdi-<vm>` of the VMs deleted. A VM a
/// clone object names without that proof, and a Lease labelled with the pool under another
/// name, are left alone and listed in [`PoolDeleted::left_alone`].
/// The pool's DesktopPool goes first (after the refusals), so the broker does not clone its
/// members again; clone objects next, so none can make a new member meanwhile; Leases last, so
/// no one claims a member that is being deleted. Judged at the API server's time (`clock`).
///
/// Idempotent: with nothing left, it succeeds with an empty [`PoolDeleted`]. VMs already being
/// deleted are listed as deleted. It does not wait for VMs to be gone (KubeVirt first stops a
/// running VM).
///
/// Errors: [`Error::Invalid`] for a bad pool or namespace name (no request sent);
/// [`Error::Rejected`] (`Forbidden`, nothing deleted) when RBAC does not let the caller delete
/// VirtualMachines and Leases in the namespace ([`crate::identity::require`]);
/// [`Error::Rejected`] (`Conflict`, nothing deleted) while a member is assigned (label) or
/// has an active Lease, naming each with its holder, unless `force`; [`Error::Kube`] when a
/// request fails (a later run finishes the job; a refused DesktopPool delete comes before any
/// other).
pub async fn delete_pool(
    client: &Client,
    request: &DeletePool,
    clock: &ServerClock,
) -> Result<PoolDeleted> {
    let (ns, pool) = (&request.namespace, &request.name);
    validate::pool_name(pool)?;
    validate::namespace(ns)?;
    crate::identity::require(
        client,
        ns,
        &[crate::identity::DELETE_VMS, crate::identity::DELETE_LEASES],
        &format!("delete pool \"{pool}\""),
    )
    .await?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut members = super::list_members(&vms, ns, pool).await?;
    members.sort_by_cached_key(|vm| {
        let name = vm.name_any();
        let index = name
            .strip_prefix(&format!("{pool}-"))
            .and_then(|i| i.parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        (index, name)
    });
    let member_names: BTreeSet<String> = members.iter().map(|vm| vm.name_any()).collect();
    // Every VM of the namespace by name, with its pool label: whose a claim Lease is.
    let vm_pools: HashMap<String, Option<String>> = vms
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| Error::kube(format!("list VirtualMachines in namespace \"{ns}\""), e))?
        .items
        .into_iter()
        .map(|vm| {
            let label = vm.labels().get(POOL_LABEL).cloned();
            (vm.name_any(), label)
        })
        .collect();
    let all_leases =
        crate::lease::list(client, &crate::scope::Scope::Namespace(ns.clone())).await?;
    let lease_of: HashMap<String, &ClaimLease> =
        all_leases.iter().map(|l| (l.name_any(), l)).collect();
    let now = clock.now();
    let mut blocked = Vec::new();
    let mut forced = Vec::new();
    for vm in &members {
        if vm.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = vm.name_any();
        let view = member_view(vm, lease_of.get(&lease_name(&name)).copied(), now);
        // Every state but free and free (stale lease) has the label or an active Lease.
        if let Some(why) = assignment(view.state, view.holder.as_deref()) {
            blocked.push(format!("{name} ({why})"));
            forced.push(format!(
                "{name} ({})",
                view.holder.as_deref().unwrap_or("unknown")
            ));
        }
    }
    if !blocked.is_empty() && !request.force {
        return Err(Error::rejected(
            ErrorKind::Conflict,
            format!(
                "pool \"{pool}\" in namespace \"{ns}\" has assigned members: {}",
                blocked.join(", ")
            ),
            format!(
                "unassign them first (corral-vdi unassign <member> -n {ns}), or pass --force to \
                 delete the pool with them"
            ),
        ));
    }

    // The pool's DesktopPool first, so the broker does not grow the pool again while its
    // members go (none, or no CRD, is fine).
    delete_desktop_pool(client, ns, pool).await?;

    // Leftover clone objects, so that none produces a member while the pool goes; what our own
    // clone objects provably produced without the pool label (an interrupted create) goes too.
    let mut clones_deleted = Vec::new();
    let mut produced: Vec<(String, DynamicObject)> = Vec::new();
    let mut left_alone = Vec::new();
    let clone_api = match discover_clone_api(client).await {
        Ok(api) => Some(api),
        Err(Error::Rejected { .. }) => None,
        Err(e) => return Err(e),
    };
    if let Some(clone_api) = clone_api {
        let clones: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &clone_api.resource);
        let list = clones
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list {CLONE_KIND}s in namespace \"{ns}\""), e))?;
        for clone in &list.items {
            let ours = clone.labels().get(POOL_LABEL) == Some(pool);
            let target = target_of(clone);
            let targets_member = target
                .as_deref()
                .is_some_and(|t| member_names.contains(t) || index_of(pool, t).is_some());
            if !(ours || targets_member) {
                continue;
            }
            let name = clone.name_any();
            match clones.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    clones_deleted.push(name);
                    if ours && let Some(target) = target {
                        produced.push((target, clone.clone()));
                    }
                }
                Err(e) if is_status(&e, 404) => {}
                Err(e) => {
                    return Err(Error::kube(
                        format!(
                            "delete {CLONE_KIND} \"{name}\" in namespace \"{ns}\" (nothing else was deleted yet)"
                        ),
                        e,
                    ));
                }
            }
        }
    }

    let mut members_deleted = Vec::new();
    for vm in &members {
        let name = vm.name_any();
        if vm.metadata.deletion_timestamp.is_some() {
            members_deleted.push(name);
            continue;
        }
        match vms.delete(&name, &DeleteParams::default()).await {
            Ok(_) => members_deleted.push(name),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!(
                        "delete VirtualMachine \"{name}\" in namespace \"{ns}\" (deleted so far: {}; \
                         run the delete again to finish)",
                        if members_deleted.is_empty() {
                            "none".to_owned()
                        } else {
                            members_deleted.join(", ")
                        }
                    ),
                    e,
                ));
            }
        }
    }

    let mut unlabelled_deleted = Vec::new();
    for (name, clone) in produced {
        if member_names.contains(&name) {
            continue;
        }
        let vm = vms.get_opt(&name).await.map_err(|e| {
            Error::kube(
                format!("read VirtualMachine \"{name}\" in namespace \"{ns}\""),
                e,
            )
        })?;
        let Some(vm) = vm else {
            continue;
        };
        if let Some(other) = vm.labels().get(POOL_LABEL) {
            left_alone.push(format!(
                "VirtualMachine {name} (named by clone object \"{}\", but a member of pool \
                 \"{other}\")",
                clone.name_any()
            ));
            continue;
        }
        if let Some(why) = unproven(&vm, &clone) {
            left_alone.push(format!("VirtualMachine {name} ({why})"));
            continue;
        }
        let params = DeleteParams {
            preconditions: vm.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match vms.delete(&name, &params).await {
            Ok(_) => unlabelled_deleted.push(name),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!(
                        "delete VirtualMachine \"{name}\" in namespace \"{ns}\" (made by this pool's \
                         clone object, never labelled; run the delete again to finish)"
                    ),
                    e,
                ));
            }
        }
    }

    // The pool's claim Leases (by name: those of its members, and those named for a member
    // that no VM outside the pool bears, the rule pool create refuses leftovers by) and those
    // of the unlabelled VMs deleted; a Lease that only carries the pool label proves nothing.
    let mut doomed_leases = Vec::new();
    for lease in &all_leases {
        let name = lease.name_any();
        let member = crate::names::member_of_lease(&name);
        let vm_pool = member.and_then(|m| vm_pools.get(m)).map(Option::as_deref);
        if claim_of_pool(pool, &name, vm_pool).is_some()
            || member.is_some_and(|m| unlabelled_deleted.iter().any(|u| u == m))
        {
            doomed_leases.push(name);
        } else if lease.labels().get(POOL_LABEL) == Some(pool) {
            left_alone.push(format!(
                "Lease {name} (labelled with the pool, but not the claim Lease \
                 corral-vdi-<member> of a VM deleted here)"
            ));
        }
    }
    let mut leases_deleted = Vec::new();
    for name in doomed_leases {
        match leases.delete(&name, &DeleteParams::default()).await {
            Ok(_) => leases_deleted.push(name),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!(
                        "delete Lease \"{name}\" in namespace \"{ns}\" (the members are deleted; run \
                         the delete again to finish)"
                    ),
                    e,
                ));
            }
        }
    }

    // Who may claim from it: a pool made again under the name starts with its own grants.
    if let Err(e) = crate::entitlement::forget_pool(client, ns, pool).await {
        left_alone.push(format!(
            "the pool's entitlements (Role {} and its RoleBindings: {e})",
            crate::entitlement::role_name(pool)
        ));
    }

    Ok(PoolDeleted {
        namespace: ns.clone(),
        name: pool.clone(),
        members: members_deleted,
        leases: leases_deleted,
        clones: clones_deleted,
        unlabelled: unlabelled_deleted,
        forced: if request.force { forced } else { Vec::new() },
        left_alone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLONE_AT: &str = "2026-12-03T10:00:00Z";

    fn vm(created: Option<&str>, mark: Option<&str>) -> VirtualMachine {
        let annotations = match mark {
            Some(m) => json!({ CREATION_MARK_ANNOTATION: m }),
            None => json!({}),
        };
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": { "name": "desk", "creationTimestamp": created, "annotations": annotations },
            "spec": {}
        }))
        .unwrap()
    }

    fn clone_object(run: Option<&str>) -> DynamicObject {
        let labels = match run {
            Some(r) => json!({ POOL_LABEL: "p", RUN_LABEL: r }),
            None => json!({ POOL_LABEL: "p" }),
        };
        serde_json::from_value(json!({
            "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
            "metadata": { "name": "c", "creationTimestamp": CLONE_AT, "labels": labels },
            "spec": { "target": { "name": "desk" } }
        }))
        .unwrap()
    }

    #[test]
    fn only_the_clones_own_mark_on_a_vm_made_after_it_proves_the_vm_ours() {
        let clone = clone_object(Some("r1"));
        let mark = creation_mark("c", "r1");
        let later = Some("2026-12-03T10:00:07Z");
        assert_eq!(unproven(&vm(later, Some(&mark)), &clone), None);
        // Creation times are whole seconds: the same second is not "before".
        assert_eq!(unproven(&vm(Some(CLONE_AT), Some(&mark)), &clone), None);
        // A VM older than the clone object is never its product, whatever it carries.
        assert_eq!(
            unproven(&vm(Some("2026-12-03T09:59:59Z"), Some(&mark)), &clone).unwrap(),
            "named by clone object \"c\", but created at 2026-12-03 09:59:59 UTC, before that \
             object (2026-12-03 10:00:00 UTC): a clone never makes a VM that already exists"
        );
        assert_eq!(
            unproven(&vm(later, None), &clone).unwrap(),
            "named by clone object \"c\", but without the corral.dev/vdi-cloned-by mark our \
             clones write"
        );
        // Another clone object's (or run's) mark is not this one's.
        assert_eq!(
            unproven(&vm(later, Some(&creation_mark("c", "r2"))), &clone).unwrap(),
            "named by clone object \"c\", but its corral.dev/vdi-cloned-by is \"c/r2\", not \
             \"c/r1\""
        );
        assert!(
            unproven(&vm(later, Some(&mark)), &clone_object(None))
                .unwrap()
                .contains("but that object has no corral.dev/vdi-create-run label")
        );
        assert!(
            unproven(&vm(None, Some(&mark)), &clone)
                .unwrap()
                .contains("a creation time is missing")
        );
    }
}
