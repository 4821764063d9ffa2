//! Adding named members to a pool that exists: the broker's grow and reset of a managed pool
//! (SPEC "Pool policy and lifecycle"). The same steps as a create ([`super::create_pool`]) for
//! those names only: the golden VM's checks, the names free, capacity admission for that many
//! members, then the clones, labels and cleanup of `clone.rs`. What differs: the pool's other
//! members are expected, and debris of an earlier add of the same names that was cut short (a
//! broker restarted mid-clone) is removed first: the clone objects labelled with the pool that
//! target one of the names, and a VM without the pool label that such an object provably made
//! (its creation mark, created after the object: the rule pool delete uses).
//!
//! The caller runs one add per pool at a time (the broker's pool loop never reconciles a pool
//! twice at once), so every clone object of the pool found before the add starts is debris.

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Client, ResourceExt};

use super::clone_object::{discover_clone_api, target_of};
use super::create_input::{GOLDEN_NAMESPACE_FIX, check_namespace, pool_size};
use super::{CLONE_KIND, CreatePool, CreateProgress, MAX_MEMBER_NAME, PoolCreated};
use super::{capacity, clone, delete, free, golden_vm};
use crate::error::{Error, Result, is_status};
use crate::names::POOL_LABEL;
use crate::names::member_name;
use crate::resources::VirtualMachine;
use crate::validate;

/// Clones members `indices` (`<pool>-<i>`) of the existing pool `request.name` from
/// `request.golden`; `request.size` is ignored (the pool's size is its owner's business).
///
/// Errors: as [`super::create_pool`] from step 2 on, except that the pool's other members are
/// no conflict: [`Error::Invalid`] for a bad name or index (no request); [`Error::Rejected`]
/// when the golden VM is missing or cannot be cloned safely, a name is taken by a VM outside
/// the pool or by a claim Lease, or capacity refuses (`Refused`, with the per-node table);
/// [`Error::Kube`] when a request fails; [`Error::PoolIncomplete`] when some clones failed.
pub async fn add_members<P>(
    client: &Client,
    request: &CreatePool,
    indices: &[u32],
    progress: P,
) -> Result<PoolCreated>
where
    P: Fn(CreateProgress) + Send + Sync,
{
    let ns = &request.namespace;
    let pool = &request.name;
    validate::pool_name(pool)?;
    validate::namespace(ns)?;
    validate::vm_name(&request.golden)?;
    validate::clone_timeout(request.options.timeout)?;
    let mut members = Vec::with_capacity(indices.len());
    for &index in indices {
        pool_size(index)?;
        let member = member_name(pool, index);
        if member.len() > MAX_MEMBER_NAME {
            return Err(Error::invalid(
                format!("member name \"{member}\" is longer than {MAX_MEMBER_NAME} characters"),
                "use a shorter pool name or a smaller size",
            ));
        }
        members.push(member);
    }
    if members.is_empty() {
        return Err(Error::invalid(
            format!("no members to add to pool \"{pool}\""),
            "name at least one index",
        ));
    }
    let started = tokio::time::Instant::now();
    check_namespace(client, ns, GOLDEN_NAMESPACE_FIX).await?;
    let clone_api = discover_clone_api(client).await?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let request = CreatePool {
        size: u32::try_from(members.len()).unwrap_or(u32::MAX),
        ..request.clone()
    };
    let golden = golden_vm::check_golden(client, &vms, &request).await?;
    let scope = free::Namespaced {
        namespace: ns.clone(),
        pool: pool.clone(),
        members,
        vms,
        clones: Api::namespaced_with(client.clone(), ns, &clone_api.resource),
        leases: Api::namespaced(client.clone(), ns),
        existing: true,
    };
    remove_debris(&scope).await?;
    scope.check_free(None).await?;
    capacity::admit(client, &golden, &request).await?;
    clone::clone_members(client, &request, scope, clone_api, started, progress).await
}

/// Deletes the pool's clone objects that target one of `scope`'s members, then each VM
/// without the pool label such an object provably made ([`delete::unproven`]).
async fn remove_debris(scope: &free::Namespaced) -> Result<()> {
    let ns = &scope.namespace;
    let selector = format!("{POOL_LABEL}={}", scope.pool);
    let list = scope
        .clones
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| Error::kube(format!("list {CLONE_KIND}s in namespace \"{ns}\""), e))?;
    let debris: Vec<(String, DynamicObject)> = list
        .items
        .into_iter()
        .filter_map(|c| target_of(&c).map(|t| (t, c)))
        .filter(|(t, _)| scope.members.contains(t))
        .collect();
    for (target, object) in debris {
        let name = object.name_any();
        tracing::info!(namespace = %ns, pool = %scope.pool, clone = %name, "removing debris of an earlier add");
        match scope
            .clones
            .delete(&name, &uid_precondition(object.uid()))
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!("delete {CLONE_KIND} \"{name}\" in namespace \"{ns}\""),
                    e,
                ));
            }
        }
        let vm = scope.vms.get_opt(&target).await.map_err(|e| {
            Error::kube(
                format!("read VirtualMachine \"{target}\" in namespace \"{ns}\""),
                e,
            )
        })?;
        let Some(vm) = vm else { continue };
        if vm.labels().contains_key(POOL_LABEL) || delete::unproven(&vm, &object).is_some() {
            continue;
        }
        match scope.vms.delete(&target, &uid_precondition(vm.uid())).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!("delete VirtualMachine \"{target}\" in namespace \"{ns}\""),
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// Delete only the object read (its uid).
fn uid_precondition(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}
