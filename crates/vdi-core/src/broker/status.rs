//! Whether a broker runs on the cluster, read from its leader-election Lease
//! (`corral-vdi-broker` in `corral-vdi-system`, SPEC "Broker"), which every signed-in user may
//! read once the broker's manifest is installed (the Role [`super::STATUS_ROLE`]).
//!
//! The Lease is written by the broker's replicas through `kube-lease-manager` (holder, renew
//! time, duration) and by each replica's heartbeat (`replica.corral.dev/<identity>`
//! annotations) and the leader's last full reconcile (`corral.dev/broker-last-reconcile`). Like
//! every object on the cluster it is untrusted input: it is decoded leniently
//! ([`crate::lease::ClaimLease`]) and judged by [`crate::lease::lease_view`] (the same expiry
//! rules as a claim's) against the API server's clock; a value out of range is named in the
//! summary as the Lease's own problem, never an error.

use jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::clock::{ServerClock, describe_instant};
use crate::error::{Error, Result, describe, is_status};
use crate::lease::{ClaimLease, lease_view};
use crate::names::{
    BROKER_LAST_RECONCILE_ANNOTATION, BROKER_NAME, BROKER_NAMESPACE, BROKER_REFUSING_ANNOTATION,
    BROKER_REPLICA_ANNOTATION_PREFIX, BROKER_UNREADY_ANNOTATION_PREFIX,
};

/// A replica's heartbeat older than this many Lease durations is dropped: that replica is gone
/// (a pod deleted leaves its annotation behind until the leader prunes it).
pub const STALE_REPLICA_DURATIONS: i32 = 3;

/// Whether a broker acts on this cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum BrokerState {
    /// A replica (one with a heartbeat) holds the leader Lease, renewed within its duration by
    /// the API server's clock: access follows the claim (unless [`BrokerStatus::refusing`]).
    Running,
    /// The leader Lease exists but no replica holds it (released, not renewed within its
    /// duration, or held by a name no replica has recorded a heartbeat under): claims made
    /// now are not granted until a replica leads.
    NoLeader,
    /// There is no leader Lease: no broker has run on this cluster (not installed, or installed
    /// and never started). The client-side claim flow applies.
    Absent,
    /// The Lease could not be read (RBAC refused it: the broker's manifest, which lets every
    /// signed-in user read it, is not installed or its Role is missing) or cannot be judged (a
    /// value out of range); the summary says which.
    Unknown,
}

/// One replica of the broker, from its heartbeat annotation on the leader Lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct BrokerReplica {
    /// Its identity (the pod name, or `--identity`).
    pub identity: String,
    /// Its last heartbeat (`replica.corral.dev/<identity>`).
    pub last_seen: Timestamp,
    /// Whether it is the Lease's current holder.
    pub leader: bool,
    /// Its readiness record (`unready.corral.dev/<identity>`, at most 500 characters): "since
    /// <time>: <why>" while it is not ready, "from <time> to <time>: <why>" for the last time
    /// it was not; `None` when it never was.
    pub unready: Option<String>,
}

/// What the cluster's broker is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct BrokerStatus {
    /// The verdict.
    pub state: BrokerState,
    /// The replica leading now ([`BrokerState::Running`] only).
    pub leader: Option<String>,
    /// The replicas seen within [`STALE_REPLICA_DURATIONS`] Lease durations, by identity.
    pub replicas: Vec<BrokerReplica>,
    /// The leader's last full reconcile (`corral.dev/broker-last-reconcile`).
    pub last_reconcile: Option<Timestamp>,
    /// One or more sentences saying what that means and what to do, naming what on the Lease
    /// could not be read.
    pub summary: String,
    /// Why the leading broker grants no claim ([`BROKER_REFUSING_ANNOTATION`]: the cluster
    /// does not enforce the claim rules); `None` while it grants, or when none leads.
    pub refusing: Option<String>,
}

impl BrokerStatus {
    /// Whether a broker was found at all (running or not): with one installed, the client
    /// leaves the cluster's half of a claim to it.
    pub fn installed(&self) -> bool {
        matches!(self.state, BrokerState::Running | BrokerState::NoLeader)
    }
}

