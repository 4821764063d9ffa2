//! The commands of managed pools (SPEC "Pool policy and lifecycle", "Audit"): the pool
//! settings dialog's (read a pool's policy, check the dialog's values by the same rules the
//! broker reads them with, [`vdi_core::policy::DesktopPoolSpec::policy`], write them through
//! `policy::change`'s resize and set, adopt a label-only pool), the holder's **Keep** on a
//! reclaim notice, and a member's history. Thin adapters: who acts is the cluster's identity
//! (the link's client and actor), never a name typed in the window.

use serde::{Deserialize, Serialize};
use tauri::State;
use vdi_core::error::ErrorView;
use vdi_core::managed::ops;
use vdi_core::managed::settings::{self, PoolSettings};
use vdi_core::policy::plan::resize_preview;
use vdi_core::policy::{DesktopPool, DesktopPoolSpec, PolicyError};

use vdi_core::audit::{AuditEntry, AuditFilter, TTL_NOTICE};
use vdi_core::claim::renew::{self, Kept};

use crate::AppState;
use crate::commands::{actor, current, pool_seen};

/// A pool's policy as the settings dialog shows it.
#[derive(Debug, Clone, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct PoolPolicy {
    /// The pool's namespace.
    pub namespace: String,
    /// The pool.
    pub pool: String,
    /// Its DesktopPool's settings; `null`: the pool is unmanaged (no DesktopPool).
    pub settings: Option<PoolSettings>,
    /// The golden VM its members are cloned from (grow, reset), when managed.
    pub golden: Option<String>,
    /// Why its DesktopPool's spec cannot be read (the broker leaves the pool alone until it is
    /// corrected), naming the field.
    pub problem: Option<String>,
}

impl PoolPolicy {
    fn of(namespace: &str, pool: &str, object: Option<&DesktopPool>) -> PoolPolicy {
        PoolPolicy {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
            settings: object.map(|o| PoolSettings::of(&o.spec)),
            golden: object.map(|o| o.spec.golden.clone()),
            problem: object.and_then(|o| o.policy().err()).map(|e| e.to_string()),
        }
    }
}

/// The dialog's values, judged before anything is sent: the first problem (by the rules the
/// broker reads a DesktopPool with) and the members a smaller size would remove or a larger
/// one add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCheck {
    /// The first value out of range or unreadable; `null` when all read.
    pub problem: Option<PolicyProblem>,
    /// The free members above this size, highest index first: the broker removes them at once
    /// ([`vdi_core::policy::plan::resize_preview`] over the live watches: the broker's own
    /// rule).
    pub removed: Vec<String>,
    /// The claimed members above this size, highest index first: removed once released.
    pub removed_once_released: Vec<String>,
    /// The members a larger size adds, lowest index first: cloned from the golden VM.
    pub added: Vec<String>,
}

/// One value the rules refuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct PolicyProblem {
    /// The field, as the spec names it (`golden`, `size`, `warm`, `disconnectGrace`,
    /// `maxSession`, `idleTimeout`; [`vdi_core::policy::PolicyField::name`]).
    pub field: String,
    /// The rule's sentence without the spec's field name, which the dialog puts as its label
    /// (`5 is out of range (0 to the size, 4)`; [`PolicyError::reason`]).
    pub message: String,
}

impl From<PolicyError> for PolicyProblem {
    fn from(error: PolicyError) -> Self {
        PolicyProblem {
            field: error.field.name().to_owned(),
            message: error.reason().to_owned(),
        }
    }
}

/// Reads `pool`'s policy in `namespace`: its settings, or none when the pool is unmanaged.
///
/// Errors: a bad name; the DesktopPool cannot be read (403: RBAC does not let you read
/// DesktopPools).
#[tauri::command]
#[specta::specta]
pub async fn pool_policy(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
) -> Result<PoolPolicy, ErrorView> {
    let (client, _) = current(&state)?;
    let object = ops::get(&client, &namespace, &pool).await?;
    Ok(PoolPolicy::of(&namespace, &pool, object.as_ref()))
}

