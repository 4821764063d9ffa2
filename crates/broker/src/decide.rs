//! The broker's rules for one member, without a request: what the cluster's current state
//! (its VM, its claim Lease, its grant) asks the broker to do (SPEC "Broker", common names in
//! `vdi_core::labels`). [`decide`] is level-based: it looks only at the state now, never at
//! what happened before, so a restart or a missed event changes nothing, and deciding again on
//! the state a plan left behind asks for nothing more.
//!
//! The rules, per member `M` with VM labels/annotations as written and its Lease
//! `corral-vdi-M` (read with [`vdi_core::lease::lease_view`]):
//! - **Active Lease** (a holder `H`, readable times, a `renewTime` (else `acquireTime`) not
//!   ahead of the API server's clock by more than the margin, and `renewTime +
//!   leaseDurationSeconds + margin` after now: a claim still inside the reclaim margin is kept)
//!   and the assigned-to label absent, the broker's own (equal to the granted-to annotation) or
//!   `encode(H)`: [`Plan::Grant`]. The label follows the Lease, so an administrator's hand edit
//!   of the holder moves the grant; a running member is then restarted, since KubeVirt cannot
//!   end an open `portforward` or `usbredir` stream except with its VMI ([`GrantPlan::restart`]).
//! - Active Lease and a label naming someone else that is not the broker's: [`Plan::Refuse`]
//!   with [`Reason::Conflict`] (no grant to either; a reason annotation naming both fixes, one
//!   Event).
//! - **A Lease with a holder that cannot be read** (`LeaseView::problem`: a time or duration out
//!   of range): [`Plan::Refuse`] with [`Reason::UnreadableClaim`] (no grant, the grant made
//!   before revoked, the reason names the bad field, one Event). It is never deleted: only an
//!   administrator can write such values.
//! - **A Lease with a holder that can never expire or lies about its time** (no `renewTime` nor
//!   `acquireTime`, no `leaseDurationSeconds`, or a time ahead of the API server's clock by more
//!   than the margin) or **stale past the margin**: reclaimed ([`Plan::Teardown`] with
//!   [`TeardownPlan::reclaim`]; the Lease deleted with its resourceVersion as precondition).
//! - **No active Lease** (none, no holder, or one being deleted: `deletionTimestamp` set, held
//!   by finalizers) and the broker's traces on the member (granted-to annotation, or a grant):
//!   [`Plan::Teardown`]. A Lease being deleted is never deleted again; the member's reason
//!   annotation names its finalizers until they go. A label-only member (label, no Lease, no
//!   trace) is left alone.
//! - A grant whose member is gone: [`Plan::DeleteOrphanGrant`].
//!
//! Events are planned only for a change the plan makes (a grant, a teardown of traces, a
//! reason written anew), so deciding again on the same state plans none.

use std::borrow::Cow;

use jiff::{SignedDuration, Timestamp};
use vdi_core::labels::{encode_identity, label_matches_identity, lease_name};
use vdi_core::lease::LeaseView;
use vdi_core::state::label_holder;

/// The most characters of an identity shown in an Event's note, a log line or a reason (a
/// holder is any string the Lease's writer chose; a 5,000-character one made every log line
/// 15 kB).
pub const IDENTITY_SHOWN: usize = 253;

/// `identity` as shown in notes, logs and reasons: its first [`IDENTITY_SHOWN`] characters,
/// then "…" when there are more.
pub fn shown(identity: &str) -> Cow<'_, str> {
    match identity.char_indices().nth(IDENTITY_SHOWN) {
        Some((end, _)) => Cow::Owned(format!("{}…", &identity[..end])),
        None => Cow::Borrowed(identity),
    }
}

/// What the broker reads on a member's VM (labels and annotations as written).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmFacts<'a> {
    /// `corral.dev/vdi-assigned-to`, if set and not empty.
    pub label: Option<&'a str>,
    /// `corral.dev/vdi-granted-to`: whom the broker bound access for (encoded as the label).
    pub granted_to: Option<&'a str>,
    /// `corral.dev/vdi-claimed-at`, as written.
    pub claimed_at: Option<&'a str>,
    /// `corral.dev/vdi-broker-reason`, as written.
    pub reason: Option<&'a str>,
    /// `status.printableStatus` (`Unknown` without a status).
    pub power: &'a str,
}

