//! Claim Leases read as untrusted input.
//!
//! A Lease is written by whoever may write Leases in the namespace, and the API server checks
//! little of it: any `renewTime` Go can parse (years 0000–9999) and any positive `int32`
//! duration pass its validation. Read with k8s-openapi's typed `Lease`, a time the time library
//! cannot hold (jiff's range ends at 9999-12-30T22:00Z) fails the decoding of the whole list,
//! and a duration added to a time at the end of the calendar overflows. So claim Leases are
//! read here as [`ClaimLease`]: the same object with its times kept as the strings the API
//! server stored, parsed one by one, each failure that one Lease's own problem
//! ([`crate::lease::LeaseView::problem`]), never the list's.
//!
//! One rule joins a Lease to a member everywhere (SPEC "Names on the cluster"): the claim of
//! member M is the Lease named `corral-vdi-M` in M's namespace ([`crate::names::lease_name`]).
//! Its labels only help a list find it; a Lease labelled with a pool under any other name is a
//! *stray Lease*: shown as such, never joined to a member, never deleted with the pool.

use std::borrow::Cow;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::names::{ASSIGNED_BY_ANNOTATION, LEASE_PREFIX, POOL_LABEL};
use crate::scope::Scope;

/// How far a Lease's `renewTime` may lie ahead of the API server's clock before it is reported
/// as being in the future (allows for the one-second resolution of the `Date` header).
pub const FUTURE_TOLERANCE: SignedDuration = SignedDuration::from_secs(5);

/// A Lease (coordination.k8s.io/v1) as read for a claim: metadata as usual, the spec with its
/// times as strings (see the module doc).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
pub struct ClaimLease {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`, absent on a Lease written without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<RawLeaseSpec>,
}

/// `LeaseSpec` with nothing that can fail to decode: MicroTimes as the strings stored, numbers
/// as `i64` (the API server keeps them within `int32`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RawLeaseSpec {
    /// `holderIdentity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// `acquireTime` (MicroTime: RFC 3339 with 6 fractional digits), as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<String>,
    /// `renewTime`, as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// `leaseDurationSeconds`, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i64>,
    /// `leaseTransitions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i64>,
}

impl Resource for ClaimLease {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Lease".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "coordination.k8s.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "coordination.k8s.io/v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "leases".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<Lease> for ClaimLease {
    /// The lenient form of a typed Lease (one this product wrote, or any that decoded).
    fn from(lease: Lease) -> Self {
        // A MicroTime as the API server stores it (k8s-openapi writes 6 fractional digits).
        let stored = |t: Option<MicroTime>| {
            t.and_then(|t| serde_json::to_value(t).ok())
                .and_then(|v| v.as_str().map(str::to_owned))
        };
        ClaimLease {
            metadata: lease.metadata,
            spec: lease.spec.map(|s| RawLeaseSpec {
                holder_identity: s.holder_identity,
                acquire_time: stored(s.acquire_time),
                renew_time: stored(s.renew_time),
                lease_duration_seconds: s.lease_duration_seconds.map(i64::from),
                lease_transitions: s.lease_transitions.map(i64::from),
            }),
        }
    }
}

impl ClaimLease {
    /// `spec.holderIdentity`, when set and not empty.
    pub fn holder(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .filter(|h| !h.is_empty())
    }

    /// `spec.leaseTransitions`, 0 when absent (or out of `int32`, which the API server refuses).
    pub fn transitions(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .and_then(|t| i32::try_from(t).ok())
            .unwrap_or(0)
    }
}

/// Whether a Lease concerns Corral VDI's claims at all: named like a claim (`corral-vdi-…`) or
/// labelled with a pool. Feeds keep only these (a cluster's other Leases, such as leader
/// elections renewed every few seconds, would only cost regroupings).
pub fn concerns_claims(lease: &ClaimLease) -> bool {
    lease.name_any().starts_with(LEASE_PREFIX) || lease.labels().contains_key(POOL_LABEL)
}

/// Parses a MicroTime as stored, naming the field in the problem when it cannot be held.
fn parse_time(field: &str, raw: Option<&str>) -> std::result::Result<Option<Timestamp>, String> {
    match raw {
        None | Some("") => Ok(None),
        Some(raw) => raw
            .parse::<Timestamp>()
            .map(Some)
            .map_err(|_| format!("{field} {raw} is out of range")),
    }
}

