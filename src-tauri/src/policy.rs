//! The commands of managed pools (SPEC "Pool policy and lifecycle", "Audit"): the pool
//! settings dialog's (read a pool's policy, check the dialog's values by the same rules the
//! broker reads them with, [`vdi_core::policy::DesktopPoolSpec::policy`], write them through
//! `policy::change`'s resize and set, adopt a label-only pool), the holder's **Keep** on a
//! reclaim notice, and a member's history. Thin adapters: who acts is the cluster's identity
//! (the link's client and actor), never a name typed in the window.

use serde::{Deserialize, Serialize};
use tauri::State;
use vdi_core::error::{ErrorKind, ErrorView};
use vdi_core::managed::change::{self, NO_LIMIT, PolicyChanges};
use vdi_core::managed::ops;
use vdi_core::policy::plan::resize_preview;
use vdi_core::policy::{DesktopPool, DesktopPoolSpec, OnRelease, PolicyError};

use vdi_core::audit::{AuditEntry, AuditFilter, TTL_NOTICE};
use vdi_core::claim::renew::{self, Kept};

use crate::AppState;
use crate::commands::{actor, current, pool_seen};

/// A managed pool's settings as the dialog edits them. Durations are texts like `"90s"`,
/// `"15m"` or `"1h30m"` ([`vdi_core::policy::duration`]); `null` is the default (one hour for
/// `disconnectGrace`, no limit for `maxSession` and `idleTimeout`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct PoolSettings {
    /// Members wanted (1 to 500).
    pub size: u32,
    /// Free members kept running (0 to the size).
    pub warm: u32,
    /// The claim Lease's duration: how long a claim outlives its holder's last session.
    pub disconnect_grace: Option<String>,
    /// The longest claim, from the moment it was taken.
    pub max_session: Option<String>,
    /// How long the guest may have no logged-in user before the claim is reclaimed.
    pub idle_timeout: Option<String>,
    /// What a release does to the member.
    pub on_release: OnRelease,
}

impl PoolSettings {
    /// The settings a DesktopPool's spec holds, as written (values out of range included:
    /// the dialog shows them with the spec's problem, to be corrected).
    fn of(spec: &DesktopPoolSpec) -> PoolSettings {
        PoolSettings {
            size: u32::try_from(spec.size).unwrap_or(0),
            warm: u32::try_from(spec.warm.unwrap_or(0)).unwrap_or(0),
            disconnect_grace: spec.disconnect_grace.clone(),
            max_session: spec.max_session.clone(),
            idle_timeout: spec.idle_timeout.clone(),
            on_release: spec.on_release.unwrap_or_default(),
        }
    }

    /// `spec` with these settings (its golden VM kept).
    fn apply(&self, spec: &DesktopPoolSpec) -> DesktopPoolSpec {
        DesktopPoolSpec {
            golden: spec.golden.clone(),
            size: i32::try_from(self.size).unwrap_or(i32::MAX),
            warm: Some(i32::try_from(self.warm).unwrap_or(i32::MAX)),
            disconnect_grace: self.disconnect_grace.clone(),
            max_session: self.max_session.clone(),
            idle_timeout: self.idle_timeout.clone(),
            on_release: Some(self.on_release),
        }
    }

    /// What `pool set` changes to go from `from` to these settings (size aside: that is a
    /// resize), `None` for a field left as it is.
    fn changes_from(&self, from: &PoolSettings) -> PolicyChanges {
        let differs = |new: &Option<String>, old: &Option<String>| {
            (new != old).then(|| new.clone().unwrap_or_else(|| NO_LIMIT.to_owned()))
        };
        PolicyChanges {
            warm: (self.warm != from.warm).then_some(self.warm),
            // No "none" for the Lease's duration: a cleared field goes back to the default.
            disconnect_grace: (self.disconnect_grace != from.disconnect_grace)
                .then(|| self.disconnect_grace.clone().unwrap_or_else(default_grace)),
            max_session: differs(&self.max_session, &from.max_session),
            idle_timeout: differs(&self.idle_timeout, &from.idle_timeout),
            on_release: (self.on_release != from.on_release).then_some(self.on_release),
        }
    }
}

/// The default `disconnectGrace` as a duration text (the Lease's default duration).
fn default_grace() -> String {
    vdi_core::policy::duration::format(jiff::SignedDuration::from_secs(
        vdi_core::labels::DEFAULT_LEASE_SECONDS.into(),
    ))
}

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
/// broker reads a DesktopPool with) and, for a smaller size, the members it would remove.
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
}

/// One value the rules refuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct PolicyProblem {
    /// The field, as the spec names it (`golden`, `size`, `warm`, `disconnectGrace`,
    /// `maxSession`, `idleTimeout`; [`vdi_core::policy::PolicyField::name`]).
    pub field: String,
    /// The rule's sentence (`spec.warm: 5 is out of range (0 to the size, 4)`).
    pub message: String,
}

impl From<PolicyError> for PolicyProblem {
    fn from(error: PolicyError) -> Self {
        PolicyProblem {
            field: error.field.name().to_owned(),
            message: error.message,
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
    let object = ops::get(&client, &namespace, &pool)
        .await
        .map_err(|e| e.view())?;
    Ok(PoolPolicy::of(&namespace, &pool, object.as_ref()))
}

/// Judges the dialog's `settings` for `pool` (golden VM `golden`) without writing anything:
/// the spec they make read by [`DesktopPoolSpec::policy`] (the broker's rules and the CRD's
/// bounds), and the members a smaller size would remove, from the live view.
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
    })
}

