//! The holder's side of a claim (SPEC "Pool policy and lifecycle"): renewing its own Lease
//! while a session is open ([`renew`]; [`crate::session`] calls it every third of the Lease's
//! duration), and **Keep** on a reclaim notice ([`keep`]: a renewal that also records when it
//! was pressed, [`KEPT_AT_ANNOTATION`], from which an idle reclaim counts again).
//!
//! A renewal writes `renewTime` = now by the API server's clock ([`crate::clock`]) with an
//! update (PUT: the claimant role may update Leases, not patch them) of the Lease as read,
//! carrying its resourceVersion (Kubernetes' optimistic concurrency: a 409 means the Lease
//! changed meanwhile; it is read again and the holder checked again), so a renewal never
//! writes over a Lease someone else took. Its metadata (finalizers, annotations) is kept as
//! read; of its spec, the fields a claim uses ([`crate::lease::RawLeaseSpec`]). Only the holder renews, and only an
//! active claim: a Lease that is gone, expired, unreadable or held by someone else is a
//! refusal that writes nothing. Keep never extends a claim past the pool's `maxSession`
//! ([`crate::policy::reclaim`]): past it, Keep is refused.

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde::Serialize;

use super::rules::no_such_member;
use crate::clock::describe_instant;
use crate::error::{Error, Result, is_status};
use crate::identity::Actor;
use crate::lease::{ClaimLease, LeaseView, lease_view};
use crate::names::{
    CLAIMED_AT_ANNOTATION, GRANTED_TO_ANNOTATION, IDLE_SINCE_ANNOTATION, KEPT_AT_ANNOTATION,
    POOL_LABEL, lease_name,
};
use crate::policy::reclaim::{ReclaimDue, WrittenTimes, due, recorded_start, trusted_times};
use crate::policy::{DesktopPool, Policy, duration};
use crate::resources::VirtualMachine;

/// How often a renewal that lost a race (409) reads the Lease again before it gives up.
const ATTEMPTS: usize = 3;

/// A renewed claim.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Renewed {
    /// Namespace of the member.
    pub namespace: String,
    /// The member whose claim was renewed.
    pub member: String,
    /// The holder (`spec.holderIdentity`): the actor.
    pub holder: String,
    /// The new `renewTime` (API server time).
    pub renewed_at: Timestamp,
    /// `renewTime + leaseDurationSeconds`: when the claim expires unless renewed again.
    pub expires_at: Timestamp,
    /// `spec.leaseDurationSeconds`, in seconds.
    pub duration_seconds: i32,
}

/// A claim kept on a reclaim notice.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    /// The renewal Keep made.
    pub renewed: Renewed,
    /// The time recorded on the Lease ([`KEPT_AT_ANNOTATION`]).
    pub kept_at: Timestamp,
    /// The next reclaim after this Keep, in a managed pool whose policy can be read (it may be
    /// the `maxSession` end, which Keep does not move).
    pub next_reclaim: Option<ReclaimDue>,
}

/// Renews `member`'s claim in `namespace`, which the actor must hold: `renewTime` = now (API
/// server time), under the Lease's resourceVersion.
///
/// Errors: [`Error::Invalid`] for a bad name (no request); [`Error::Refused`] when the Lease is
/// gone, expired, unreadable or held by someone else (nothing written); [`Error::Kube`] when a
/// request fails.
pub async fn renew(actor: &Actor, namespace: &str, member: &str) -> Result<Renewed> {
    super::check_unassign(namespace, member)?;
    let lease = own_claim(actor, namespace, member).await?;
    write(actor, namespace, member, lease, None).await
}

