//! A managed pool's settings as the app's settings dialog edits them ([`PoolSettings`]), and
//! their save ([`save`]): one workflow in the core (a new size through [`change::resize`], the
//! rest through [`change::set`]), of which the app's command is a call.

use kube::Client;
use serde::{Deserialize, Serialize};

use super::change::{self, NO_LIMIT, PolicyChanges};
use super::ops;
use crate::error::{Error, ErrorKind, Result};
use crate::policy::{Assignment, DesktopPool, DesktopPoolSpec, OnRelease};

/// A managed pool's settings as the dialog edits them. Durations are texts like `"90s"`,
/// `"15m"` or `"1h30m"` (`vdi_core::policy::duration`); `null` is the default (one hour for
/// `disconnectGrace`, no limit for `maxSession` and `idleTimeout`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
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
    /// How members are handed out.
    pub assignment: Assignment,
}

impl PoolSettings {
    /// The settings a DesktopPool's spec holds, as written (values out of range included:
    /// the dialog shows them with the spec's problem, to be corrected).
    pub fn of(spec: &DesktopPoolSpec) -> PoolSettings {
        PoolSettings {
            size: u32::try_from(spec.size).unwrap_or(0),
            warm: u32::try_from(spec.warm.unwrap_or(0)).unwrap_or(0),
            disconnect_grace: spec.disconnect_grace.clone(),
            max_session: spec.max_session.clone(),
            idle_timeout: spec.idle_timeout.clone(),
            on_release: spec.on_release.unwrap_or_default(),
            assignment: spec.assignment.unwrap_or_default(),
        }
    }

    /// `spec` with these settings (its golden VM kept).
    pub fn apply(&self, spec: &DesktopPoolSpec) -> DesktopPoolSpec {
        DesktopPoolSpec {
            golden: spec.golden.clone(),
            size: i32::try_from(self.size).unwrap_or(i32::MAX),
            warm: Some(i32::try_from(self.warm).unwrap_or(i32::MAX)),
            disconnect_grace: self.disconnect_grace.clone(),
            max_session: self.max_session.clone(),
            idle_timeout: self.idle_timeout.clone(),
            on_release: Some(self.on_release),
            assignment: Some(self.assignment),
        }
    }

    /// What `pool set` changes to go from `from` to these settings (size aside: that is a
    /// resize), `None` for a field left as it is.
    pub fn changes_from(&self, from: &PoolSettings) -> PolicyChanges {
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
            assignment: (self.assignment != from.assignment).then_some(self.assignment),
        }
    }
}

/// The default `disconnectGrace` as a duration text (the Lease's default duration).
fn default_grace() -> String {
    crate::policy::duration::format(jiff::SignedDuration::from_secs(
        crate::names::DEFAULT_LEASE_SECONDS.into(),
    ))
}

/// Writes `settings` to `pool`'s DesktopPool in `ns`: a new size through [`change::resize`]
/// (with warm in the same write; growth admitted as pool create is), the rest through
/// [`change::set`]. The whole spec is checked first, so that a bad timeout never follows a
/// resize written; each write carries the resourceVersion it read. Returns the DesktopPool as
/// written (as read when nothing changed, which is no error).
///
/// Errors, each before its write: [`Error::Invalid`] for a value out of range, naming the
/// field; an unmanaged pool (`NotFound`: adopt it first); growth the cluster cannot place; a
/// DesktopPool changed meanwhile (409); RBAC refusals.
pub async fn save(
    client: &Client,
    ns: &str,
    pool: &str,
    settings: &PoolSettings,
) -> Result<DesktopPool> {
    let Some(mut object) = ops::get(client, ns, pool).await? else {
        return Err(Error::rejected(
            ErrorKind::NotFound,
            format!(
                "pool {pool} in namespace {ns} is not managed (it has no DesktopPool): it has no \
                 settings to change; nothing was written"
            ),
            "adopt it first (Adopt, in its settings)",
        ));
    };
    if let Err(problem) = settings.apply(&object.spec).policy() {
        return Err(Error::invalid(
            format!("pool {pool}: {problem}; nothing was written"),
            "correct the value and save again",
        ));
    }
    let mut now = PoolSettings::of(&object.spec);
    if settings.size != now.size {
        object = change::resize(client, ns, pool, settings.size, Some(settings.warm)).await?;
        now = PoolSettings::of(&object.spec);
    }
    let changes = settings.changes_from(&now);
    if !changes.is_empty() {
        object = change::set(client, ns, pool, &changes).await?;
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

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
