//! Pool delete (SPEC "Pool list / delete"): the members, their Leases, leftover clone objects
//! and VMs this pool's clone objects made that never got the pool label.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Client, ResourceExt};

use super::CLONE_KIND;
use super::clone::{discover_clone_api, target_of};
use crate::cluster::ServerClock;
use crate::error::{Error, Result, is_status};
use crate::labels::{POOL_LABEL, lease_name};
use crate::model::{ErrorKind, MemberState, PoolDeleted};
use crate::resources::VirtualMachine;
use crate::state::member_view;
use crate::validate;

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

/// Whether `name` is `<pool>-<n>` for a number n: a member name of `pool`.
fn is_member_name_of(name: &str, pool: &str) -> bool {
    name.strip_prefix(pool)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
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
        MemberState::AssignedLegacy => Some(format!("assigned to {holder}, label only")),
        MemberState::Assigned => Some(format!("assigned to {holder}")),
        MemberState::AssignedLeaseExpired => Some(format!("assigned to {holder}, lease expired")),
        MemberState::Conflict => Some(format!(
            "in conflict: Lease held by {holder}, label naming someone else"
        )),
    }
}

/// Deletes a pool: its member VMs, their claim Leases (`corral-vdi-<member>`, and Leases
/// labelled with the pool), leftover clone objects (labelled with the pool, or targeting a
/// member name `<pool>-<n>`, as the Go CLI's `clone-<pool>-<n>-<time>` do) and VMs that this
/// pool's own clone objects produced but that never got the pool label. Clone objects go first, so none can make a new member meanwhile; Leases last, so no
/// one claims a member that is being deleted. Judged at the API server's time (`clock`).
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
/// request fails (a later run finishes the job).
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
    let mut members = vms
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
        .await
        .map_err(|e| {
            Error::kube(
                format!("list VirtualMachines of pool \"{pool}\" in namespace \"{ns}\""),
                e,
            )
        })?
        .items;
    members.sort_by_cached_key(|vm| {
        let name = vm.name_any();
        let index = name
            .strip_prefix(&format!("{pool}-"))
            .and_then(|i| i.parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        (index, name)
    });
    let member_names: BTreeSet<String> = members.iter().map(|vm| vm.name_any()).collect();
    let all_leases = leases
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube(format!("list Leases in namespace \"{ns}\""), e))?
        .items;
    let lease_of: HashMap<String, &Lease> = all_leases.iter().map(|l| (l.name_any(), l)).collect();
    let doomed_leases: Vec<String> = all_leases
        .iter()
        .filter(|l| {
            l.labels().get(POOL_LABEL) == Some(pool)
                || crate::labels::member_of_lease(&l.name_any())
                    .is_some_and(|m| member_names.contains(m))
        })
        .map(|l| l.name_any())
        .collect();

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

    // Leftover clone objects, so that none produces a member while the pool goes; what our own
    // clone objects produced without the pool label (an interrupted create) goes too.
    let mut clones_deleted = Vec::new();
    let mut produced = Vec::new();
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
                .is_some_and(|t| member_names.contains(t) || is_member_name_of(t, pool));
            if !(ours || targets_member) {
                continue;
            }
            let name = clone.name_any();
            match clones.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    clones_deleted.push(name);
                    if ours && let Some(target) = target {
                        produced.push(target);
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
    for name in produced {
        if member_names.contains(&name) {
            continue;
        }
        let vm = vms.get_opt(&name).await.map_err(|e| {
            Error::kube(
                format!("read VirtualMachine \"{name}\" in namespace \"{ns}\""),
                e,
            )
        })?;
        let Some(vm) = vm.filter(|vm| !vm.labels().contains_key(POOL_LABEL)) else {
            continue;
        };
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

    Ok(PoolDeleted {
        namespace: ns.clone(),
        name: pool.clone(),
        members: members_deleted,
        leases: leases_deleted,
        clones: clones_deleted,
        unlabelled: unlabelled_deleted,
        forced: if request.force { forced } else { Vec::new() },
    })
}
