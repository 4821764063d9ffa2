//! The rules of claiming and releasing, decided without a request (SPEC "Assign",
//! "Unassign", "Member state"): which input is valid, which member a claimant resumes, adopts
//! or tries (and in what order), whose stale Lease the guard keeps for an administrator, the
//! Lease a claim writes, who may release which member and when only force or an
//! administrator may, and the words of every refusal. The flows in `assign` and `unassign`
//! read the cluster, ask these, and write.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::ClaimOptions;
use crate::clock::{describe_instant, exact_instant};
use crate::error::{Error, ErrorKind, Result};
use crate::lease::ClaimLease;
use crate::names::{
    ADMIN_GROUP, ASSIGNED_BY_ANNOTATION, FORCED_BY_ANNOTATION, GUARD_B32_MAX_CHARS, MEMBER_LABEL,
    POOL_LABEL, encode_identity, guard_can_check, lease_name,
};
use crate::state::{MemberState, MemberView};
use crate::validate;

/// Checks an assign's input without a request (what [`super::assign`] does first): the
/// namespace, pool name, user, Lease duration and the wait for a broker's grant. Returns the
/// Lease duration as the API's `int32`.
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn check_assign(
    namespace: &str,
    pool: &str,
    assignee: &str,
    options: &ClaimOptions,
) -> Result<i32> {
    validate::namespace(namespace)?;
    validate::pool_name(pool)?;
    validate::identity(assignee)?;
    let seconds = validate::lease_seconds(options.lease_seconds)?;
    grant_timeout(options.timeout)?;
    Ok(seconds)
}

/// How long a claim waits for the broker's grant ([`ClaimOptions::timeout`]): 1 s to 24 h,
/// the range of the clone timeout.
///
/// Errors: [`Error::Invalid`] naming the value and the range.
fn grant_timeout(timeout: std::time::Duration) -> Result<()> {
    if (validate::MIN_CLONE_TIMEOUT..=validate::MAX_CLONE_TIMEOUT).contains(&timeout) {
        return Ok(());
    }
    Err(Error::invalid(
        format!(
            "a wait for the broker's grant of {} s is out of range: 1 s to 24 h",
            timeout.as_secs()
        ),
        "pass --timeout like 120s, 5m or 1h",
    ))
}

/// Checks an unassign's input without a request (what [`super::unassign`] does first).
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn check_unassign(namespace: &str, member: &str) -> Result<()> {
    validate::namespace(namespace)?;
    validate::member_name(member)
}

/// One claim: what is claimed for whom, where (who acts is passed beside it).
pub(super) struct Claim<'a> {
    /// Namespace of the pool.
    pub(super) namespace: &'a str,
    /// Pool name.
    pub(super) pool: &'a str,
    /// Whom the member is for (the Lease's holder).
    pub(super) assignee: &'a str,
    /// An administrator's assignment to someone the pool is not for
    /// ([`super::ClaimOptions::force`]).
    pub(super) forced: bool,
}

impl Claim<'_> {
    /// The Lease the assignee holds on `member` from `now` for `lease_seconds`, written by
    /// `actor` (their full identity: an assignment to someone else records it as
    /// [`ASSIGNED_BY_ANNOTATION`]); a takeover of `previous` keeps its resourceVersion (the
    /// precondition of the update) and counts one more transition.
    pub(super) fn lease(
        &self,
        member: &str,
        now: Timestamp,
        lease_seconds: i32,
        previous: Option<&ClaimLease>,
        actor: &str,
    ) -> Lease {
        let transitions = previous.map_or(0, |l| l.transitions().saturating_add(1));
        let resource_version = previous.and_then(|l| l.resource_version());
        // The assignee's own Lease taken again (expired, not yet reclaimed) continues their
        // claim: its acquireTime stays, as the guard demands of an update that keeps the holder
        // (the start a pool's maxSession counts from is the holder's to write once).
        let acquired = previous
            .filter(|l| l.holder() == Some(self.assignee))
            .and_then(|l| l.spec.as_ref()?.acquire_time.as_deref()?.parse().ok())
            .unwrap_or(now);
        Lease {
            metadata: ObjectMeta {
                name: Some(lease_name(member)),
                namespace: Some(self.namespace.to_owned()),
                resource_version,
                labels: Some(BTreeMap::from([
                    (POOL_LABEL.to_owned(), self.pool.to_owned()),
                    (MEMBER_LABEL.to_owned(), member.to_owned()),
                ])),
                annotations: records(previous, self.assignee, actor, self.forced),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.assignee.to_owned()),
                acquire_time: Some(MicroTime(acquired)),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(lease_seconds),
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
        }
    }
}

