//! With a broker (SPEC "Broker"), the cluster's half of a claim is the broker's: once the
//! claim's Lease is held, it labels the member for the holder, binds the holder's access
//! (writing the `corral.dev/vdi-granted-to` annotation) and starts the VM. This waits for
//! that, watching the member's VM (a watch with the field selector `metadata.name=<member>`,
//! not a poll), reports each step through the claim's progress callback, and when the broker
//! says why it cannot finish (`corral.dev/vdi-broker-reason`) shows that, failing with it if it
//! still says it when the wait ends. A member its holder stopped (bound to them, halted, no
//! reason: the broker starts only a new claim) is started by the claim itself, with the right
//! the grant gives, as a claim without a broker starts it.

use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::power::{PowerAction, start};
use super::rules::Claim;
use crate::broker::{BrokerState, BrokerStatus};
use crate::clock::{ServerClock, describe_instant};
use crate::error::{Error, ErrorKind, Result};
use crate::names::{
    ASSIGNED_TO_LABEL, BROKER_REASON_ANNOTATION, GRANTED_TO_ANNOTATION, POOL_LABEL,
    REMOVING_ANNOTATION, label_matches_identity,
};
use crate::resources::VirtualMachine;
use crate::state::{Grant, MemberState, halted, member_state};

/// One step of a claim the broker finishes, as both front ends show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ClaimProgress {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// The member whose Lease is held; while no member is free, the member the claim waits
    /// for the broker to release.
    pub member: String,
    /// What happens now: "granting: waiting for the broker to bind access and start
    /// <member>", the broker's reason when it says it cannot finish, or that no broker replica
    /// leads.
    pub message: String,
    /// The broker's reason (the VM's `corral.dev/vdi-broker-reason`), when it gives one.
    pub reason: Option<String>,
    /// Milliseconds since the Lease was held.
    pub elapsed_ms: u64,
}

/// What the claim of `member` still waits for, from its VM as read: nothing (an empty list)
/// once the assigned-to label and the granted-to annotation both name `assignee` and the VM's
/// printableStatus is `Running`.
pub(super) fn missing(vm: &VirtualMachine, assignee: &str) -> Vec<String> {
    let names = |value: Option<&String>| value.is_some_and(|v| label_matches_identity(v, assignee));
    let mut missing = Vec::new();
    if !names(vm.labels().get(ASSIGNED_TO_LABEL)) {
        missing.push(format!("not labelled for {assignee} yet"));
    }
    if !names(vm.annotations().get(GRANTED_TO_ANNOTATION)) {
        missing.push(format!("{assignee}'s access not bound yet"));
    }
    match vm.printable_status() {
        "Running" => {}
        power => missing.push(format!("the VM is {power}")),
    }
    missing
}

/// The broker's reason on `vm`, if it gives one.
fn reason(vm: &VirtualMachine) -> Option<String> {
    vm.annotations()
        .get(BROKER_REASON_ANNOTATION)
        .filter(|r| !r.trim().is_empty())
        .cloned()
}

/// What a claim shows while the broker works on `member`.
pub(super) fn granting_words(member: &str) -> String {
    format!("granting: waiting for the broker to bind access and start {member}")
}

/// What a claim shows while no broker replica leads: when one last said it was there (its
/// latest heartbeat), as of `now`.
pub(super) fn no_leader_words(broker: &BrokerStatus, now: jiff::Timestamp) -> String {
    let last = broker
        .replicas
        .iter()
        .map(|r| r.last_seen)
        .chain(broker.last_reconcile)
        .max()
        .map_or_else(|| "never".to_owned(), |t| describe_instant(t, now));
    format!("no broker replica leads (last renewed {last}): the claim waits")
}

/// Whether the claim itself starts `vm`: it is bound to `assignee` (label and grant), stopped
/// and halted — its holder stopped it — and the broker gives no reason (it starts only a new
/// claim, or retries a start that failed).
fn owed_start(vm: &VirtualMachine, assignee: &str) -> bool {
    let names = |value: Option<&String>| value.is_some_and(|v| label_matches_identity(v, assignee));
    names(vm.labels().get(ASSIGNED_TO_LABEL))
        && names(vm.annotations().get(GRANTED_TO_ANNOTATION))
        && vm.printable_status() == "Stopped"
        && halted(vm)
        && reason(vm).is_none()
}

