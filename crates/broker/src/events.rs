//! The broker's audit Events (SPEC "Audit", the note's form in [`vdi_core::audit`]): one
//! events.k8s.io/v1 Event per act, regarding the member VM (or the DesktopPool for a resize),
//! related to the pool's DesktopPool, and the same fields as one log line (target `audit`).
//! A failed Event is logged, never fatal.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use vdi_core::audit::{Facts, note};

/// One act to record.
#[derive(Debug, Clone)]
pub struct Act<'a> {
    /// The Event's `reason` (`Claimed`, `Reclaimed`, `Resized`, …).
    pub reason: &'a str,
    /// The Event's `action` (`Grant`, `Revoke`, `Refuse`, `Start`, `Resize`, `Reset`, …).
    pub action: &'a str,
    /// A Warning Event (something is wrong) rather than a Normal one.
    pub warning: bool,
    /// Who it served, the pool, why.
    pub facts: Facts,
    /// The sentence for people.
    pub text: String,
}

/// The `related` reference of every Event about `pool` in `namespace`: its DesktopPool
/// (named even when the pool has none).
pub fn pool_ref(namespace: &str, pool: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("corral.dev/v1alpha1".into()),
        kind: Some("DesktopPool".into()),
        name: Some(pool.into()),
        namespace: Some(namespace.into()),
        ..Default::default()
    }
}

/// Records `act` as an Event regarding `regarding` (in `namespace`), and as a log line.
pub async fn record(
    recorder: &Recorder,
    regarding: &ObjectReference,
    namespace: &str,
    act: Act<'_>,
) {
    let Act {
        reason,
        action,
        warning,
        facts,
        text,
    } = act;
    let object = regarding.name.as_deref().unwrap_or_default();
    macro_rules! log {
        ($level:ident) => {
            tracing::$level!(
                target: "audit",
                reason,
                user = facts.user.as_deref().map(crate::decide::shown).as_deref(),
                by = facts.by.as_deref(),
                pool = facts.pool,
                why = facts.why.as_deref(),
                object,
                namespace,
                "{text}"
            )
        };
    }
    if warning {
        log!(warn);
    } else {
        log!(info);
    }
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note(&facts, &text)),
        action: action.into(),
        secondary: Some(pool_ref(namespace, &facts.pool)),
    };
    if let Err(e) = recorder.publish(&event, regarding).await {
        tracing::warn!(namespace, object, error = %e, "cannot record Event {reason}");
    }
}
