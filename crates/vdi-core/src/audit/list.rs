//! Reading the audit trail: the events.k8s.io/v1 Events of a namespace whose `related` object
//! is a DesktopPool (the broker's acts and the client's force releases, [`super::record`]),
//! as [`AuditEntry`] rows, oldest first. Events from anyone else are not the trail and are
//! left out; a note that is not ours reads as text alone ([`super::parse_note`]).

use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::parse_note;
use crate::error::{Error, Result};
use crate::validate;

/// One act of the trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// When it happened (last time, for an Event repeated as a series).
    pub time: Timestamp,
    /// Namespace of the pool.
    pub namespace: String,
    /// The Event's reason (`Claimed`, `Released`, `Reclaimed`, `ForceReleased`, `Resized`, …).
    pub reason: String,
    /// The Event's action, if any.
    pub action: Option<String>,
    /// A Warning Event (something was wrong or forced).
    pub warning: bool,
    /// The identity the act concerned (the holder).
    pub user: Option<String>,
    /// Who did it when it was not the broker (a force release: the administrator).
    pub by: Option<String>,
    /// Both in one phrase, as the app's history shows them ([`who`]): `alice`,
    /// `alice (by admin)`, or `the broker` for the broker's own acts.
    pub who: String,
    /// The member VM, when the act was on one (a resize is on the DesktopPool).
    pub member: Option<String>,
    /// The pool.
    pub pool: String,
    /// Why, in a word (`disconnected`, `maxSession`, `idle`, `shrink`, `force`, …).
    pub why: Option<String>,
    /// The sentence for people.
    pub message: String,
    /// How many times it happened (an Event series), at least 1.
    pub count: i32,
    /// Who wrote it (`reportingController`/`reportingInstance`).
    pub reporter: String,
}

/// The user an act concerned and who did it, in one phrase: `alice` (her own act, or the
/// broker's for her), `alice (by admin)` (an administrator's on her behalf), `admin` (an
/// administrator's on no one), `the broker` (the broker's own, for no user: a warm start, a
/// resize it carries out). The broker's service account ([`crate::names::BROKER_USER`]) is
/// named so wherever it appears.
pub fn who(user: Option<&str>, by: Option<&str>) -> String {
    let named = |id: &str| {
        if id == crate::names::BROKER_USER {
            "the broker".to_owned()
        } else {
            id.to_owned()
        }
    };
    let by = by.filter(|b| *b != crate::names::BROKER_USER);
    match (user, by) {
        (Some(user), Some(by)) if by != user => format!("{} (by {})", named(user), named(by)),
        (Some(user), _) => named(user),
        (None, Some(by)) => named(by),
        (None, None) => "the broker".to_owned(),
    }
}

/// Which acts to list; every field narrows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only this pool's.
    pub pool: Option<String>,
    /// Only this member's.
    pub member: Option<String>,
    /// Only those at or after this time (take it from the API server's clock,
    /// [`crate::clock::ServerClock`]).
    pub since: Option<Timestamp>,
}

/// The trail's entry an Event is, or `None` when it is not one (not related to a DesktopPool).
pub fn entry_of(event: &Event) -> Option<AuditEntry> {
    let related = event.related.as_ref()?;
    let ours = related.kind.as_deref() == Some("DesktopPool")
        && related
            .api_version
            .as_deref()
            .is_some_and(|v| v.starts_with("corral.dev/"));
    if !ours {
        return None;
    }
    let note = event.note.as_deref().unwrap_or_default();
    let (facts, text) = parse_note(note);
    let facts = facts.unwrap_or_default();
    let pool = related
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or(facts.pool);
    let regarding = event.regarding.as_ref();
    let member = regarding
        .filter(|r| r.kind.as_deref() == Some("VirtualMachine"))
        .and_then(|r| r.name.clone());
    let time = event
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    let reporter = match (&event.reporting_controller, &event.reporting_instance) {
        (Some(c), Some(i)) if c != i => format!("{c}/{i}"),
        (Some(c), _) => c.clone(),
        (None, Some(i)) => i.clone(),
        (None, None) => String::new(),
    };
    Some(AuditEntry {
        time,
        namespace: event.namespace().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        action: event.action.clone(),
        warning: event.type_.as_deref() == Some("Warning"),
        who: who(facts.user.as_deref(), facts.by.as_deref()),
        user: facts.user,
        by: facts.by,
        member,
        pool,
        why: facts.why,
        message: text.to_owned(),
        count: event.series.as_ref().map_or(1, |s| s.count.max(1)),
        reporter,
    })
}