/// What the broker reads of a member's grant (Role and RoleBinding `corral-vdi-claim-<M>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantFacts {
    /// The Role or the RoleBinding exists.
    pub exists: bool,
    /// The identity the RoleBinding binds now, if it exists and binds one subject.
    pub bound: Option<String>,
    /// Both exist exactly as the broker would write them for the Lease's current holder (rules,
    /// subject, labels, owner reference to the Lease as it is).
    pub current: bool,
}

/// Everything [`decide`] looks at for one member.
#[derive(Debug, Clone)]
pub struct MemberFacts<'a> {
    /// The member's VM (labelled with a pool), if it exists.
    pub vm: Option<VmFacts<'a>>,
    /// The claim Lease, read with [`vdi_core::lease::lease_view`] at `now`, if it exists.
    pub lease: Option<&'a LeaseView>,
    /// The claim Lease's `metadata.finalizers` when it has a `deletionTimestamp` (it is being
    /// deleted and the finalizers keep it); `None` when it is not being deleted.
    pub lease_deleting: Option<&'a [String]>,
    /// The grant.
    pub grant: GrantFacts,
    /// The API server's time.
    pub now: Timestamp,
    /// How long past a Lease's expiry it is reclaimed; also how far its time may lie ahead of
    /// the API server's clock (the SPEC's skew margin).
    pub margin: SignedDuration,
}

/// Why an Event is recorded (its `reason`, SPEC "Audit").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Access granted to the holder.
    Claimed,
    /// The claim ended (its Lease released or deleted).
    Released,
    /// A claim was reclaimed (its Lease deleted: stale past the margin, or never expiring).
    Reclaimed,
    /// The Lease's holder changed: access moved to the new holder.
    HolderChanged,
    /// The label and the Lease name different people.
    Conflict,
    /// The claim Lease names a holder but its times or duration cannot be read.
    UnreadableClaim,
    /// The VM could not be started.
    StartFailed,
}

impl Reason {
    /// The Event's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Claimed => "Claimed",
            Reason::Released => "Released",
            Reason::Reclaimed => "Reclaimed",
            Reason::HolderChanged => "HolderChanged",
            Reason::Conflict => "Conflict",
            Reason::UnreadableClaim => "UnreadableClaim",
            Reason::StartFailed => "StartFailed",
        }
    }
}

/// An active claim: bind `holder`, label the member for them, start it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantPlan {
    /// The Lease's holder (the full identity).
    pub holder: String,
    /// `encode_identity(holder)`: the label and granted-to value.
    pub label: String,
    /// The claimed-at value to write (RFC 3339 UTC, to the second). A claim new to the broker:
    /// the Lease's acquireTime, else what is written, else now. A hand-over (granted-to names
    /// someone else): the Lease's acquireTime if it is later than the old holder's claimed-at
    /// (the editor set it anew), else now, the time the broker saw the new holder. A claim
    /// granted already: what is written, unless acquireTime is later.
    pub claimed_at: String,
    /// Apply the Role and RoleBinding (missing, or not as they should be).
    pub apply_grant: bool,
    /// The identity access was granted to before, when it was someone else: their access ends
    /// once the binding names the new holder.
    pub previous: Option<String>,
    /// A hand-over of a member that may run (granted-to names someone else, the VM is not
    /// Stopped): once the binding names the new holder, restart it through KubeVirt's
    /// `restart` subresource, which ends the VMI and with it every open stream of the old
    /// holder (`vnc`, `portforward`, `usbredir`, `console`: KubeVirt has no other way to end
    /// an established stream). Without it (the binding alone drifted) their console is cut.
    pub restart: bool,
    /// Start the VM (capacity check first): it does not run, and the claim is new to the
    /// broker or a start is still owed (a reason annotation). A VM its holder stopped stays
    /// stopped.
    pub start: bool,
    /// The label, claimed-at or granted-to are not yet as they should be. The VM is written
    /// (one merge patch of those and the reason) when they differ or when the reason to write
    /// (none, or why the start failed) differs from the one written.
    pub write_vm: bool,
    /// The Event to record once the VM is written.
    pub event: Option<Reason>,
}