/// Reads a claim Lease as of `now` (the API server's time), never failing: what cannot be read
/// is the view's [`LeaseView::problem`].
///
/// Active means: `holderIdentity` is set and non-empty, and `renewTime` (else `acquireTime`)
/// plus `leaseDurationSeconds` lies after `now` (SPEC "Names on the cluster"). A Lease without
/// a duration never expires only if it has a holder; Kubernetes leaves the duration optional,
/// Corral always sets it.
///
/// A problem (a time beyond what [`Timestamp`] holds, an expiry past the end of the calendar,
/// a duration outside 1..=`i32::MAX` seconds) makes the Lease inactive and its times absent;
/// [`crate::state::member_state`] shows its member as an unreadable claim.
pub fn lease_view(lease: &ClaimLease, now: Timestamp) -> LeaseView {
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = lease.holder().map(str::to_owned);
    let read = || -> std::result::Result<_, String> {
        let acquired_at = parse_time("acquireTime", spec.acquire_time.as_deref())?;
        let renewed_at = parse_time("renewTime", spec.renew_time.as_deref())?;
        let duration = match spec.lease_duration_seconds {
            None => None,
            Some(secs) => Some(
                i32::try_from(secs)
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("leaseDurationSeconds {secs} is out of range"))?,
            ),
        };
        let expires_at = match (renewed_at.or(acquired_at), duration) {
            (Some(last), Some(secs)) => Some(
                last.checked_add(SignedDuration::from_secs(i64::from(secs)))
                    .map_err(|_| {
                        format!(
                            "{} plus leaseDurationSeconds {secs} is beyond the end of the calendar",
                            if renewed_at.is_some() {
                                "renewTime"
                            } else {
                                "acquireTime"
                            }
                        )
                    })?,
            ),
            _ => None,
        };
        Ok((acquired_at, renewed_at, duration, expires_at))
    };
    let (acquired_at, renewed_at, duration, expires_at, problem) = match read() {
        Ok((a, r, d, e)) => (a, r, d, e, None),
        Err(problem) => (None, None, None, None, Some(problem)),
    };
    let active = problem.is_none() && holder.is_some() && expires_at.is_none_or(|exp| exp > now);
    let renew_time_in_future = renewed_at.is_some_and(|r| {
        now.checked_add(FUTURE_TOLERANCE)
            .is_ok_and(|limit| r > limit)
    });
    LeaseView {
        holder,
        acquired_at,
        renewed_at,
        duration_seconds: duration,
        expires_at,
        active,
        renew_time_in_future,
        transitions: lease.transitions(),
        resource_version: lease.resource_version(),
        problem,
        assigned_by: lease
            .annotations()
            .get(ASSIGNED_BY_ANNOTATION)
            .filter(|by| !by.is_empty() && Some(by.as_str()) != lease.holder())
            .cloned(),
    }
}

/// The field selector of Lease lists and watches in `scope`: in all namespaces, every namespace
/// but `kube-node-lease`, whose one Lease per node is renewed every 10 s (kubelet's node
/// heartbeat) and is never a claim.
pub(crate) fn fields(scope: &Scope) -> Option<&'static str> {
    match scope {
        Scope::Namespace(_) => None,
        Scope::All => Some("metadata.namespace!=kube-node-lease"),
    }
}

/// Lists every Lease in `scope` that [`concerns_claims`], decoded leniently.
///
/// All Leases are listed, not only labelled ones: a claim Lease is found by its name, and one
/// written without labels (by another tool, or by hand) must still keep its member from being
/// shown free (SPEC: the claim of M is the Lease `corral-vdi-M`).
///
/// Errors: [`Error::Kube`] when the list fails (403 names the namespace).
pub async fn list(client: &Client, scope: &Scope) -> Result<Vec<ClaimLease>> {
    let (api, where_): (Api<ClaimLease>, _) = match scope {
        Scope::Namespace(ns) => (
            Api::namespaced(client.clone(), ns),
            format!("in namespace \"{ns}\""),
        ),
        Scope::All => (Api::all(client.clone()), "in all namespaces".to_owned()),
    };
    let mut params = ListParams::default();
    if let Some(fields) = fields(scope) {
        params = params.fields(fields);
    }
    let list = api
        .list(&params)
        .await
        .map_err(|e| Error::kube(format!("list Leases {where_}"), e))?;
    Ok(list.items.into_iter().filter(concerns_claims).collect())
}

/// Reads the claim Lease `name` in `namespace`, if it exists, decoded leniently.
///
/// Errors: [`Error::Kube`] when the request fails.
pub async fn get(client: &Client, namespace: &str, name: &str) -> Result<Option<ClaimLease>> {
    Api::<ClaimLease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(format!("read Lease {name} in namespace \"{namespace}\""), e))
}

