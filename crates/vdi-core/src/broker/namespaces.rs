//! Where the broker acts (SPEC "Broker"; issue 35 item 5): its writes, and the stream and power
//! rights it grants, reach only the namespaces that hold desktops.
//!
//! Cluster-wide the broker only reads (ClusterRole `corral-vdi:broker`). What it does to claims,
//! members and grants comes from the ClusterRole [`DESKTOPS_ROLE`], which nothing binds
//! cluster-wide: each namespace that holds desktops gets a RoleBinding [`SERVE_BINDING`] naming
//! it ([`serve`]: `corral-vdi broker install --namespace NS`, `broker allow -n NS`, and pool
//! create on a cluster with a broker). [`served`] lists them and [`unserved`] names the
//! namespaces whose desktops the broker cannot reach, for `corral-vdi broker status`.

use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::{FIELD_MANAGER, PART_OF};
use crate::error::{Error, Result, is_status};
use crate::names::{BROKER_NAME, BROKER_NAMESPACE, POOL_LABEL};
use crate::policy::DesktopPool;
use crate::resources::VirtualMachine;
use crate::validate;

/// Name of the RoleBinding, in each namespace that holds desktops, that lets the broker act
/// there.
pub const SERVE_BINDING: &str = "corral-vdi:broker";
/// The ClusterRole that binding names: the broker's writes (claim Leases, members, clones,
/// per-claim grants, Events) and every right a grant gives ([`super::GRANTED_RIGHTS`]). Never
/// bound cluster-wide.
pub const DESKTOPS_ROLE: &str = "corral-vdi:broker-desktops";

/// The RoleBinding [`SERVE_BINDING`] for `namespace`: [`DESKTOPS_ROLE`] for the broker's
/// ServiceAccount.
pub fn binding(namespace: &str) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(SERVE_BINDING.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some([(PART_OF.0.to_owned(), PART_OF.1.to_owned())].into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: DESKTOPS_ROLE.to_owned(),
        },
        subjects: Some(vec![Subject {
            api_group: None,
            kind: "ServiceAccount".to_owned(),
            name: BROKER_NAME.to_owned(),
            namespace: Some(BROKER_NAMESPACE.to_owned()),
        }]),
    }
}

/// Whether `rb` is a binding as [`binding`] writes it (name, role and subject).
fn is_serve_binding(rb: &RoleBinding) -> bool {
    let want = binding(&rb.namespace().unwrap_or_default());
    rb.name_any() == SERVE_BINDING && rb.role_ref == want.role_ref && rb.subjects == want.subjects
}

/// Lets the broker act in `namespace`: writes its RoleBinding [`SERVE_BINDING`] there
/// (server-side apply, field manager [`FIELD_MANAGER`]). Returns a phrase: "the broker may act
/// in namespace "NS"" or "… may already …".
///
/// Errors: [`Error::Invalid`] for a bad namespace (no request); 403 for a caller who may not
/// write RoleBindings there, or (RBAC's escalation check) does not hold every right of
/// [`DESKTOPS_ROLE`] there themselves: an administrator's job.
pub async fn serve(client: &Client, namespace: &str) -> Result<String> {
    validate::namespace(namespace)?;
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let what = format!("RoleBinding {SERVE_BINDING} in namespace \"{namespace}\"");
    let found = api
        .get_opt(SERVE_BINDING)
        .await
        .map_err(|e| Error::kube(format!("read {what}"), e))?;
    if found.as_ref().is_some_and(is_serve_binding) {
        return Ok(format!(
            "the broker may already act in namespace \"{namespace}\""
        ));
    }
    // roleRef cannot change in place: a binding of that name to another role goes first.
    if found.is_some() {
        api.delete(SERVE_BINDING, &DeleteParams::default())
            .await
            .map_err(|e| Error::kube(format!("replace {what}"), e))?;
    }
    api.patch(
        SERVE_BINDING,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&binding(namespace)),
    )
    .await
    .map_err(|e| Error::kube(format!("write {what}"), e))?;
    Ok(format!("the broker may act in namespace \"{namespace}\""))
}

