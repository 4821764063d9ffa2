//! Writing one act of the audit trail as an events.k8s.io/v1 Event, the way the broker does
//! (kube-runtime's `Recorder`): regarding the object acted on, related to the pool's
//! DesktopPool ([`pool_ref`]), its note [`super::note`] of the facts and the sentence. Used by
//! the client for what it does itself (a force release).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::{Facts, note};
use kube::Resource;

use crate::policy::DesktopPool;

/// The `reportingController` of the Events the client writes.
pub const CLIENT_REPORTER: &str = "corral-vdi";

/// The `related` reference of every audit Event about `pool` in `namespace`: its DesktopPool
/// (named even when the pool has none, so that an unmanaged pool's history is found the same
/// way).
pub fn pool_ref(namespace: &str, pool: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(DesktopPool::api_version(&()).into_owned()),
        kind: Some(DesktopPool::kind(&()).into_owned()),
        name: Some(pool.into()),
        namespace: Some(namespace.into()),
        ..Default::default()
    }
}

/// The `regarding` reference of an audit Event about a pool member `vm` in `namespace`.
pub fn vm_ref(namespace: &str, vm: &crate::resources::VirtualMachine) -> ObjectReference {
    use kube::ResourceExt;
    ObjectReference {
        api_version: Some("kubevirt.io/v1".into()),
        kind: Some("VirtualMachine".into()),
        name: Some(vm.name_any()),
        namespace: Some(namespace.to_owned()),
        uid: vm.uid(),
        ..Default::default()
    }
}

/// One act for the audit trail.
#[derive(Debug, Clone)]
pub struct Act {
    /// The Event's `reason` (`ForceReleased`, …).
    pub reason: &'static str,
    /// The Event's `action` (`ForceRelease`, …).
    pub action: &'static str,
    /// A Warning Event rather than a Normal one.
    pub warning: bool,
    /// Who it concerned, who did it, the pool, why.
    pub facts: Facts,
    /// The sentence for people.
    pub text: String,
}

/// Records `act` as an Event regarding `regarding` (in its namespace), reported by
/// [`CLIENT_REPORTER`] as `instance` (who acted).
///
/// Errors: the API server's refusal (RBAC: creating `events` in group `events.k8s.io`); the
/// callers log it, since the act itself has happened.
pub async fn record(
    client: &Client,
    instance: &str,
    regarding: &ObjectReference,
    act: Act,
) -> Result<(), kube::Error> {
    let namespace = regarding.namespace.clone().unwrap_or_default();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: CLIENT_REPORTER.into(),
            // events.k8s.io/v1 bounds reportingInstance to 128 characters.
            instance: Some(instance.chars().take(128).collect()),
        },
    );
    let event = Event {
        type_: if act.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: act.reason.into(),
        note: Some(note(&act.facts, &act.text)),
        action: act.action.into(),
        secondary: Some(pool_ref(&namespace, &act.facts.pool)),
    };
    recorder.publish(&event, regarding).await
}