/// Where the Lease is, for messages.
fn lease_words() -> String {
    format!("the Lease {BROKER_NAME} in namespace \"{BROKER_NAMESPACE}\"")
}

/// Reads the broker's leader Lease and judges it by the API server's clock ([`status_of`]).
///
/// Reading it with a plain `get` is what the Role [`super::STATUS_ROLE`] allows every signed-in
/// user (a `list` or `watch` must carry the field selector `metadata.name=corral-vdi-broker`,
/// as RBAC's `resourceNames` demands). A 404 is [`BrokerState::Absent`]; a 403 is
/// [`BrokerState::Unknown`], naming that Role (without the manifest nobody but an administrator
/// may read the Lease, so a refusal cannot tell "no broker" from "a broker whose Role was
/// removed").
///
/// Errors: only when the cluster cannot be reached (or answers with another error).
pub async fn status(client: &Client) -> Result<BrokerStatus> {
    let api: Api<ClaimLease> = Api::namespaced(client.clone(), BROKER_NAMESPACE);
    match api.get(BROKER_NAME).await {
        Ok(lease) => {
            let clock = ServerClock::measure(client).await?;
            Ok(status_of(Some(&lease), clock.now()))
        }
        Err(e) if is_status(&e, 404) => Ok(status_of(None, Timestamp::now())),
        Err(e) if is_status(&e, 403) => Ok(BrokerStatus {
            state: BrokerState::Unknown,
            leader: None,
            replicas: Vec::new(),
            refusing: None,
            last_reconcile: None,
            summary: format!(
                "cannot tell whether a broker runs on this cluster: you may not read {} ({}); \
                 the broker's manifest lets every signed-in user read it (Role {} in namespace \
                 \"{BROKER_NAMESPACE}\"), so either no broker is installed or that Role is \
                 missing: an administrator runs `corral-vdi broker install`",
                lease_words(),
                describe(&e),
                super::STATUS_ROLE,
            ),
        }),
        Err(e) => Err(Error::kube(format!("read {}", lease_words()), e)),
    }
}