/// **Keep**: renews `member`'s claim (as [`renew`]) and records the time on its Lease
/// ([`KEPT_AT_ANNOTATION`]), which postpones a disconnect or idle reclaim. In a managed pool
/// whose claim has reached `maxSession` it is refused: nothing extends a claim past it.
///
/// Errors: [`renew`]'s; [`Error::Refused`] naming the `maxSession` end when it has passed.
pub async fn keep(actor: &Actor, namespace: &str, member: &str) -> Result<Kept> {
    super::check_unassign(namespace, member)?;
    let lease = own_claim(actor, namespace, member).await?;
    let policy = match lease.labels().get(POOL_LABEL) {
        Some(pool) => pool_policy(actor, namespace, pool).await?,
        None => None,
    };
    let now = actor.clock().now();
    let judged = lease_view(&lease, now);
    // The claim as the broker counts it (the start it recorded, the idle reading).
    let vm = match &policy {
        Some(_) => member_vm(actor, namespace, member).await,
        None => None,
    };
    let annotation = |key: &str| {
        vm.as_ref()
            .and_then(|vm| vm.annotations().get(key))
            .map(String::as_str)
    };
    let mut written = WrittenTimes {
        lease: &judged,
        recorded_start: recorded_start(
            annotation(GRANTED_TO_ANNOTATION),
            annotation(CLAIMED_AT_ANNOTATION),
            actor.username(),
        ),
        kept_at: None,
        idle_since: annotation(IDLE_SINCE_ANNOTATION).and_then(|i| i.parse().ok()),
    };
    if let Some(refusal) = policy.as_ref().and_then(|p| {
        let started = trusted_times(p, &written, now).acquired_at;
        past_max_session(p, started, member, now)
    }) {
        return Err(refusal);
    }
    let renewed = write(actor, namespace, member, lease, Some(now)).await?;
    let after = LeaseView {
        renewed_at: Some(renewed.renewed_at),
        expires_at: Some(renewed.expires_at),
        ..judged.clone()
    };
    let next_reclaim = policy.as_ref().and_then(|policy| {
        written.lease = &after;
        written.kept_at = Some(now);
        due(policy, &trusted_times(policy, &written, now))
    });
    tracing::info!(%namespace, %member, holder = %renewed.holder, "claim kept");
    Ok(Kept {
        renewed,
        kept_at: now,
        next_reclaim,
    })
}

/// The actor's own active claim Lease on `member`, read now.
///
/// Errors: [`Error::Refused`] when it is gone, unreadable, expired or someone else's;
/// [`Error::Rejected`] `NotFound` when there is no Lease and no such member;
/// [`Error::Kube`] when the read fails.
pub async fn own_claim(actor: &Actor, namespace: &str, member: &str) -> Result<ClaimLease> {
    let lease = crate::lease::get(actor.client(), namespace, &lease_name(member)).await?;
    if let Err(refusal) = check_holder(
        lease.as_ref(),
        actor.username(),
        member,
        actor.clock().now(),
    ) {
        if lease.is_some() {
            return Err(refusal);
        }
        // No Lease, and no such member at all: said as that, not as a claim that ended.
        let vms: Api<VirtualMachine> = Api::namespaced(actor.client().clone(), namespace);
        return Err(match vms.get_opt(member).await {
            Ok(None) => no_such_member(namespace, member, ": no claim to keep or renew"),
            _ => refusal,
        });
    }
    Ok(lease.unwrap_or_default())
}

/// The policy of `pool` in `namespace`, when the pool is managed and its policy can be read;
/// `None` otherwise (no DesktopPool, no CRD, RBAC hides it, or its policy is unreadable: the
/// broker then leaves the pool as it is).
///
/// Errors: [`Error::Kube`] when the read fails for another reason.
pub async fn pool_policy(actor: &Actor, namespace: &str, pool: &str) -> Result<Option<Policy>> {
    let api: Api<DesktopPool> = Api::namespaced(actor.client().clone(), namespace);
    match api.get_opt(pool).await {
        Ok(found) => Ok(found.and_then(|p| p.policy().ok())),
        Err(e) if is_status(&e, 403) || is_status(&e, 404) => Ok(None),
        Err(e) => Err(Error::kube(
            format!("read DesktopPool {pool} in namespace \"{namespace}\""),
            e,
        )),
    }
}

