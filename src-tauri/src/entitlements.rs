//! The commands of entitlements (SPEC "Entitlements": who may claim from which pool, the RBAC
//! verb `claim` on `desktoppools` by the pool's name): which pools you may claim from, for "Get
//! a desktop"; and, in a pool's settings dialog, who may use the pool, with an administrator's
//! grants and revocations. Thin adapters over `vdi_core::entitlement`: who acts is the
//! cluster's identity, never a name typed in the window.

use serde::Serialize;
use tauri::State;
use vdi_core::entitlement::{self, Entitlement, NamespaceEntitlements, WhoInput};
use vdi_core::error::ErrorView;

use crate::AppState;
use crate::commands::{actor, current};

/// Which pools of `namespaces` you may claim from (SPEC "Entitlements": RBAC's `claim` on
/// `desktoppools`, your groups included; a SelfSubjectRulesReview per namespace), for "Get a
/// desktop" to offer only those. A namespace RBAC cannot answer for counts as every pool (the
/// guard still judges each claim).
///
/// Errors: no cluster connected.
#[tauri::command]
#[specta::specta]
pub async fn entitled_pools(
    state: State<'_, AppState>,
    namespaces: Vec<String>,
) -> Result<Vec<NamespaceEntitlements>, ErrorView> {
    let (client, _) = current(&state)?;
    Ok(entitlement::entitlements_in(&client, &namespaces).await)
}

/// Who may use a pool, as its settings dialog shows it.
#[derive(Debug, Clone, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct PoolEntitlements {
    /// Every grant of the right to claim from the pool, by reach, then whom.
    pub entitlements: Vec<Entitlement>,
    /// Whether the cluster-wide grants (ClusterRoleBindings) could be read too; when not, some
    /// who may claim are not listed.
    pub complete: bool,
}

/// Who may claim from `pool` in `namespace`: every RoleBinding of the namespace (and, where you
/// may read them, every ClusterRoleBinding) that gives the right.
///
/// Errors: a bad name (no request); 403 for who may not read the namespace's RBAC.
#[tauri::command]
#[specta::specta]
pub async fn pool_entitlements(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
) -> Result<PoolEntitlements, ErrorView> {
    let (client, _) = current(&state)?;
    let (entitlements, complete) = entitlement::list(&client, &namespace, &pool).await?;
    Ok(PoolEntitlements {
        entitlements,
        complete,
    })
}

/// Entitles `who` to claim from `pool` in `namespace` (a RoleBinding of the pool's Role, naming
/// you as who granted it), once the API server's authorizer holds it; or, with `remove`, takes
/// back the grant of the pool that `entitle` wrote for them (claims running go on). The
/// sentences say what was done.
///
/// Errors: a bad name or whom (nothing written); 403 for who may not write Roles and
/// RoleBindings in the namespace.
#[tauri::command]
#[specta::specta]
pub async fn entitle_pool(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
    who: WhoInput,
    remove: bool,
) -> Result<Vec<String>, ErrorView> {
    let whom = [who.parse()?];
    let (actor, _) = actor(&state)?;
    tracing::info!(%namespace, %pool, who = %whom[0], remove, "entitlement change requested");
    let client = actor.client();
    let said = if remove {
        entitlement::unentitle(client, &namespace, &pool, &whom).await?
    } else {
        entitlement::entitle(client, &namespace, &pool, &whom, actor.username()).await?
    };
    Ok(said)
}