/// Waits until the broker has finished `claim`'s half on `member` ([`missing`] is empty),
/// watching the VM, at most `timeout` from now; reports a [`ClaimProgress`] first and then on
/// every change of what it shows. Starts the VM itself when it is bound to the assignee but
/// its holder stopped it ([`owed_start`]). Returns what was done to the VM's power:
/// [`PowerAction::BrokerStarted`], or [`PowerAction::Started`] when the claim started it.
///
/// Errors: [`Error::Partial`] when the wait ends first: the Lease is kept (the broker goes
/// on), the message says what is still missing, and the source is the broker's reason if it
/// gives one, else that no replica leads, else that the broker said nothing; also when the
/// claim's own start fails.
pub(super) async fn await_grant(
    client: &Client,
    clock: &ServerClock,
    claim: &Claim<'_>,
    member: &str,
    broker: &BrokerStatus,
    timeout: Duration,
    progress: &(dyn Fn(ClaimProgress) + Send + Sync),
) -> Result<PowerAction> {
    let started = tokio::time::Instant::now();
    let mut power = PowerAction::BrokerStarted;
    let deadline = started + timeout;
    let leaderless = broker.state == BrokerState::NoLeader;
    let idle_words = || {
        if leaderless {
            no_leader_words(broker, clock.now())
        } else {
            granting_words(member)
        }
    };
    let report = |message: &str, reason: Option<&String>| {
        progress(ClaimProgress {
            namespace: claim.namespace.to_owned(),
            pool: claim.pool.to_owned(),
            member: member.to_owned(),
            message: message.to_owned(),
            reason: reason.cloned(),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
    };
    let mut shown = idle_words();
    report(&shown, None);
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), claim.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={member}"));
    let mut events = pin!(
        watcher(vms, config)
            .backoff(crate::watch::default_backoff())
            .applied_objects()
    );
    let mut last: Option<VirtualMachine> = None;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(vm))) => {
                if missing(&vm, claim.assignee).is_empty() {
                    return Ok(power);
                }
                if power == PowerAction::BrokerStarted && owed_start(&vm, claim.assignee) {
                    power =
                        start(client, claim.namespace, &vm)
                            .await
                            .map_err(|e| Error::Partial {
                                message: format!(
                                    "{member} is granted to {} but stopped, and starting it failed",
                                    claim.assignee
                                ),
                                suggestion: format!(
                                    "fix the cause and run the same assign again, or `corral-vdi \
                                 unassign {member} -n {}` to give it back",
                                    claim.namespace
                                ),
                                source: Box::new(e),
                            })?;
                }
                let why = reason(&vm);
                // The broker acted on it: a replica leads now, whatever was read before.
                let acted = vm.labels().contains_key(ASSIGNED_TO_LABEL)
                    || vm.annotations().contains_key(GRANTED_TO_ANNOTATION);
                let message = match &why {
                    Some(why) => why.clone(),
                    None if acted => granting_words(member),
                    None => idle_words(),
                };
                if message != shown {
                    shown = message;
                    report(&shown, why.as_ref());
                }
                last = Some(vm);
            }
            Ok(Some(Err(e))) => {
                tracing::warn!(%member, error = %e, "watching the member while the broker grants it; retrying");
            }
            // The watcher retries for ever; it ends only with the deadline.
            Ok(None) | Err(_) => {
                return Err(timed_out(
                    claim,
                    member,
                    broker,
                    timeout,
                    last.as_ref(),
                    clock,
                ));
            }
        }
    }
}

/// With a broker, when no member of the claim's pool is free but `releasing` are (claims that
/// ended, which the broker is clearing: [`crate::state::MemberState::Releasing`]): waits, a
/// watch on the pool's VMs (not a poll), until one of them carries neither the assigned-to
/// label nor the granted-to annotation, is being removed, or is deleted, reporting the wait to
/// `progress` as it starts. Returns whether one did before
/// `deadline`; a watch error is logged and retried until then.
pub(super) async fn await_release(
    client: &Client,
    claim: &Claim<'_>,
    releasing: &[String],
    deadline: tokio::time::Instant,
    progress: &(dyn Fn(ClaimProgress) + Send + Sync),
) -> bool {
    let Some(first) = releasing.first() else {
        return false;
    };
    let started = tokio::time::Instant::now();
    progress(ClaimProgress {
        namespace: claim.namespace.to_owned(),
        pool: claim.pool.to_owned(),
        member: first.clone(),
        message: format!(
            "no member of {} is free: waiting for the broker to finish releasing {}",
            claim.pool,
            releasing.join(", ")
        ),
        reason: None,
        elapsed_ms: 0,
    });
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), claim.namespace);
    let config = watcher::Config::default().labels(&format!("{POOL_LABEL}={}", claim.pool));
    let mut events = pin!(watcher(vms, config).backoff(crate::watch::default_backoff()));
    let ours = |vm: &VirtualMachine| releasing.contains(&vm.name_any());
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(watcher::Event::Apply(vm) | watcher::Event::InitApply(vm)))) => {
                // Released once the member no longer reads releasing by the views' own rule
                // (no Lease: the claim ended), or once it is being removed (then another
                // member, or none, is free).
                let label = vm.labels().get(ASSIGNED_TO_LABEL).map(String::as_str);
                let still =
                    member_state(label, None, Some(Grant::of(&vm))) == MemberState::Releasing;
                let removing = vm.annotations().contains_key(REMOVING_ANNOTATION);
                if ours(&vm) && (!still || removing) {
                    tracing::debug!(member = %vm.name_any(), waited = ?started.elapsed(), "released by the broker");
                    return true;
                }
            }
            Ok(Some(Ok(watcher::Event::Delete(vm)))) if ours(&vm) => return true,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => {
                tracing::warn!(pool = %claim.pool, error = %e, "watching the pool while the broker releases a member; retrying");
            }
            // The watcher retries for ever; it ends only with the deadline.
            Ok(None) | Err(_) => return false,
        }
    }
}