/// Whether `lease` (none: gone) is `identity`'s active claim on `member` at `now`; the refusal
/// otherwise.
///
/// Errors: [`Error::Refused`] saying which.
fn check_holder(
    lease: Option<&ClaimLease>,
    identity: &str,
    member: &str,
    now: Timestamp,
) -> Result<LeaseView> {
    let refused = |message: String, suggestion: Option<&str>| Error::Refused {
        message,
        suggestion: suggestion.map(str::to_owned),
    };
    let Some(lease) = lease.filter(|l| l.metadata.deletion_timestamp.is_none()) else {
        return Err(refused(
            format!(
                "{member} is not claimed: it has no Lease {} (never claimed, or released or \
                 reclaimed since), so there is no claim to keep or renew",
                lease_name(member)
            ),
            Some("get a desktop (Get a desktop, or corral-vdi assign <pool> <you>)"),
        ));
    };
    let view = lease_view(lease, now);
    if let Some(problem) = &view.problem {
        return Err(refused(
            format!("the claim on {member} cannot be read: {problem}"),
            Some("its holder or an administrator releases it"),
        ));
    }
    match view.holder.as_deref() {
        Some(holder) if holder == identity => {}
        Some(holder) => {
            return Err(refused(
                format!(
                    "{member} is held by {holder}, not by you ({identity}): only its holder \
                     renews a claim"
                ),
                None,
            ));
        }
        None => return Err(refused(format!("{member} is not claimed"), None)),
    }
    if !view.active {
        let ended = view.expires_at.map_or_else(String::new, |at| {
            format!(" at {}", describe_instant(at, now))
        });
        return Err(refused(
            format!("your claim on {member} expired{ended}: it is being reclaimed"),
            Some("claim a desktop again"),
        ));
    }
    Ok(view)
}

/// The refusal of a Keep whose claim, started at `started` ([`trusted_times`]), has reached
/// `policy`'s `maxSession` at `now`, if it has.
fn past_max_session(
    policy: &Policy,
    started: Option<Timestamp>,
    member: &str,
    now: Timestamp,
) -> Option<Error> {
    let limit = policy.max_session?;
    let acquired = started?;
    let end = acquired.checked_add(limit).ok()?;
    (end <= now).then(|| Error::Refused {
        message: format!(
            "your claim on {member} reached the pool's maxSession ({} since {}) {}: Keep \
             cannot extend it, and it is being reclaimed",
            duration::format(limit),
            crate::clock::exact_instant(acquired),
            describe_instant(end, now)
        ),
        suggestion: Some("save your work; claim a desktop again once it is released".into()),
    })
}

/// The member's VM; `None` when it cannot be read (the next reclaim is then told without what
/// the broker recorded on it).
async fn member_vm(actor: &Actor, namespace: &str, member: &str) -> Option<VirtualMachine> {
    let vms: Api<VirtualMachine> = Api::namespaced(actor.client().clone(), namespace);
    vms.get_opt(member).await.ok()?
}