/// An administrator's label-only assignment the broker adopts as a claim (SPEC "Broker": the
/// seed's Go CLI assigns by the assigned-to label alone): whom, where, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Adoption<'a> {
    /// Namespace of the member.
    pub namespace: &'a str,
    /// The member's pool (its VM's pool label).
    pub pool: &'a str,
    /// The member.
    pub member: &'a str,
    /// Whom the label names (decoded): the Lease's holder.
    pub assignee: &'a str,
    /// Who writes the Lease (the broker's own identity, the only one the guard lets it record
    /// as the assigner).
    pub writer: &'a str,
    /// `leaseDurationSeconds`, in seconds (the pool's `disconnectGrace`, else one hour).
    pub lease_seconds: i32,
}

impl Adoption<'_> {
    /// The claim Lease of this adoption from `now`: the shape a claim writes
    /// ([`super::assign`]), so that the guard, the views and the broker read it alike.
    /// `previous`: a Lease without a holder on the member, replaced under its resourceVersion
    /// (the update's precondition); `None`: the Lease is created.
    pub fn lease(&self, now: Timestamp, previous: Option<&ClaimLease>) -> Lease {
        let claim = Claim {
            namespace: self.namespace,
            pool: self.pool,
            assignee: self.assignee,
            forced: false,
        };
        claim.lease(self.member, now, self.lease_seconds, previous, self.writer)
    }
}

/// The records a claim Lease carries ([`ASSIGNED_BY_ANNOTATION`], [`FORCED_BY_ANNOTATION`]): an
/// assignment by `actor` to someone else names them; the assignee's own Lease taken again
/// (`previous`, expired, still theirs) keeps what it had, as the guard demands while the holder
/// stays.
fn records(
    previous: Option<&ClaimLease>,
    assignee: &str,
    actor: &str,
    forced: bool,
) -> Option<BTreeMap<String, String>> {
    if let Some(own) = previous.filter(|l| l.holder() == Some(assignee)) {
        let kept: BTreeMap<String, String> = [ASSIGNED_BY_ANNOTATION, FORCED_BY_ANNOTATION]
            .into_iter()
            .filter_map(|k| Some((k.to_owned(), own.annotations().get(k)?.clone())))
            .collect();
        return (!kept.is_empty()).then_some(kept);
    }
    (actor != assignee).then(|| {
        let mut written = BTreeMap::from([(ASSIGNED_BY_ANNOTATION.to_owned(), actor.to_owned())]);
        if forced {
            written.insert(FORCED_BY_ANNOTATION.to_owned(), actor.to_owned());
        }
        written
    })
}

/// When a Lease written at `now` for `seconds` ends; the end of the calendar if that is
/// sooner (only a server clock gone wrong gets there: `seconds` is at most 7 days).
pub(super) fn lease_end(now: Timestamp, seconds: i32) -> Timestamp {
    now.checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .unwrap_or(Timestamp::MAX)
}

/// Whether an assign by `actor` for `assignee` is one the server-side guard refuses when it
/// is enforced ([`crate::guard`]): it lets only administrators (`admin`) assign desktops to
/// someone else, or to an identity whose label it cannot check ([`guard_can_check`]). Only
/// then does assign ask whether the guard is enforced.
pub(super) fn guard_may_refuse(admin: bool, actor: &str, assignee: &str) -> bool {
    !admin && (assignee != actor || !guard_can_check(assignee))
}