/// Writes the dialog's `settings` to `pool`'s DesktopPool: a new size through `pool resize`
/// (with warm in the same write; growth admitted as pool create is), the rest through `pool
/// set`. Each write carries the resourceVersion it read; returns the policy as written.
///
/// Errors, each before its write: a value out of range (naming the field); an unmanaged pool
/// (adopt it first); growth the cluster cannot place; a DesktopPool changed meanwhile (409);
/// RBAC refusals. Nothing at all changed is not an error.
#[tauri::command]
#[specta::specta]
pub async fn save_pool_settings(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
    settings: PoolSettings,
) -> Result<PoolPolicy, ErrorView> {
    let (client, _) = current(&state)?;
    let view = |e: vdi_core::Error| e.view();
    let mut object = ops::get(&client, &namespace, &pool).await.map_err(view)?;
    let Some(current_object) = &object else {
        return Err(unmanaged(&namespace, &pool));
    };
    // The whole spec is checked first, so that a bad timeout never follows a resize written.
    if let Err(problem) = settings.apply(&current_object.spec).policy() {
        return Err(ErrorView {
            kind: ErrorKind::Invalid,
            message: format!("pool {pool}: {problem}; nothing was written"),
            suggestion: Some("correct the value and save again".into()),
            retryable: false,
        });
    }
    let mut now = PoolSettings::of(&current_object.spec);
    tracing::info!(%namespace, %pool, ?settings, "pool settings save requested");
    if settings.size != now.size {
        let written = change::resize(
            &client,
            &namespace,
            &pool,
            settings.size,
            Some(settings.warm),
        )
        .await
        .map_err(view)?;
        now = PoolSettings::of(&written.spec);
        object = Some(written);
    }
    let changes = settings.changes_from(&now);
    if !changes.is_empty() {
        object = Some(
            change::set(&client, &namespace, &pool, &changes)
                .await
                .map_err(view)?,
        );
    }
    Ok(PoolPolicy::of(&namespace, &pool, object.as_ref()))
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
    let made = ops::adopt(&client, &namespace, &pool, None)
        .await
        .map_err(|e| e.view())?;
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
        .map_err(|e| e.view())
}

/// A member's history, newest last, with what the window says about its length.
#[derive(Debug, Clone, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct MemberHistory {
    /// Its acts (claims, releases, reclaims, force releases, resets), oldest first.
    pub entries: Vec<AuditEntry>,
    /// That Events live only as long as the API server's event TTL ([`TTL_NOTICE`]).
    pub ttl_notice: String,
}

/// The audit trail of `member` in `namespace` (its Events related to its pool's DesktopPool).
///
/// Errors: a bad name; RBAC does not let you list Events there (403).
#[tauri::command]
#[specta::specta]
pub async fn member_history(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<MemberHistory, ErrorView> {
    let (client, _) = current(&state)?;
    let filter = AuditFilter {
        member: Some(member),
        ..Default::default()
    };
    let entries = vdi_core::audit::list(&client, &namespace, &filter)
        .await
        .map_err(|e| e.view())?;
    Ok(MemberHistory {
        entries,
        ttl_notice: TTL_NOTICE.to_owned(),
    })
}

/// The refusal of a save on a pool without a DesktopPool.
fn unmanaged(namespace: &str, pool: &str) -> ErrorView {
    ErrorView {
        kind: ErrorKind::NotFound,
        message: format!(
            "pool {pool} in namespace {namespace} is not managed (it has no DesktopPool): it has \
             no settings to change; nothing was written"
        ),
        suggestion: Some("adopt it first (Adopt, in its settings)".into()),
        retryable: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_names_the_field_of_the_rule() {
        let spec = DesktopPoolSpec {
            golden: "g".into(),
            size: 2,
            warm: Some(3),
            ..Default::default()
        };
        let problem = PolicyProblem::from(spec.policy().unwrap_err());
        assert_eq!(problem.field, "warm");
        assert!(problem.message.starts_with("spec.warm: 3"), "{problem:?}");
    }

    #[test]
    fn settings_change_only_what_differs_and_a_cleared_limit_is_removed() {
        let spec = DesktopPoolSpec {
            golden: "g".into(),
            size: 4,
            warm: Some(1),
            max_session: Some("8h".into()),
            ..Default::default()
        };
        let now = PoolSettings::of(&spec);
        assert!(now.changes_from(&now).is_empty());
        let new = PoolSettings {
            warm: 2,
            max_session: None,
            disconnect_grace: Some("15m".into()),
            ..now.clone()
        };
        let changes = new.changes_from(&now);
        assert_eq!(changes.warm, Some(2));
        assert_eq!(changes.max_session.as_deref(), Some(NO_LIMIT));
        assert_eq!(changes.disconnect_grace.as_deref(), Some("15m"));
        assert_eq!(changes.idle_timeout, None);
        // `pool set` with these changes reads back as the settings asked for.
        assert_eq!(changes.apply(&spec).policy(), new.apply(&spec).policy());
    }
}