/// The failure of a claim whose grant did not complete within `timeout`; `vm` as last seen.
fn timed_out(
    claim: &Claim<'_>,
    member: &str,
    broker: &BrokerStatus,
    timeout: Duration,
    vm: Option<&VirtualMachine>,
    clock: &ServerClock,
) -> Error {
    let (assignee, namespace) = (claim.assignee, claim.namespace);
    let still = vm.map_or_else(
        || format!("VirtualMachine {member} was not seen"),
        |vm| missing(vm, assignee).join(", "),
    );
    let source = match vm.and_then(reason) {
        Some(why) => Error::Refused {
            message: format!("the broker says: {why}"),
            suggestion: None,
        },
        None if broker.state == BrokerState::NoLeader
            && vm.is_none_or(|vm| !vm.labels().contains_key(ASSIGNED_TO_LABEL)) =>
        {
            Error::Refused {
                message: no_leader_words(broker, clock.now()),
                suggestion: None,
            }
        }
        None => Error::rejected(
            ErrorKind::Timeout,
            "the broker gave no reason",
            "an administrator checks the broker with `corral-vdi broker status`",
        ),
    };
    Error::Partial {
        message: format!(
            "{assignee} holds the Lease on {member}, but the broker has not finished the claim \
             within {} s ({still})",
            timeout.as_secs()
        ),
        suggestion: format!(
            "the Lease is kept and the broker goes on: run the same assign again to wait again \
             (it resumes with {member}), or `corral-vdi unassign {member} -n {namespace}` to give \
             it back"
        ),
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::BrokerReplica;
    use std::collections::BTreeMap;

    fn vm(label: Option<&str>, granted: Option<&str>, power: &str) -> VirtualMachine {
        let mut vm = VirtualMachine::new("dev-1", Default::default());
        if let Some(label) = label {
            vm.metadata.labels = Some(BTreeMap::from([(
                ASSIGNED_TO_LABEL.to_owned(),
                label.to_owned(),
            )]));
        }
        if let Some(granted) = granted {
            vm.metadata.annotations = Some(BTreeMap::from([(
                GRANTED_TO_ANNOTATION.to_owned(),
                granted.to_owned(),
            )]));
        }
        vm.status = Some(crate::resources::VirtualMachineStatus {
            printable_status: Some(power.into()),
            ..Default::default()
        });
        vm
    }

    #[test]
    fn a_claim_is_granted_once_label_grant_and_power_say_so() {
        assert!(missing(&vm(Some("alice"), Some("alice"), "Running"), "alice").is_empty());
        assert_eq!(
            missing(&vm(None, None, "Stopped"), "alice"),
            [
                "not labelled for alice yet",
                "alice's access not bound yet",
                "the VM is Stopped"
            ]
        );
        // A grant that still names the previous holder is no grant to the new one.
        assert_eq!(
            missing(&vm(Some("alice"), Some("bob"), "Running"), "alice"),
            ["alice's access not bound yet"]
        );
        assert_eq!(
            missing(&vm(Some("alice"), Some("alice"), "Starting"), "alice"),
            ["the VM is Starting"]
        );
        // Identities that are no label value are compared in their encoded form.
        let sa = "system:serviceaccount:vdi:kiosk";
        let encoded = crate::names::encode_identity(sa);
        assert!(missing(&vm(Some(&encoded), Some(&encoded), "Running"), sa).is_empty());
    }

    #[test]
    fn without_a_leader_the_claim_says_when_a_replica_was_last_seen() {
        let now: jiff::Timestamp = "2026-12-03T20:00:00Z".parse().unwrap();
        let mut broker = BrokerStatus {
            state: BrokerState::NoLeader,
            leader: None,
            replicas: Vec::new(),
            refusing: None,
            last_reconcile: None,
            summary: String::new(),
        };
        assert_eq!(
            no_leader_words(&broker, now),
            "no broker replica leads (last renewed never): the claim waits"
        );
        broker.replicas.push(BrokerReplica {
            identity: "broker-a".into(),
            last_seen: "2026-12-03T19:58:00Z".parse().unwrap(),
            leader: false,
            unready: None,
        });
        assert_eq!(
            no_leader_words(&broker, now),
            format!(
                "no broker replica leads (last renewed {}): the claim waits",
                describe_instant("2026-12-03T19:58:00Z".parse().unwrap(), now)
            )
        );
        assert_eq!(
            granting_words("dev-1"),
            "granting: waiting for the broker to bind access and start dev-1"
        );
    }
}