/// The broker's status from its leader Lease (`None`: there is none) as of `now`, the API
/// server's time. Never fails: a value out of range (a time the time library cannot hold, a
/// duration outside `int32`, an annotation that is no RFC 3339 time) is named in the summary.
///
/// - [`BrokerState::Running`]: the Lease is active by [`lease_view`]'s rule (a holder, and
///   `renewTime + leaseDurationSeconds` after `now`);
/// - [`BrokerState::NoLeader`]: readable, but not active;
/// - [`BrokerState::Unknown`]: `renewTime`, `acquireTime` or the duration cannot be read;
/// - [`BrokerState::Absent`]: no Lease.
///
/// Replicas are the `replica.corral.dev/<identity>` annotations whose time lies within
/// [`STALE_REPLICA_DURATIONS`] × `leaseDurationSeconds` before `now` (all readable ones when the
/// duration is not known), sorted by identity.
pub fn status_of(lease: Option<&ClaimLease>, now: Timestamp) -> BrokerStatus {
    let Some(lease) = lease else {
        return BrokerStatus {
            state: BrokerState::Absent,
            leader: None,
            replicas: Vec::new(),
            refusing: None,
            last_reconcile: None,
            summary: format!(
                "no broker on this cluster ({} does not exist): anyone who may claim here can \
                 open any desktop's console; an administrator installs one with `corral-vdi \
                 broker install`",
                lease_words()
            ),
        };
    };
    let view = lease_view(lease, now);
    let mut problems = Vec::new();
    if let Some(problem) = &view.problem {
        problems.push(problem.clone());
    }
    let oldest = view.duration_seconds.and_then(|secs| {
        now.checked_sub(SignedDuration::from_secs(
            i64::from(secs) * i64::from(STALE_REPLICA_DURATIONS),
        ))
        .ok()
    });
    let mut replicas = Vec::new();
    let mut last_reconcile = None;
    let mut refusing = None;
    let unready = |identity: &str| {
        lease
            .annotations()
            .get(&format!("{BROKER_UNREADY_ANNOTATION_PREFIX}{identity}"))
            .map(|v| v.chars().take(UNREADY_CHARS).collect::<String>())
    };
    for (key, value) in lease.annotations() {
        if key.starts_with(BROKER_UNREADY_ANNOTATION_PREFIX) {
            continue;
        }
        let mut time = || match value.parse::<Timestamp>() {
            Ok(t) => Some(t),
            Err(_) => {
                problems.push(format!(
                    "annotation {key} is {}, not an RFC 3339 time before the year 9999",
                    shown(value)
                ));
                None
            }
        };
        if key == BROKER_REFUSING_ANNOTATION {
            refusing = Some(value.chars().take(REFUSING_CHARS).collect::<String>());
            continue;
        }
        if key == BROKER_LAST_RECONCILE_ANNOTATION {
            last_reconcile = time();
        } else if let Some(identity) = key.strip_prefix(BROKER_REPLICA_ANNOTATION_PREFIX)
            && let Some(last_seen) = time().filter(|t| oldest.is_none_or(|o| *t >= o))
        {
            replicas.push(BrokerReplica {
                identity: identity.to_owned(),
                last_seen,
                leader: view.active && view.holder.as_deref() == Some(identity),
                unready: unready(identity),
            });
        }
    }
    replicas.sort_by(|a, b| a.identity.cmp(&b.identity));

    let seen = match replicas.len() {
        1 => "1 replica seen".to_owned(),
        n => format!("{n} replicas seen"),
    };
    let reconciled = last_reconcile.map_or_else(
        || "no full reconcile recorded yet".to_owned(),
        |t| format!("last full reconcile {}", describe_instant(t, now)),
    );
    let (state, leader, mut summary) = if view.problem.is_some() {
        (
            BrokerState::Unknown,
            None,
            format!(
                "cannot tell whether the broker leads: {} cannot be judged; an administrator \
                 deletes it (the broker's replicas write it anew)",
                lease_words()
            ),
        )
    } else if view.active && replicas.iter().any(|r| r.leader) {
        let holder = view.holder.clone().unwrap_or_default();
        let renewed = view.renewed_at.or(view.acquired_at).map_or_else(
            || "no renew time".to_owned(),
            |t| format!("renewed {}", describe_instant(t, now)),
        );
        let mut words = format!(
            "a broker runs on this cluster: {holder} leads ({renewed}), {seen}, {reconciled}; \
             each desktop's console, forwards, USB and power go to its holder only"
        );
        if view.renew_time_in_future {
            problems.push(format!(
                "its renewTime lies in the future by the API server's clock: the clock of \
                 {holder} is ahead"
            ));
        }
        if let Some(why) = &refusing {
            words = format!(
                "a broker runs on this cluster ({holder} leads, {renewed}) but grants no desktop: \
                 {why}"
            );
        }
        (BrokerState::Running, Some(holder), words)
    } else {
        let last = match (&view.holder, view.expires_at) {
            // Held, but not by a replica: nobody that reconciles (only the broker's
            // ServiceAccount writes the Lease where the guard is installed).
            (Some(holder), _) if view.active => format!(
                "it names {}, which is no replica: none has recorded a heartbeat under that name",
                shown(holder)
            ),
            (Some(holder), Some(expired)) => {
                format!("{holder} held it until {}", describe_instant(expired, now))
            }
            _ => "no replica holds it".to_owned(),
        };
        (
            BrokerState::NoLeader,
            None,
            format!(
                "the broker is installed but no replica leads ({} exists; {last}; {seen}, \
                 {reconciled}): claims made now are not granted until one leads; an \
                 administrator checks its pods (`kubectl -n {BROKER_NAMESPACE} get pods`)",
                lease_words()
            ),
        )
    };
    if !problems.is_empty() {
        summary.push_str(&format!(". On {}: {}", lease_words(), problems.join("; ")));
    }
    BrokerStatus {
        refusing: refusing.filter(|_| state == BrokerState::Running),
        state,
        leader,
        replicas,
        last_reconcile,
        summary,
    }
}