/// Writes the renewal of `lease` (the actor's, as read): `renewTime` = now and, for a Keep,
/// the kept-at annotation, in an update carrying the Lease's resourceVersion; on a 409 reads
/// it again and checks the holder again, at most [`ATTEMPTS`] times.
///
/// Errors: [`check_holder`]'s refusal for the Lease read again; [`Error::Kube`] when a write
/// fails otherwise; [`Error::Refused`] when it kept changing.
async fn write(
    actor: &Actor,
    namespace: &str,
    member: &str,
    mut lease: ClaimLease,
    kept_at: Option<Timestamp>,
) -> Result<Renewed> {
    let api: Api<ClaimLease> = Api::namespaced(actor.client().clone(), namespace);
    let name = lease_name(member);
    for _ in 0..ATTEMPTS {
        let now = actor.clock().now();
        let mut next = lease.clone();
        // A MicroTime as the API server stores it: six fractional digits.
        next.spec.get_or_insert_with(Default::default).renew_time =
            Some(now.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string());
        if let Some(kept) = kept_at {
            next.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(KEPT_AT_ANNOTATION.to_owned(), kept.to_string());
        }
        match api.replace(&name, &PostParams::default(), &next).await {
            Ok(written) => {
                let view = lease_view(&written, now);
                let duration_seconds = view.duration_seconds.unwrap_or_default();
                tracing::debug!(%namespace, %member, expires_at = ?view.expires_at, "claim renewed");
                return Ok(Renewed {
                    namespace: namespace.to_owned(),
                    member: member.to_owned(),
                    holder: actor.username().to_owned(),
                    renewed_at: now,
                    expires_at: view.expires_at.unwrap_or(now),
                    duration_seconds,
                });
            }
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => {
                let again = crate::lease::get(actor.client(), namespace, &name).await?;
                check_holder(
                    again.as_ref(),
                    actor.username(),
                    member,
                    actor.clock().now(),
                )?;
                lease = again.unwrap_or_default();
            }
            Err(e) => {
                return Err(Error::kube(
                    format!("renew the claim on {member} (Lease {name})"),
                    e,
                ));
            }
        }
    }
    Err(Error::Refused {
        message: format!("the Lease {name} kept changing while its claim was being renewed"),
        suggestion: Some("try again".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DesktopPoolSpec;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-12-04T12:00:00Z".parse().unwrap()
    }

    fn lease(holder: &str, renewed: &str, acquired: &str) -> ClaimLease {
        serde_json::from_value(json!({
            "metadata": { "name": "corral-vdi-p-1", "namespace": "ns", "resourceVersion": "3" },
            "spec": { "holderIdentity": holder, "acquireTime": acquired, "renewTime": renewed,
                      "leaseDurationSeconds": 600 },
        }))
        .unwrap()
    }

    fn refusal(result: Result<LeaseView>) -> String {
        match result {
            Err(Error::Refused { message, .. }) => message,
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn only_the_holder_of_an_active_claim_renews_it() {
        let live = lease("alice", "2026-12-04T11:59:00Z", "2026-12-04T11:00:00Z");
        assert!(check_holder(Some(&live), "alice", "p-1", now()).is_ok());
        assert_eq!(
            refusal(check_holder(Some(&live), "bob", "p-1", now())),
            "p-1 is held by alice, not by you (bob): only its holder renews a claim"
        );
        assert!(
            refusal(check_holder(None, "alice", "p-1", now()))
                .starts_with("p-1 is not claimed: it has no Lease corral-vdi-p-1 (never claimed,")
        );
        let stale = lease("alice", "2026-12-04T11:00:00Z", "2026-12-04T11:00:00Z");
        assert!(refusal(check_holder(Some(&stale), "alice", "p-1", now())).contains("expired"));
    }

    #[test]
    fn keep_is_refused_past_max_session_only() {
        let policy = DesktopPoolSpec {
            golden: "g".into(),
            size: 1,
            max_session: Some("1h".into()),
            ..Default::default()
        }
        .policy()
        .unwrap();
        let within = lease_view(
            &lease("alice", "2026-12-04T11:59:00Z", "2026-12-04T11:30:00Z"),
            now(),
        );
        assert!(past_max_session(&policy, within.acquired_at, "p-1", now()).is_none());
        let past = lease_view(
            &lease("alice", "2026-12-04T11:59:00Z", "2026-12-04T10:59:00Z"),
            now(),
        );
        let err = past_max_session(&policy, past.acquired_at, "p-1", now()).unwrap();
        assert!(err.to_string().contains("maxSession (1h since"), "{err}");
    }
}