/// No grant to anyone, and a sentence saying why: label and Lease disagree
/// ([`Reason::Conflict`]), or the Lease cannot be read ([`Reason::UnreadableClaim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalPlan {
    /// The Event's reason: `Conflict` or `UnreadableClaim`.
    pub event: Reason,
    /// The Lease's holder (the full identity), for the Event's note.
    pub holder: String,
    /// The sentence for the reason annotation.
    pub reason: String,
    /// Delete the grant (and cut the console it gave).
    pub delete_grant: bool,
    /// Remove the granted-to annotation (a conflict: the label is not the broker's to follow).
    /// An unreadable claim keeps it, so that the claim is torn down if its Lease goes.
    pub clear_granted_to: bool,
    /// Write the reason (and remove granted-to when asked) because either differs: then one
    /// Event.
    pub write_vm: bool,
}

/// The claim ended: undo what the broker made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownPlan {
    /// Delete the Lease first, with this resourceVersion as precondition (a reclaim).
    pub reclaim: Option<String>,
    /// Why a Lease that has not expired is reclaimed ("renewTime missing", "renewTime … is
    /// ahead of the API server's clock"); `None` for one stale past the margin.
    pub why: Option<String>,
    /// The identity the claim was for, as far as it is known (for the Event's note).
    pub holder: Option<String>,
    /// Delete the Role and RoleBinding.
    pub delete_grant: bool,
    /// Open `vnc` without preserveSession and close it: the holder's open console ends (their
    /// other streams end as the VM stops).
    pub cut_console: bool,
    /// Stop the VM.
    pub stop: bool,
    /// Remove the label and claimed-at (they are the claim's).
    pub clear_label: bool,
    /// The reason annotation to leave on the VM (a Lease stuck deleting); `None` removes it.
    pub reason: Option<String>,
    /// Write the VM (remove granted-to, set or remove the reason, remove the label if
    /// `clear_label`).
    pub write_vm: bool,
    /// The Event to record once done (only if something was done).
    pub event: Option<Reason>,
}

/// What to do with one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing.
    Nothing,
    /// See [`GrantPlan`].
    Grant(GrantPlan),
    /// See [`RefusalPlan`].
    Refuse(RefusalPlan),
    /// See [`TeardownPlan`].
    Teardown(TeardownPlan),
    /// Only the reason annotation is left of a claim that is gone: remove it.
    ClearReason,
    /// The member is gone: delete its grant.
    DeleteOrphanGrant,
}

/// A plan and when to look at the member again without an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to do now.
    pub plan: Plan,
    /// When the state changes by the clock alone: an active Lease's expiry plus the margin.
    pub requeue_at: Option<Timestamp>,
}

/// The sentence written when label and Lease disagree (SPEC "Member state": conflict), naming
/// both sides and both ways out: keeping the label's user means deleting the Lease; freeing the
/// member is an administrator's force release, which also removes the label and stops the VM.
pub fn conflict_reason(member: &str, namespace: &str, label: &str, holder: &str) -> String {
    let labelled = label_holder(label);
    let labelled = shown(&labelled);
    let lease = lease_name(member);
    format!(
        "label and Lease disagree: {member} is labelled for {labelled}, but its Lease {lease} \
         is held by {}; neither gets access. An administrator resolves it: to keep it \
         {labelled}'s, delete the Lease (`kubectl delete lease {lease} -n {namespace}`); to \
         free the member, `corral-vdi unassign {member} -n {namespace} --force` (removes the \
         label too and stops the VM)",
        shown(holder)
    )
}

/// The sentence written while the claim Lease is being deleted and finalizers keep it.
pub fn deleting_reason(member: &str, namespace: &str, finalizers: &[String]) -> String {
    let lease = lease_name(member);
    format!(
        "claim Lease {lease} is stuck deleting with finalizers [{}]: an administrator removes \
         them (`kubectl patch lease {lease} -n {namespace} --type merge -p \
         '{{\"metadata\":{{\"finalizers\":null}}}}'`)",
        finalizers.join(", ")
    )
}

/// The sentence written while the claim Lease names a holder but cannot be read.
pub fn unreadable_reason(member: &str, namespace: &str, problem: &str) -> String {
    let lease = lease_name(member);
    format!(
        "claim Lease {lease} is unreadable: {problem}; no access granted: an administrator \
         corrects or deletes it (`kubectl delete lease {lease} -n {namespace}`)"
    )
}