/// The refusal of an assign the enforced guard would refuse ([`guard_may_refuse`]), said
/// before anything is read — also when the assignee already holds a member, which would
/// otherwise read as a successful hand-over.
pub(super) fn guard_refusal(actor: &str, claim: &Claim<'_>) -> Error {
    let Claim {
        namespace,
        pool,
        assignee,
        ..
    } = *claim;
    if assignee != actor {
        return Error::rejected(
            ErrorKind::Forbidden,
            format!(
                "{actor} may not assign desktops to {assignee}: with the cluster's Corral VDI guard \
                 only administrators ({ADMIN_GROUP}) assign desktops to others"
            ),
            format!(
                "ask an administrator to run `corral-vdi assign {pool} {assignee} -n \
                 {namespace}`, or {assignee} runs `corral-vdi assign {pool} {assignee}` themselves"
            ),
        );
    }
    Error::rejected(
        ErrorKind::Forbidden,
        format!(
            "the cluster's Corral VDI guard cannot check a label for the identity \"{assignee}\" \
             (longer than {GUARD_B32_MAX_CHARS} characters or not printable ASCII), so on a cluster \
             without a broker (where the claimant writes the label) it lets only administrators \
             assign desktops to it"
        ),
        format!(
            "ask an administrator ({ADMIN_GROUP}) to run `corral-vdi assign {pool} \
             {assignee} -n {namespace}`, or to install the broker (corral-vdi broker install), \
             which writes labels for every identity"
        ),
    )
}

/// The member `assignee` holds an active Lease on, if any (the first in member order): a
/// claim resumes with it.
///
/// Errors: [`Error::Rejected`] (`Conflict`) when that member's label names someone else: it
/// is never resumed over.
pub(super) fn held_by<'m>(
    members: &'m [MemberView],
    assignee: &str,
) -> Result<Option<&'m MemberView>> {
    let held = members.iter().find(|m| {
        m.lease
            .as_ref()
            .is_some_and(|l| l.active && l.holder.as_deref() == Some(assignee))
    });
    match held {
        Some(m) if m.state == MemberState::Conflict => Err(conflict_error(m)),
        held => Ok(held),
    }
}

/// Whether `member` is the assignee's by its label: labelled for them (`label`: the VM's
/// assigned-to label as written) without a live Lease — a Phase 1 claim, or their own
/// expired one — and without a Lease held by anyone else. Such a member is theirs; it gets
/// its Lease.
pub(super) fn labelled_for(member: &MemberView, label: Option<&str>, assignee: &str) -> bool {
    matches!(
        member.state,
        MemberState::AssignedLegacy | MemberState::AssignedLeaseExpired
    ) && label == Some(encode_identity(assignee).as_str())
        && member
            .lease
            .as_ref()
            .is_none_or(|l| l.holder.as_deref().is_none_or(|h| h == assignee))
}

/// Whether `member` is free but for a stale Lease held by someone other than `actor`: with
/// the guard enforced, an administrator's to recover, so an ordinary claimant skips it.
pub(super) fn others_stale(member: &MemberView, actor: &str) -> bool {
    member.state == MemberState::FreeStaleLease
        && member
            .lease
            .as_ref()
            .and_then(|l| l.holder.as_deref())
            .is_some_and(|h| h != actor)
}

/// The members a new claimant may take (free, or free but for a stale Lease), in the order
/// `assignee` tries them ([`spread`]).
pub(super) fn candidates<'m>(members: &'m [MemberView], assignee: &str) -> Vec<&'m MemberView> {
    spread(members.iter().filter(|m| m.claimable).collect(), assignee)
}