/// What the member's ownership Lease (`corral-vdi-<member>`) says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `spec.holderIdentity`: the full identity of the holder.
    pub holder: Option<String>,
    /// `spec.acquireTime`.
    pub acquired_at: Option<Timestamp>,
    /// `spec.renewTime`.
    pub renewed_at: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`, in seconds.
    pub duration_seconds: Option<i32>,
    /// `renewTime + leaseDurationSeconds`.
    pub expires_at: Option<Timestamp>,
    /// Active: a holder, and the expiry is in the future by the API server's clock.
    pub active: bool,
    /// `renewTime` lies in the future by the API server's clock: reported, never trusted.
    pub renew_time_in_future: bool,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// `metadata.resourceVersion`, which a takeover must carry.
    pub resource_version: Option<String>,
    /// Why the Lease cannot be judged ("renewTime 9999-12-31T23:59:59.000000Z is out of
    /// range"), if it cannot: then it is not active and its times are absent
    /// ([`crate::lease::lease_view`]).
    pub problem: Option<String>,
    /// Who wrote the claim for its holder, when that is someone else (an administrator's
    /// assignment): [`crate::names::ASSIGNED_BY_ANNOTATION`], which the guard pins to the
    /// writer's identity; `None` when the holder claimed for themselves.
    pub assigned_by: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-11-30T12:00:00Z".parse().unwrap()
    }

    fn raw(spec: serde_json::Value) -> ClaimLease {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": "corral-vdi-dev-1", "namespace": "ns", "resourceVersion": "9" },
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn an_assigner_is_read_only_when_someone_else_than_the_holder() {
        let mut assigned = raw(json!({ "holderIdentity": "alice" }));
        let by = |lease: &ClaimLease| lease_view(lease, now()).assigned_by;
        assert_eq!(by(&assigned), None);
        for (written, read) in [("admin", Some("admin")), ("alice", None), ("", None)] {
            assigned.metadata.annotations = Some(
                [(ASSIGNED_BY_ANNOTATION.to_owned(), written.to_owned())]
                    .into_iter()
                    .collect(),
            );
            assert_eq!(by(&assigned).as_deref(), read, "{written:?}");
        }
    }

    #[test]
    fn a_time_the_time_library_cannot_hold_is_the_leases_own_problem() {
        let l = lease_view(
            &raw(json!({
                "holderIdentity": "bob",
                "renewTime": "9999-12-31T23:59:59.000000Z",
                "leaseDurationSeconds": 3600
            })),
            now(),
        );
        assert_eq!(
            l.problem.as_deref(),
            Some("renewTime 9999-12-31T23:59:59.000000Z is out of range")
        );
        assert!(!l.active && l.expires_at.is_none() && l.renewed_at.is_none());
        assert_eq!(l.holder.as_deref(), Some("bob"));
        assert_eq!(l.resource_version.as_deref(), Some("9"));
    }

    #[test]
    fn an_expiry_past_the_end_of_the_calendar_is_a_problem_not_a_panic() {
        let l = lease_view(
            &raw(json!({
                "holderIdentity": "bob",
                "renewTime": "9999-12-30T22:00:00.000000Z",
                "leaseDurationSeconds": 3600
            })),
            now(),
        );
        assert_eq!(
            l.problem.as_deref(),
            Some("renewTime plus leaseDurationSeconds 3600 is beyond the end of the calendar")
        );
        assert!(!l.active);
        let l = lease_view(
            &raw(
                json!({ "holderIdentity": "bob", "renewTime": "2026-11-30T11:00:00.000000Z",
                         "leaseDurationSeconds": 0 }),
            ),
            now(),
        );
        assert_eq!(
            l.problem.as_deref(),
            Some("leaseDurationSeconds 0 is out of range")
        );
    }

    #[test]
    fn a_readable_lease_is_judged_as_before() {
        let l = lease_view(
            &raw(json!({
                "holderIdentity": "alice",
                "acquireTime": "2026-11-30T11:30:00.000000Z",
                "renewTime": "2026-11-30T11:30:00.000000Z",
                "leaseDurationSeconds": 3600,
                "leaseTransitions": 2
            })),
            now(),
        );
        assert_eq!(l.problem, None);
        assert!(l.active);
        assert_eq!(l.expires_at, Some("2026-11-30T12:30:00Z".parse().unwrap()));
        assert_eq!(l.transitions, 2);
        assert!(!l.renew_time_in_future);
    }

    #[test]
    fn only_claim_names_and_pool_labels_concern_claims() {
        let mut l = raw(json!({}));
        assert!(concerns_claims(&l));
        l.metadata.name = Some("kube-scheduler".into());
        assert!(!concerns_claims(&l));
        l.metadata.labels = Some([(POOL_LABEL.to_owned(), "legacy".to_owned())].into());
        assert!(concerns_claims(&l), "a stray Lease is kept to be shown");
    }
}