/// What the Lease says now, with the reclaim margin applied.
enum Claim<'a> {
    /// A holder, readable, not yet past expiry + margin.
    Active(&'a str),
    /// A holder and a Lease to delete (with its resourceVersion): stale past expiry + margin
    /// (`why` none), or one that never expires or lies about its time (`why` says which).
    Reclaim {
        holder: &'a str,
        resource_version: Option<&'a str>,
        why: Option<String>,
    },
    /// A holder and times or a duration that cannot be read.
    Unreadable(&'a str, &'a str),
    /// Being deleted, kept by these finalizers.
    Deleting(&'a [String]),
    /// No Lease or no holder.
    Inactive,
}

fn claim<'a>(facts: &MemberFacts<'a>) -> Claim<'a> {
    let (now, margin) = (facts.now, facts.margin);
    let Some(lease) = facts.lease else {
        return Claim::Inactive;
    };
    if let Some(finalizers) = facts.lease_deleting {
        return Claim::Deleting(finalizers);
    }
    let Some(holder) = lease.holder.as_deref() else {
        return Claim::Inactive;
    };
    if let Some(problem) = lease.problem.as_deref() {
        return Claim::Unreadable(holder, problem);
    }
    let reclaim = |why| Claim::Reclaim {
        holder,
        resource_version: lease.resource_version.as_deref(),
        why,
    };
    // The time the expiry counts from, as lease_view counts it: renewTime, else acquireTime.
    let last = (lease.renewed_at.map(|r| ("renewTime", r)))
        .or_else(|| lease.acquired_at.map(|a| ("acquireTime", a)));
    let Some((field, last)) = last else {
        return reclaim(Some("renewTime missing".into()));
    };
    if now.checked_add(margin).is_ok_and(|limit| last > limit) {
        return reclaim(Some(format!(
            "{field} {last} is ahead of the API server's clock"
        )));
    }
    match lease.expires_at {
        None => reclaim(Some("leaseDurationSeconds missing".into())),
        Some(end) if end.checked_add(margin).unwrap_or(end) <= now => reclaim(None),
        Some(_) => Claim::Active(holder),
    }
}

/// Decides what to do with member `member` in `namespace` (see the module doc for the rules).
pub fn decide(member: &str, namespace: &str, facts: &MemberFacts<'_>) -> Decision {
    let nothing = |plan| Decision {
        plan,
        requeue_at: None,
    };
    let Some(vm) = facts.vm else {
        return nothing(if facts.grant.exists {
            Plan::DeleteOrphanGrant
        } else {
            Plan::Nothing
        });
    };
    let requeue_at = facts
        .lease
        .and_then(|l| l.expires_at)
        .and_then(|e| e.checked_add(facts.margin).ok());
    let traces = vm.granted_to.is_some() || facts.grant.exists;
    match claim(facts) {
        Claim::Active(holder) => {
            let encoded = encode_identity(holder);
            let ours = |l: &str| vm.granted_to == Some(l);
            let plan = match vm.label {
                Some(label) if label != encoded && !ours(label) => {
                    let reason = conflict_reason(member, namespace, label, holder);
                    refuse(vm, &facts.grant, Reason::Conflict, holder, reason)
                }
                _ => Plan::Grant(grant(vm, facts, holder, encoded)),
            };
            Decision { plan, requeue_at }
        }
        Claim::Unreadable(holder, problem) => {
            let reason = unreadable_reason(member, namespace, problem);
            nothing(refuse(
                vm,
                &facts.grant,
                Reason::UnreadableClaim,
                holder,
                reason,
            ))
        }
        Claim::Reclaim {
            holder,
            resource_version,
            why,
        } => {
            let mut plan = teardown(vm, &facts.grant, Some(holder), None);
            plan.reclaim = Some(resource_version.unwrap_or_default().to_owned());
            plan.why = why;
            plan.cut_console = vm.power != "Stopped";
            plan.stop = vm.label.is_none() || plan.clear_label;
            plan.event = Some(Reason::Reclaimed);
            nothing(Plan::Teardown(plan))
        }
        Claim::Deleting(finalizers) => {
            let reason =
                (!finalizers.is_empty()).then(|| deleting_reason(member, namespace, finalizers));
            let plan = teardown(vm, &facts.grant, None, reason);
            nothing(if traces || plan.write_vm {
                Plan::Teardown(plan)
            } else {
                Plan::Nothing
            })
        }
        Claim::Inactive => nothing(if traces {
            Plan::Teardown(teardown(vm, &facts.grant, None, None))
        } else if vm.reason.is_some() {
            Plan::ClearReason
        } else {
            Plan::Nothing
        }),
    }
}