/// An order of the candidates that differs per identity, so that many claimants spread over
/// the free members instead of all fighting for the first one: each identity gets its own
/// permutation (members sorted by a hash of identity and member name). A rotation would not
/// do: claimants whose starting points collide, or who lose a race, would all move on to the
/// same next member. Deterministic, so a retry by the same person tries the same order; which
/// member wins is still decided only by the API server (create of the Lease, or replace with
/// the resourceVersion precondition).
///
/// Running members come first (a managed pool's warm buffer, or a member left running), each
/// group in that order: "Get a desktop" gets a started desktop when there is one, not one that
/// is stopping or stopped.
fn spread<'a>(mut candidates: Vec<&'a MemberView>, identity: &str) -> Vec<&'a MemberView> {
    candidates.sort_by_cached_key(|m| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        identity.hash(&mut hasher);
        m.name.hash(&mut hasher);
        (m.power != "Running", hasher.finish())
    });
    candidates
}

/// The refusal for a member that does not exist: `namespace` has no VirtualMachine `member`
/// (`then`: what that means for the command, e.g. ": no claim to keep or renew", or empty).
/// One wording for every command that names a member (keep, renew, release, connect).
pub(super) fn no_such_member(namespace: &str, member: &str, then: &str) -> Error {
    Error::rejected(
        ErrorKind::NotFound,
        format!(
            "no such member: namespace \"{namespace}\" has no VirtualMachine \"{member}\"{then}"
        ),
        format!(
            "check the name and the namespace (-n): corral-vdi pool list -n {namespace} lists \
             the members"
        ),
    )
}

/// The refusal for a member whose label and Lease name different people.
pub(super) fn conflict_error(member: &MemberView) -> Error {
    let lease = member.holder.as_deref().unwrap_or("nobody");
    let label = member.label_holder.as_deref().unwrap_or("nobody");
    Error::rejected(
        ErrorKind::Conflict,
        format!(
            "{} is in conflict: its assigned-to label names {label} but its Lease is held by \
             {lease} (another tool, such as the label-only `corral vdi` CLI, wrote one of them); \
             it is not handed out or resumed until that is resolved",
            member.name
        ),
        format!(
            "an administrator ({ADMIN_GROUP}) resolves it with `corral-vdi unassign {} -n {}`, \
             then it can be claimed again",
            member.name, member.namespace
        ),
    )
}

/// The refusal when no member of `pool` could be claimed: the members' states counted,
/// races lost to other claimants, stale Leases skipped for an administrator
/// (`expired_skipped`), and a fix for who asks (`admin`).
pub(super) fn no_free_members(
    pool: &str,
    namespace: &str,
    members: &[MemberView],
    lost: u32,
    expired_skipped: u32,
    admin: bool,
) -> Error {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in members {
        *counts.entry(m.state.label()).or_default() += 1;
    }
    let breakdown: Vec<String> = counts
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let races = if lost > 0 {
        format!("; lost {lost} race(s) to other claimants")
    } else {
        String::new()
    };
    let expired = match expired_skipped {
        0 => String::new(),
        1 => "; 1 member's claim expired: an administrator can recover it".to_owned(),
        n => format!("; {n} members' claims expired: an administrator can recover them"),
    };
    let suggestion = match (admin, expired_skipped > 0) {
        (true, _) => format!(
            "unassign a member (corral-vdi unassign <member> -n {namespace}, --force for an \
             active claim) or create a bigger pool"
        ),
        (false, true) => format!(
            "ask an administrator ({ADMIN_GROUP}) to recover the expired claims, or to create a \
             bigger pool"
        ),
        (false, false) => format!(
            "try another pool, ask a holder to release their member, or ask an administrator \
             ({ADMIN_GROUP}) for a bigger pool"
        ),
    };
    let all = match members.len() {
        1 => "its 1 member is".to_owned(),
        n => format!("all {n} members are"),
    };
    Error::Refused {
        message: format!(
            "pool has no free members: {all} taken in \"{pool}\" (namespace \"{namespace}\"): {}{races}{expired}",
            breakdown.join(", ")
        ),
        suggestion: Some(suggestion),
    }
}