/// Judges the dialog's `settings` for `pool` (golden VM `golden`) without writing anything:
/// the spec they make read by [`DesktopPoolSpec::policy`] (the broker's rules and the CRD's
/// bounds), and the members a smaller size would remove or a larger one add, from the live
/// view.
#[tauri::command]
#[specta::specta]
pub fn check_pool_settings(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
    golden: String,
    settings: PoolSettings,
) -> Result<PolicyCheck, ErrorView> {
    let base = DesktopPoolSpec {
        golden,
        ..Default::default()
    };
    let problem = settings
        .apply(&base)
        .policy()
        .err()
        .map(PolicyProblem::from);
    let seen = pool_seen(&state, &namespace, &pool)?;
    let preview = resize_preview(&pool, settings.size, &seen);
    Ok(PolicyCheck {
        problem,
        removed: preview.now,
        removed_once_released: preview.once_released,
        added: preview.cloned,
    })
}

/// Writes the dialog's `settings` to `pool`'s DesktopPool ([`settings::save`]); returns the
/// policy as written.
///
/// Errors: those of [`settings::save`].
#[tauri::command]
#[specta::specta]
pub async fn save_pool_settings(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
    settings: PoolSettings,
) -> Result<PoolPolicy, ErrorView> {
    let (client, _) = current(&state)?;
    tracing::info!(%namespace, %pool, ?settings, "pool settings save requested");
    let written = settings::save(&client, &namespace, &pool, &settings).await?;
    Ok(PoolPolicy::of(&namespace, &pool, Some(&written)))
}

/// Makes `pool` managed: a DesktopPool with its member count as size, the golden VM its
/// members were cloned from, and the unmanaged behaviour's defaults.
///
/// Errors: no DesktopPool CRD (install the broker); no members; an unknown golden VM; managed
/// already; RBAC refusals. Nothing is written on any of them.
#[tauri::command]
#[specta::specta]
pub async fn adopt_pool(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
) -> Result<PoolPolicy, ErrorView> {
    let (client, _) = current(&state)?;
    tracing::info!(%namespace, %pool, "pool adopt requested");
    let made = ops::adopt(&client, &namespace, &pool, None).await?;
    Ok(PoolPolicy::of(&namespace, &pool, Some(&made)))
}

/// **Keep** on a reclaim notice: renews `member`'s claim, which you must hold, and records the
/// time, so that a disconnect or idle reclaim is postponed (never a `maxSession` end).
///
/// Errors: not your active claim, or past the pool's `maxSession` (nothing written); a failed
/// request.
#[tauri::command]
#[specta::specta]
pub async fn keep_desktop(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<Kept, ErrorView> {
    let (actor, _) = actor(&state)?;
    tracing::info!(%namespace, %member, "keep requested");
    renew::keep(&actor, &namespace, &member)
        .await
        .map_err(ErrorView::from)
}

/// A member's or a pool's history, with what the window says about its length.
#[derive(Debug, Clone, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// Its acts (claims, releases, reclaims, force releases, resets; for a pool also its
    /// members' removals, the warm buffer's starts and stops, and resizes), oldest first.
    pub entries: Vec<AuditEntry>,
    /// That Events live only as long as the API server's event TTL ([`TTL_NOTICE`]).
    pub ttl_notice: String,
}

/// Whose history to read.
#[derive(Debug, Clone, Deserialize, specta::Type)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum HistoryOf {
    /// One member's acts.
    Member {
        /// The member (VM name).
        name: String,
    },
    /// A whole pool's: every member's acts and the pool's own (resizes).
    Pool {
        /// The pool.
        name: String,
    },
}

/// The audit trail of a member or a pool in `namespace` (Events related to the pool's
/// DesktopPool, [`vdi_core::audit::list`]).
///
/// Errors: a bad name; RBAC does not let you list Events there (403).
#[tauri::command]
#[specta::specta]
pub async fn history(
    state: State<'_, AppState>,
    namespace: String,
    of: HistoryOf,
) -> Result<History, ErrorView> {
    let (client, _) = current(&state)?;
    let filter = match of {
        HistoryOf::Member { name } => AuditFilter {
            member: Some(name),
            ..Default::default()
        },
        HistoryOf::Pool { name } => AuditFilter {
            pool: Some(name),
            ..Default::default()
        },
    };
    let entries = vdi_core::audit::list(&client, &namespace, &filter).await?;
    Ok(History {
        entries,
        ttl_notice: TTL_NOTICE.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_names_the_field_of_the_rule_and_says_it_in_plain_words() {
        let spec = DesktopPoolSpec {
            golden: "g".into(),
            size: 2,
            warm: Some(3),
            ..Default::default()
        };
        let problem = PolicyProblem::from(spec.policy().unwrap_err());
        assert_eq!(problem.field, "warm");
        assert_eq!(problem.message, "3 is out of range (0 to the size, 2)");
    }
}
