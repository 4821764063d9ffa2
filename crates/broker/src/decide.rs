//! The broker's rules for one member, without a request: what the cluster's current state
//! (its VM, its claim Lease, its grant) asks the broker to do (SPEC "Broker", common names in
//! `vdi_core::labels`). [`decide`] is level-based: it looks only at the state now, never at
//! what happened before, so a restart or a missed event changes nothing, and deciding again on
//! the state a plan left behind asks for nothing more.
//!
//! The rules, per member `M` with VM labels/annotations as written and its Lease
//! `corral-vdi-M`:
//! - **Active Lease** (a holder `H`, and `renewTime + leaseDurationSeconds + margin` after now:
//!   a claim still inside the reclaim margin is kept) and the assigned-to label absent, the
//!   broker's own (equal to the granted-to annotation) or `encode(H)`: [`Plan::Grant`]. The
//!   label follows the Lease, so an administrator's hand edit of the holder moves the grant.
//! - Active Lease and a label naming someone else that is not the broker's: [`Plan::Conflict`]
//!   (no grant to either; a reason annotation and an Event).
//! - **No active Lease** (none, no holder, an unreadable one, or stale past the margin, which
//!   is reclaimed) and the broker's traces on the member (granted-to annotation, or a grant):
//!   [`Plan::Teardown`]. A label-only member (label, no Lease, no trace) is left alone.
//! - A grant whose member is gone: [`Plan::DeleteOrphanGrant`].

use jiff::{SignedDuration, Timestamp};
use vdi_core::labels::{encode_identity, label_matches_identity};
use vdi_core::lease::LeaseView;
use vdi_core::state::label_holder;

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
    /// The grant.
    pub grant: GrantFacts,
    /// The API server's time.
    pub now: Timestamp,
    /// How long past a Lease's expiry it is reclaimed.
    pub margin: SignedDuration,
}

/// Why an Event is recorded (its `reason`, SPEC "Audit").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Access granted to the holder.
    Claimed,
    /// The claim ended (its Lease released or deleted).
    Released,
    /// A stale claim was reclaimed (its Lease deleted past the margin).
    Reclaimed,
    /// The Lease's holder changed: access moved to the new holder.
    HolderChanged,
    /// The label and the Lease name different people.
    Conflict,
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
    /// The claimed-at value to write: the Lease's acquireTime (RFC 3339 UTC), else what is
    /// written, else now.
    pub claimed_at: String,
    /// Apply the Role and RoleBinding (missing, or not as they should be).
    pub apply_grant: bool,
    /// The identity access was granted to before, when it was someone else: their console is
    /// cut once the binding names the new holder.
    pub previous: Option<String>,
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

/// The label and the Lease disagree: no grant to either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictPlan {
    /// The sentence for the reason annotation.
    pub reason: String,
    /// Delete the grant (and cut the console it gave).
    pub delete_grant: bool,
    /// Write the reason and remove granted-to (when either differs): then an Event.
    pub write_vm: bool,
}

/// The claim ended: undo what the broker made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownPlan {
    /// Delete the stale Lease first, with this resourceVersion as precondition.
    pub reclaim: Option<String>,
    /// The identity the claim was for, as far as it is known (for the Event's note).
    pub holder: Option<String>,
    /// Delete the Role and RoleBinding.
    pub delete_grant: bool,
    /// Open `vnc` without preserveSession and close it: the holder's open console ends.
    pub cut_console: bool,
    /// Stop the VM.
    pub stop: bool,
    /// Remove the label and claimed-at (they are the claim's).
    pub clear_label: bool,
    /// Write the VM (remove granted-to, the reason, and the label if `clear_label`).
    pub write_vm: bool,
    /// The Event to record once done.
    pub event: Option<Reason>,
}

/// What to do with one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing.
    Nothing,
    /// See [`GrantPlan`].
    Grant(GrantPlan),
    /// See [`ConflictPlan`].
    Conflict(ConflictPlan),
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
/// both and the fix (`corral-vdi unassign --force` is an administrator's release).
pub fn conflict_reason(member: &str, namespace: &str, label: &str, holder: &str) -> String {
    format!(
        "label and Lease disagree: {member} is labelled for {}, but its Lease is held by \
         {holder}; an administrator resolves it with `corral-vdi unassign {member} -n \
         {namespace} --force`",
        label_holder(label)
    )
}