/// The namespaces where the broker may act (each with a [`SERVE_BINDING`] as [`serve`] writes
/// it), sorted; `None` when the caller may not list RoleBindings in every namespace (only
/// administrators may).
///
/// Errors: [`Error::Kube`] when the list fails otherwise.
pub async fn served(client: &Client) -> Result<Option<Vec<String>>> {
    let listed = Api::<RoleBinding>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{}={}", PART_OF.0, PART_OF.1)))
        .await;
    let bindings = match listed {
        Ok(list) => list,
        Err(e) if is_status(&e, 403) => return Ok(None),
        Err(e) => return Err(Error::kube("list the broker's RoleBindings", e)),
    };
    let mut namespaces: Vec<String> = bindings
        .iter()
        .filter(|rb| is_serve_binding(rb))
        .filter_map(|rb| rb.namespace())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    Ok(Some(namespaces))
}

/// The namespaces that hold pool members (VMs labelled [`POOL_LABEL`]) or DesktopPools but are
/// not in `served`, each as a warning naming the command that fixes it; `None` when the caller
/// may not list them in every namespace.
///
/// Errors: [`Error::Kube`] when a list fails otherwise.
pub async fn unserved(client: &Client, served: &[String]) -> Result<Option<Vec<String>>> {
    let members = Api::<VirtualMachine>::all(client.clone())
        .list_metadata(&ListParams::default().labels(POOL_LABEL))
        .await;
    let pools = Api::<DesktopPool>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await;
    let mut holding: Vec<String> = Vec::new();
    match members {
        Ok(list) => holding.extend(list.iter().filter_map(ResourceExt::namespace)),
        Err(e) if is_status(&e, 403) => return Ok(None),
        Err(e) => return Err(Error::kube("list pool members in every namespace", e)),
    }
    match pools {
        Ok(list) => holding.extend(list.iter().filter_map(ResourceExt::namespace)),
        // No DesktopPool CRD (a broker never installed): members alone say where desktops are.
        Err(e) if is_status(&e, 404) => {}
        Err(e) if is_status(&e, 403) => return Ok(None),
        Err(e) => return Err(Error::kube("list DesktopPools in every namespace", e)),
    }
    holding.sort();
    holding.dedup();
    Ok(Some(
        holding
            .into_iter()
            .filter(|ns| !served.contains(ns))
            .map(|ns| {
                format!(
                    "namespace \"{ns}\" holds desktops but the broker may not act there (no \
                     RoleBinding {SERVE_BINDING}): its claims get no access; run `corral-vdi \
                     broker install --namespace {ns}`"
                )
            })
            .collect(),
    ))
}

/// Lets the broker act in `namespace` ([`serve`]): a managed pool create's last step
/// ([`crate::managed::create`]), so that the new pool's claims get access. `None` when done;
/// else a warning naming what failed and the command an administrator runs.
pub async fn serve_or_warn(client: &Client, namespace: &str) -> Option<String> {
    serve(client, namespace).await.err().map(|e| {
        format!(
            "the broker may not act in namespace \"{namespace}\" ({e}): claims on this pool get \
             no access until an administrator runs `corral-vdi broker install --namespace \
             {namespace}`"
        )
    })
}

/// Removes every [`SERVE_BINDING`] (broker uninstall); returns what was deleted, one phrase
/// each.
///
/// Errors: [`Error::Kube`] when a list or delete fails (403 for non-administrators).
pub(super) async fn unserve_all(client: &Client) -> Result<Vec<String>> {
    let mut deleted = Vec::new();
    for namespace in served(client).await?.unwrap_or_default() {
        let api: Api<RoleBinding> = Api::namespaced(client.clone(), &namespace);
        match api.delete(SERVE_BINDING, &DeleteParams::default()).await {
            Ok(_) => deleted.push(format!(
                "RoleBinding {SERVE_BINDING} in namespace \"{namespace}\""
            )),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!("delete RoleBinding {SERVE_BINDING} in namespace \"{namespace}\""),
                    e,
                ));
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binding_names_the_desktops_role_for_the_brokers_account_only() {
        let rb = binding("corral-vms");
        assert!(is_serve_binding(&rb));
        assert_eq!(rb.role_ref.kind, "ClusterRole");
        assert_eq!(rb.role_ref.name, DESKTOPS_ROLE);
        let mut other = rb.clone();
        other.subjects.as_mut().unwrap()[0].name = "bob".into();
        assert!(!is_serve_binding(&other), "bound to someone else");
        let mut other = rb.clone();
        other.role_ref.name = "admin".into();
        assert!(!is_serve_binding(&other), "another role");
    }
}