fn grant(vm: VmFacts<'_>, facts: &MemberFacts<'_>, holder: &str, encoded: String) -> GrantPlan {
    let granted = vm.granted_to == Some(encoded.as_str());
    let handover = vm.granted_to.is_some() && !granted;
    // Whom access was for before, if not the holder: the binding's subject (the full
    // identity), else the granted-to annotation (decoded).
    let previous = facts
        .grant
        .bound
        .clone()
        .filter(|b| b != holder)
        .or_else(|| vm.granted_to.filter(|g| *g != encoded).map(label_holder));
    // Compared to the second, as claimed-at is written.
    let acquired = facts
        .lease
        .and_then(|l| l.acquired_at)
        .and_then(|a| Timestamp::from_second(a.as_second()).ok());
    let written = vm.claimed_at.and_then(|w| w.parse::<Timestamp>().ok());
    let later = acquired.filter(|a| written.is_none_or(|w| *a > w));
    let claimed_at = if handover {
        crate::rfc3339(later.unwrap_or(facts.now))
    } else if granted {
        match (later, vm.claimed_at) {
            (None, Some(w)) => w.to_owned(),
            (at, _) => crate::rfc3339(at.unwrap_or(facts.now)),
        }
    } else {
        acquired
            .map(crate::rfc3339)
            .or_else(|| vm.claimed_at.map(str::to_owned))
            .unwrap_or_else(|| crate::rfc3339(facts.now))
    };
    let start = !vdi_core::claim::runs(vm.power)
        && vm.power != "Paused"
        && (!granted || vm.reason.is_some());
    let write_vm = vm.label != Some(encoded.as_str())
        || !granted
        || vm.claimed_at != Some(claimed_at.as_str());
    // A grant made again for a holder granted before (after an unreadable Lease was fixed, or
    // a grant deleted by hand) is a claim granted too; its Event is recorded only if the VM
    // write changes something.
    let event = if previous.is_some() {
        Some(Reason::HolderChanged)
    } else if !granted || !facts.grant.exists {
        Some(Reason::Claimed)
    } else {
        None
    };
    GrantPlan {
        holder: holder.to_owned(),
        label: encoded,
        claimed_at,
        apply_grant: !facts.grant.current,
        previous,
        restart: handover && vm.power != "Stopped",
        start,
        write_vm,
        event,
    }
}

fn refuse(
    vm: VmFacts<'_>,
    grant: &GrantFacts,
    event: Reason,
    holder: &str,
    reason: String,
) -> Plan {
    let clear_granted_to = event == Reason::Conflict;
    let write_vm =
        vm.reason != Some(reason.as_str()) || (clear_granted_to && vm.granted_to.is_some());
    Plan::Refuse(RefusalPlan {
        event,
        holder: holder.to_owned(),
        reason,
        delete_grant: grant.exists,
        clear_granted_to,
        write_vm,
    })
}

/// Undoing the broker's traces of a claim that ended. `reason`: the reason annotation to leave.
fn teardown(
    vm: VmFacts<'_>,
    grant: &GrantFacts,
    stale_holder: Option<&str>,
    reason: Option<String>,
) -> TeardownPlan {
    // The label is the claim's when the broker wrote it (granted-to), it names whom the grant
    // binds, or it names the stale Lease's holder (a claim made without the broker's help).
    let claim_label = vm.label.is_some_and(|l| {
        vm.granted_to == Some(l)
            || grant
                .bound
                .as_deref()
                .is_some_and(|b| label_matches_identity(l, b))
            || stale_holder.is_some_and(|h| label_matches_identity(l, h))
    });
    let ours = vm.label.is_none() || claim_label;
    let traces = vm.granted_to.is_some() || grant.exists;
    let holder = stale_holder
        .map(str::to_owned)
        .or_else(|| grant.bound.clone())
        .or_else(|| vm.granted_to.map(label_holder));
    TeardownPlan {
        reclaim: None,
        why: None,
        holder,
        delete_grant: grant.exists,
        cut_console: traces && vm.power != "Stopped",
        stop: traces && ours,
        clear_label: claim_label,
        write_vm: vm.granted_to.is_some() || vm.reason != reason.as_deref() || claim_label,
        reason,
        event: traces.then_some(Reason::Released),
    }
}

#[cfg(test)]
mod tests;