/// What the Lease says now, with the reclaim margin applied.
enum Claim<'a> {
    /// A holder, not yet past expiry + margin.
    Active(&'a str),
    /// A holder, past expiry + margin: reclaim (with this resourceVersion).
    Stale(&'a str, Option<&'a str>),
    /// No Lease, no holder, or a Lease that cannot be judged.
    Inactive,
}

fn claim<'a>(lease: Option<&'a LeaseView>, now: Timestamp, margin: SignedDuration) -> Claim<'a> {
    let Some(lease) = lease else {
        return Claim::Inactive;
    };
    let Some(holder) = lease.holder.as_deref().filter(|h| !h.is_empty()) else {
        return Claim::Inactive;
    };
    if lease.problem.is_some() {
        return Claim::Inactive;
    }
    match lease.expires_at.map(|e| e.checked_add(margin).unwrap_or(e)) {
        Some(end) if end <= now => Claim::Stale(holder, lease.resource_version.as_deref()),
        _ => Claim::Active(holder),
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
    match claim(facts.lease, facts.now, facts.margin) {
        Claim::Active(holder) => {
            let encoded = encode_identity(holder);
            let ours = |l: &str| vm.granted_to == Some(l);
            let plan = match vm.label {
                Some(label) if label != encoded && !ours(label) => {
                    conflict(member, namespace, vm, &facts.grant, label, holder)
                }
                _ => Plan::Grant(grant(vm, facts, holder, encoded)),
            };
            Decision { plan, requeue_at }
        }
        Claim::Stale(holder, rv) => nothing(Plan::Teardown(teardown(
            vm,
            &facts.grant,
            Some(holder),
            Some(rv.unwrap_or_default().to_owned()),
        ))),
        Claim::Inactive => {
            let traces = vm.granted_to.is_some() || facts.grant.exists;
            nothing(if traces {
                Plan::Teardown(teardown(vm, &facts.grant, None, None))
            } else if vm.reason.is_some() {
                Plan::ClearReason
            } else {
                Plan::Nothing
            })
        }
    }
}

fn grant(vm: VmFacts<'_>, facts: &MemberFacts<'_>, holder: &str, encoded: String) -> GrantPlan {
    let granted = vm.granted_to == Some(encoded.as_str());
    // Whom access was for before, if not the holder: the binding's subject (the full
    // identity), else the granted-to annotation (decoded).
    let previous = facts
        .grant
        .bound
        .clone()
        .filter(|b| b != holder)
        .or_else(|| vm.granted_to.filter(|g| *g != encoded).map(label_holder));
    let claimed_at = facts
        .lease
        .and_then(|l| l.acquired_at)
        .map(crate::rfc3339)
        .or_else(|| vm.claimed_at.map(str::to_owned))
        .unwrap_or_else(|| crate::rfc3339(facts.now));
    let start = !vdi_core::claim::runs(vm.power)
        && vm.power != "Paused"
        && (!granted || vm.reason.is_some());
    let write_vm = vm.label != Some(encoded.as_str())
        || !granted
        || vm.claimed_at != Some(claimed_at.as_str());
    let event = if previous.is_some() {
        Some(Reason::HolderChanged)
    } else if !granted {
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
        start,
        write_vm,
        event,
    }
}

fn conflict(
    member: &str,
    namespace: &str,
    vm: VmFacts<'_>,
    grant: &GrantFacts,
    label: &str,
    holder: &str,
) -> Plan {
    let reason = conflict_reason(member, namespace, label, holder);
    let write_vm = vm.reason != Some(reason.as_str()) || vm.granted_to.is_some();
    Plan::Conflict(ConflictPlan {
        reason,
        delete_grant: grant.exists,
        write_vm,
    })
}

fn teardown(
    vm: VmFacts<'_>,
    grant: &GrantFacts,
    stale_holder: Option<&str>,
    reclaim: Option<String>,
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
    let reclaimed = reclaim.is_some();
    TeardownPlan {
        reclaim,
        holder,
        delete_grant: grant.exists,
        cut_console: (traces || reclaimed) && vm.power != "Stopped",
        stop: (traces || reclaimed) && ours,
        clear_label: claim_label,
        write_vm: vm.granted_to.is_some() || vm.reason.is_some() || claim_label,
        event: if reclaimed {
            Some(Reason::Reclaimed)
        } else if traces {
            Some(Reason::Released)
        } else {
            None
        },
    }
}

#[cfg(test)]
mod tests;