/// Someone else's claim that a forced release ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Foreign {
    /// Its holder.
    pub(super) holder: String,
    /// Until when it runs, as a message says it ([`describe_instant`]), or why that is not
    /// known.
    pub(super) until: String,
}

/// Whether `caller` (`admin`: a member of [`ADMIN_GROUP`]) may release `member`, with or
/// without `force` (SPEC "Unassign"); messages say an expiry with how far it is from `now`
/// (`None`: the exact time alone, for words that stay on screen):
/// - a member in conflict (label and Lease disagree) is an administrator's to resolve;
/// - someone else's active Lease, or one that cannot be judged (it may be live), only with
///   `force`: `Some` names it (the release is recorded as an Event, and with the guard
///   enforced only an administrator passes: [`force_refusal`]);
/// - anything else (the caller's own claim, a stale Lease, a label-only claim, a conflict
///   for an administrator) whoever RBAC and the guard let delete the Lease: `None`.
///
/// Errors: [`Error::Rejected`] (`Conflict`) for a conflict and a caller who is no
/// administrator; [`Error::Refused`] for someone else's claim without `force`, naming the
/// holder and the expiry.
pub(super) fn may_release(
    member: &MemberView,
    caller: &str,
    admin: bool,
    force: bool,
    now: Option<Timestamp>,
) -> Result<Option<Foreign>> {
    if member.state == MemberState::Conflict {
        return if admin {
            Ok(None)
        } else {
            Err(conflict_error(member))
        };
    }
    let Some(lease) = member
        .lease
        .as_ref()
        .filter(|l| l.active || l.problem.is_some())
        .filter(|l| l.holder.as_deref() != Some(caller))
    else {
        return Ok(None);
    };
    let name = &member.name;
    let holder = lease.holder.clone().unwrap_or_default();
    let until = match (&lease.problem, lease.expires_at) {
        (Some(problem), _) => format!("an unknown time (its Lease cannot be read: {problem})"),
        (None, Some(t)) => now.map_or_else(|| exact_instant(t), |now| describe_instant(t, now)),
        (None, None) => "(no expiry)".into(),
    };
    if force {
        return Ok(Some(Foreign { holder, until }));
    }
    // An unreadable Lease never expires by itself: no "wait until".
    let (message, wait) = match &lease.problem {
        Some(problem) => (
            format!(
                "{name} is claimed by {holder}, but its Lease {} cannot be read ({problem}), so \
                 it may be live; only {holder} can release it",
                lease_name(name)
            ),
            String::new(),
        ),
        None => (
            format!("{name} is claimed by {holder} until {until}; only {holder} can release it"),
            format!(", or wait until the Lease expires at {until}"),
        ),
    };
    Err(Error::Refused {
        message,
        suggestion: Some(format!(
            "ask {holder} to release it{wait}; an administrator ({ADMIN_GROUP}) can take it back \
             now with `corral-vdi unassign {name} --force`"
        )),
    })
}

/// The refusal of a forced release by `caller`, who is no administrator, while the guard is
/// enforced: it lets only administrators release someone else's claim. Said before anything
/// changes (the guard's refusal of the first write would say it less plainly).
pub(super) fn force_refusal(caller: &str, member: &str, foreign: &Foreign) -> Error {
    let Foreign { holder, until } = foreign;
    Error::rejected(
        ErrorKind::Forbidden,
        format!(
            "{caller} may not force-release {member} from {holder}: with the cluster's Corral \
             VDI guard only administrators ({ADMIN_GROUP}) release someone else's desktop; \
             nothing was changed"
        ),
        format!(
            "ask {holder} to release it, or wait until the Lease expires at {until}, or ask a \
             member of {ADMIN_GROUP}"
        ),
    )
}

#[cfg(test)]
pub(super) mod tests;