/// Whether `entry` passes `filter`.
pub fn matches(entry: &AuditEntry, filter: &AuditFilter) -> bool {
    filter.pool.as_ref().is_none_or(|p| *p == entry.pool)
        && filter
            .member
            .as_ref()
            .is_none_or(|m| entry.member.as_ref() == Some(m))
        && filter.since.is_none_or(|since| entry.time >= since)
}

/// The trail of namespace `ns` that passes `filter`, oldest first. Events live only as long as
/// the API server's event TTL ([`super::TTL_NOTICE`]).
///
/// Errors: [`Error::Invalid`] for a bad namespace, pool or member name (no request);
/// [`Error::Rejected`] `Forbidden` when RBAC does not let the caller list `events` in group
/// `events.k8s.io` there (an administrator's: [`Error::for_admins`]); [`Error::Kube`] naming
/// the list for any other failure.
pub async fn list(client: &Client, ns: &str, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
    validate::namespace(ns)?;
    if let Some(pool) = &filter.pool {
        validate::pool_name(pool)?;
    }
    if let Some(member) = &filter.member {
        validate::member_name(member)?;
    }
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&ListParams::default()).await.map_err(|e| {
        Error::kube(format!("list Events in namespace \"{ns}\""), e)
            .for_admins("read the audit trail")
    })?;
    let mut entries: Vec<AuditEntry> = list
        .items
        .iter()
        .filter_map(entry_of)
        .filter(|e| matches(e, filter))
        .collect();
    entries.sort_by(|a, b| (a.time, &a.member, &a.reason).cmp(&(b.time, &b.member, &b.reason)));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn who_names_the_user_the_administrator_and_the_broker() {
        let broker = crate::names::BROKER_USER;
        assert_eq!(who(Some("alice"), None), "alice");
        assert_eq!(who(Some("alice"), Some("alice")), "alice");
        assert_eq!(who(Some("alice"), Some("admin")), "alice (by admin)");
        assert_eq!(who(Some("alice"), Some(broker)), "alice");
        assert_eq!(who(None, Some("admin")), "admin");
        assert_eq!(who(None, Some(broker)), "the broker");
        assert_eq!(who(Some(broker), None), "the broker");
        assert_eq!(who(None, None), "the broker");
    }

    fn event(related_kind: &str, note: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": { "name": "e", "namespace": "ns" },
            "eventTime": "2026-12-04T10:00:00.000000Z",
            "reason": "Reclaimed", "action": "Revoke", "type": "Normal",
            "reportingController": "corral-vdi-broker", "reportingInstance": "pod-a",
            "regarding": { "kind": "VirtualMachine", "name": "lab-2", "namespace": "ns" },
            "related": { "apiVersion": "corral.dev/v1alpha1", "kind": related_kind, "name": "lab" },
            "note": note,
        }))
        .unwrap()
    }

    #[test]
    fn a_broker_event_reads_as_an_entry() {
        let e = entry_of(&event(
            "DesktopPool",
            r#"{"user":"alice","pool":"lab","why":"idle"} reclaimed: idle 30m"#,
        ))
        .unwrap();
        assert_eq!(e.user.as_deref(), Some("alice"));
        assert_eq!(e.member.as_deref(), Some("lab-2"));
        assert_eq!(e.pool, "lab");
        assert_eq!(e.why.as_deref(), Some("idle"));
        assert_eq!(e.message, "reclaimed: idle 30m");
        assert_eq!(e.reporter, "corral-vdi-broker/pod-a");
        assert_eq!(e.time, "2026-12-04T10:00:00Z".parse().unwrap());
    }

    #[test]
    fn other_events_are_not_the_trail_and_foreign_notes_are_text() {
        assert_eq!(entry_of(&event("Deployment", "x")), None);
        let e = entry_of(&event("DesktopPool", "written by hand")).unwrap();
        assert_eq!((e.user, e.message.as_str()), (None, "written by hand"));
    }

    #[test]
    fn the_filter_narrows() {
        let e = entry_of(&event("DesktopPool", "x")).unwrap();
        let at = |t: &str| Some(t.parse::<Timestamp>().unwrap());
        assert!(matches(&e, &AuditFilter::default()));
        assert!(matches(
            &e,
            &AuditFilter {
                pool: Some("lab".into()),
                member: Some("lab-2".into()),
                since: at("2026-12-04T10:00:00Z"),
            }
        ));
        assert!(!matches(
            &e,
            &AuditFilter {
                pool: Some("other".into()),
                ..Default::default()
            }
        ));
        assert!(!matches(
            &e,
            &AuditFilter {
                member: Some("lab-1".into()),
                ..Default::default()
            }
        ));
        assert!(!matches(
            &e,
            &AuditFilter {
                since: at("2026-12-04T10:00:01Z"),
                ..Default::default()
            }
        ));
    }
}