/// The most characters of the leader's refusal ([`BROKER_REFUSING_ANNOTATION`]) shown.
const REFUSING_CHARS: usize = 1000;
/// The most characters of a replica's readiness record kept.
const UNREADY_CHARS: usize = 500;

/// Longest annotation value a problem quotes.
const QUOTED_CHARS: usize = 40;

/// `value` quoted for a problem, cut to [`QUOTED_CHARS`].
fn shown(value: &str) -> String {
    if value.chars().count() <= QUOTED_CHARS {
        format!("{value:?}")
    } else {
        let cut: String = value.chars().take(QUOTED_CHARS).collect();
        format!("{cut:?}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn now() -> Timestamp {
        "2026-12-03T12:00:00Z".parse().unwrap()
    }

    fn lease(spec: Value, annotations: Value) -> ClaimLease {
        serde_json::from_value(json!({
            "metadata": { "name": BROKER_NAME, "namespace": BROKER_NAMESPACE,
                          "annotations": annotations },
            "spec": spec,
        }))
        .unwrap()
    }

    fn held(renew: &str) -> Value {
        json!({ "holderIdentity": "broker-a", "renewTime": renew, "leaseDurationSeconds": 15 })
    }

    #[test]
    fn no_lease_is_absent_and_says_what_that_means() {
        let status = status_of(None, now());
        assert_eq!(status.state, BrokerState::Absent);
        assert!(!status.installed());
        assert!(
            status
                .summary
                .contains("anyone who may claim here can open any desktop's console"),
            "{}",
            status.summary
        );
    }

    #[test]
    fn a_renewed_holder_leads_and_stale_replicas_are_dropped() {
        let status = status_of(
            Some(&lease(
                held("2026-12-03T11:59:55.000000Z"),
                json!({
                    "replica.corral.dev/broker-b": "2026-12-03T11:59:58Z",
                    "replica.corral.dev/broker-a": "2026-12-03T11:59:57Z",
                    // 3 × 15 s = 45 s: a pod gone a minute ago is no replica any more.
                    "replica.corral.dev/broker-old": "2026-12-03T11:59:00Z",
                    "corral.dev/broker-last-reconcile": "2026-12-03T11:59:50Z",
                    "unrelated": "x",
                }),
            )),
            now(),
        );
        assert_eq!(status.state, BrokerState::Running, "{}", status.summary);
        assert_eq!(status.leader.as_deref(), Some("broker-a"));
        let replicas: Vec<(&str, bool)> = status
            .replicas
            .iter()
            .map(|r| (r.identity.as_str(), r.leader))
            .collect();
        assert_eq!(replicas, [("broker-a", true), ("broker-b", false)]);
        assert_eq!(
            status.last_reconcile,
            Some("2026-12-03T11:59:50Z".parse().unwrap())
        );
        assert!(
            status.summary.starts_with(
                "a broker runs on this cluster: broker-a leads (renewed 2026-12-03 11:59:55 UTC \
                 (5s ago)), 2 replicas seen, last full reconcile 2026-12-03 11:59:50 UTC (10s ago)"
            ),
            "{}",
            status.summary
        );
    }

    #[test]
    fn a_lease_not_renewed_within_its_duration_has_no_leader() {
        let status = status_of(
            Some(&lease(
                held("2026-12-03T11:59:30.000000Z"),
                json!({ "replica.corral.dev/broker-a": "2026-12-03T11:59:30Z" }),
            )),
            now(),
        );
        assert_eq!(status.state, BrokerState::NoLeader);
        assert!(status.installed());
        assert_eq!(status.leader, None);
        assert!(
            !status.replicas[0].leader,
            "an expired holder leads nothing"
        );
        assert!(
            status
                .summary
                .contains("broker-a held it until 2026-12-03 11:59:45 UTC (15s ago)"),
            "{}",
            status.summary
        );
        // Released: no holder at all.
        let status = status_of(Some(&lease(json!({}), json!({}))), now());
        assert_eq!(status.state, BrokerState::NoLeader);
        assert!(
            status.summary.contains("no replica holds it"),
            "{}",
            status.summary
        );
    }

    #[test]
    fn a_lease_held_by_no_replica_has_no_leader() {
        // bob wrote himself into the Lease (a cluster without the guard's rule for it): both
        // replicas beat, neither leads.
        let lease = lease(
            json!({ "holderIdentity": "bob", "renewTime": "2026-12-03T11:59:58.000000Z",
                    "leaseDurationSeconds": 15 }),
            json!({ "replica.corral.dev/broker-a": "2026-12-03T11:59:58Z",
                    "replica.corral.dev/broker-b": "2026-12-03T11:59:57Z" }),
        );
        let status = status_of(Some(&lease), now());
        assert_eq!((status.state, status.leader), (BrokerState::NoLeader, None));
        assert!(status.replicas.iter().all(|r| !r.leader));
        assert!(
            status
                .summary
                .contains("it names \"bob\", which is no replica"),
            "{}",
            status.summary
        );
    }

    #[test]
    fn a_leader_that_refuses_claims_says_why() {
        let lease = lease(
            held("2026-12-03T11:59:58.000000Z"),
            json!({ "replica.corral.dev/broker-a": "2026-12-03T11:59:58Z",
                    "corral.dev/broker-refusing": "the guard is not installed" }),
        );
        let status = status_of(Some(&lease), now());
        assert_eq!(status.state, BrokerState::Running);
        assert_eq!(
            status.refusing.as_deref(),
            Some("the guard is not installed")
        );
        assert!(
            status
                .summary
                .contains("grants no desktop: the guard is not installed"),
            "{}",
            status.summary
        );
    }

    #[test]
    fn values_out_of_range_are_the_leases_problem_never_an_error() {
        // A renew time the time library cannot hold: the Lease cannot be judged.
        let status = status_of(
            Some(&lease(
                held("9999-12-31T23:59:59.000000Z"),
                json!({ "replica.corral.dev/broker-a": "2026-12-03T11:59:58Z" }),
            )),
            now(),
        );
        assert_eq!(status.state, BrokerState::Unknown);
        assert!(
            status
                .summary
                .contains("renewTime 9999-12-31T23:59:59.000000Z is out of range"),
            "{}",
            status.summary
        );
        // A huge duration.
        let status = status_of(
            Some(&lease(
                json!({ "holderIdentity": "broker-a", "renewTime": "2026-12-03T11:59:58.000000Z",
                        "leaseDurationSeconds": 99_999_999_999_i64 }),
                json!({}),
            )),
            now(),
        );
        assert_eq!(status.state, BrokerState::Unknown);
        assert!(
            status
                .summary
                .contains("leaseDurationSeconds 99999999999 is out of range"),
            "{}",
            status.summary
        );
        // Garbage and the end of the calendar in the annotations: named, the rest still read.
        let status = status_of(
            Some(&lease(
                held("2026-12-03T11:59:58.000000Z"),
                json!({
                    "replica.corral.dev/broker-a": "2026-12-03T11:59:58Z",
                    "replica.corral.dev/broker-x": "yesterday",
                    "corral.dev/broker-last-reconcile": "9999-12-31T23:59:59Z",
                }),
            )),
            now(),
        );
        assert_eq!(status.state, BrokerState::Running, "{}", status.summary);
        assert_eq!(status.replicas.len(), 1);
        assert_eq!(status.last_reconcile, None);
        for named in [
            "annotation replica.corral.dev/broker-x is \"yesterday\", not an RFC 3339 time",
            "annotation corral.dev/broker-last-reconcile is \"9999-12-31T23:59:59Z\", not an \
             RFC 3339 time before the year 9999",
        ] {
            assert!(
                status.summary.contains(named),
                "{named}: {}",
                status.summary
            );
        }
    }
}
