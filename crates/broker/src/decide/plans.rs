//! What [`super::decide`] reads (facts) and what it asks for (plans).

use jiff::{SignedDuration, Timestamp};
use vdi_core::lease::LeaseView;
use vdi_core::policy::reclaim::{ReclaimDue, ReclaimWhy};
use vdi_core::policy::{OnRelease, Policy};

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
    /// `corral.dev/vdi-idle-since` (`vdi_core::names::IDLE_SINCE_ANNOTATION`), as written.
    pub idle_since: Option<&'a str>,
    /// The reclaim notice the broker wrote ([`super::NOTICE_ANNOTATION`]), as written.
    pub notice: Option<&'a str>,
    /// `corral.dev/vdi-removing` (`vdi_core::names::REMOVING_ANNOTATION`): the pool loop
    /// removes the member.
    pub removing: Option<&'a str>,
    /// The uid of the member's VMI, if one exists (running, starting or shutting down).
    pub vmi: Option<&'a str>,
    /// `corral.dev/vdi-last-session` (`vdi_core::names::LAST_SESSION_ANNOTATION`): the uid of
    /// the VMI the last claim's session ran on, written when that claim ended while it ran.
    pub last_session: Option<&'a str>,
    /// `corral.dev/vdi-owner` (`vdi_core::names::OWNER_ANNOTATION`): a dedicated pool's owner
    /// of the member, if not empty.
    pub owner: Option<&'a str>,
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
    /// The pool's policy when the pool is managed (its DesktopPool's policy reads); `None`: an
    /// unmanaged pool, or a DesktopPool whose policy cannot be read (the seed's rules).
    pub policy: Option<&'a Policy>,
    /// The claim Lease's `corral.dev/vdi-kept-at` (`vdi_core::names::KEPT_AT_ANNOTATION`):
    /// the holder's last Keep, if it reads.
    pub kept_at: Option<Timestamp>,
    /// Why no claim may be granted now (the cluster does not enforce the claim rules,
    /// [`crate::enforcement`]; or an administrator's assignment to someone RBAC does not
    /// entitle); `None` while claims may be granted.
    pub refusing: Option<&'a str>,
    /// Why the active claim can never be granted, so that it is released at once rather than
    /// left to block the member ([`crate::entitled::Refusal::Never`]: a Lease of another pool
    /// than its member's); `None` otherwise.
    pub never: Option<&'a str>,
    /// In a dedicated pool, another member the holder owns already, if any: a member nobody
    /// owns is not made theirs too.
    pub owns_elsewhere: Option<&'a str>,
    /// The pool has a DesktopPool whose policy cannot be read (`policy` is then `None`): the
    /// broker releases nothing it would not release under any policy.
    pub policy_unreadable: bool,
}

/// Why an Event is recorded (its `reason`, SPEC "Audit").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Access granted to the holder.
    Claimed,
    /// The claim ended (its Lease released or deleted).
    Released,
    /// A claim was reclaimed (its Lease deleted: stale past the margin, never expiring, past a
    /// managed pool's rule, or a claim that could never be granted).
    Reclaimed,
    /// The Lease's holder changed: access moved to the new holder.
    HolderChanged,
    /// The label and the Lease name different people.
    Conflict,
    /// The claim Lease names a holder but its times or duration cannot be read.
    UnreadableClaim,
    /// The VM could not be started.
    StartFailed,
    /// A managed pool's claim will be reclaimed soon (its notice).
    ReclaimSoon,
    /// The claim is not granted: the cluster does not enforce the claim rules, its holder is
    /// one of Kubernetes' own identities (`system:…`), RBAC does not entitle an administrator's
    /// assignee, the member is someone else's or a second desktop (a granted session), or an
    /// administrator's label names someone the pool is not for.
    NotGranted,
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
            Reason::ReclaimSoon => "ReclaimSoon",
            Reason::NotGranted => "NotGranted",
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
    /// The claimed-at value to write (RFC 3339 UTC, to the second): when the broker first
    /// granted the holder, by the API server's clock, never later than now. A claim new to the
    /// broker: the Lease's acquireTime, else what is written, else now (the earliest of it and
    /// now). A hand-over (granted-to names someone else): the Lease's acquireTime if it is
    /// later than the old holder's claimed-at and not ahead of now (the editor set it anew),
    /// else now. A claim granted already: what is written, whatever the holder writes since.
    pub claimed_at: String,
    /// Apply the Role and RoleBinding (missing, or not as they should be).
    pub apply_grant: bool,
    /// The identity access was granted to before, when it was someone else: their access ends
    /// once the binding names the new holder.
    pub previous: Option<String>,
    /// Start the VM (capacity check first): it does not run, and the claim is new to the
    /// broker or a start is still owed (a reason annotation). A VM its holder stopped stays
    /// stopped.
    pub start: bool,
    /// Remove `vdi_core::names::LAST_SESSION_ANNOTATION`: the last claim's VMI is gone.
    pub clear_last_session: bool,
    /// The label, claimed-at, granted-to or the reclaim notice are not yet as they should be.
    /// The VM is written (one merge patch of those and the reason) when they differ or when the
    /// reason to write (none, or why the start failed) differs from the one written.
    pub write_vm: bool,
    /// The Event to record once the VM is written.
    pub event: Option<Reason>,
    /// The reclaim notice the VM should carry ([`super::NOTICE_ANNOTATION`], `<why> <at>`):
    /// a managed pool's next reclaim once its notice time passed
    /// ([`vdi_core::policy::reclaim::ReclaimDue::notice_at`]); `None` otherwise (removed if
    /// written).
    pub notice: Option<String>,
    /// The reclaim to announce with an Event [`Reason::ReclaimSoon`] once the VM is written:
    /// `notice` is new (the member crossed into the notice lead of this reclaim).
    pub announce: Option<ReclaimDue>,
    /// Who wrote the claim for the holder, when someone else did (an administrator's
    /// assignment; the Lease's record, which the guard pins to its writer): the grant's Event
    /// names them.
    pub assigned_by: Option<String>,
    /// The owner to write (`vdi_core::names::OWNER_ANNOTATION`): the holder, on their first
    /// claim of an unowned member of a dedicated pool; `None` otherwise.
    pub owner: Option<String>,
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
    /// Why a Lease is reclaimed, as a sentence ("renewTime missing", "renewTime … is ahead of
    /// the API server's clock", "maxSession 8h since … passed"); `None` for one stale past the
    /// margin in an unmanaged pool.
    pub why: Option<String>,
    /// A managed pool's reclaim rule that ended the claim (the Event's `why`).
    pub reclaim_why: Option<ReclaimWhy>,
    /// The identity the claim was for, as far as it is known (for the Event's note).
    pub holder: Option<String>,
    /// Delete the Role and RoleBinding.
    pub delete_grant: bool,
    /// Open `vnc` without preserveSession and close it: the holder's open console ends (their
    /// other streams end as the VM stops, restarts or goes).
    pub cut_console: bool,
    /// What becomes of the member (the pool's `onRelease`; `Keep`, which stops it, in an
    /// unmanaged pool); `None`: its power is left alone (the label is not the claim's).
    pub on_release: Option<OnRelease>,
    /// Remove the label and claimed-at (they are the claim's), and the idle and notice
    /// annotations.
    pub clear_label: bool,
    /// The reason annotation to leave on the VM (a Lease stuck deleting); `None` removes it.
    pub reason: Option<String>,
    /// Write the VM (remove granted-to, set or remove the reason, remove the label if
    /// `clear_label`).
    pub write_vm: bool,
    /// The Event to record once done (only if something was done).
    pub event: Option<Reason>,
    /// The uid of the VMI the ending claim's session runs on, recorded on the VM
    /// (`vdi_core::names::LAST_SESSION_ANNOTATION`) so that the next holder is bound only
    /// once the member runs another VMI or none; `None`: no VMI runs.
    pub last_session: Option<String>,
    /// A hand-over (the Lease names another holder than the one granted, and a VMI runs): the
    /// new holder, and the assigned-to label and claimed-at (now) written for them at once.
    /// The member is restarted (`on_release` is `Restart`) and the new holder is granted only
    /// once that VMI is gone.
    pub handover: Option<Handover>,
    /// A claim that could never be granted (another pool's, someone else's desktop, a second
    /// desktop), released at once: counted as `unfit` among the reclaims.
    pub unfit: bool,
}

/// The new holder of a member handed over while it runs ([`TeardownPlan::handover`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    /// The Lease's holder now (the full identity).
    pub holder: String,
    /// `encode_identity(holder)`: the label written for them.
    pub label: String,
    /// The claimed-at written for them: the time the broker saw the hand-over.
    pub claimed_at: String,
}

/// An active claim on a member whose VMI is still the last claim's session
/// ([`VmFacts::last_session`]): no grant yet; the claimant is told why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwaitPlan {
    /// The Lease's holder.
    pub holder: String,
    /// The reason annotation: waiting for the last session to end.
    pub reason: String,
    /// Restart the member: that VMI runs on and is not shutting down (a member kept running
    /// after its release), so it would never end by itself.
    pub restart: bool,
    /// The reason annotation is not yet written.
    pub write_vm: bool,
}

/// A free member an administrator labelled for `holder` (the seed's Go CLI assigns by the
/// assigned-to label alone, SPEC "Broker"): the broker claims it for them, a Lease written as
/// a claim would write it, once RBAC entitles them to the member's pool; the grant follows the
/// Lease as for any claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptPlan {
    /// Whom the label names (decoded): the Lease's holder to be.
    pub holder: String,
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
    /// See [`AwaitPlan`].
    AwaitSession(AwaitPlan),
    /// See [`AdoptPlan`].
    Adopt(AdoptPlan),
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
    /// When the state changes by the clock alone: an active Lease's expiry plus the margin; in
    /// a managed pool, the next reclaim's notice time, then the reclaim.
    pub requeue_at: Option<Timestamp>,
    /// Ask the guest who is logged in (KubeVirt's `userlist`, [`crate::idle`]): an active,
    /// granted claim on a running member of a pool with an `idleTimeout`.
    pub idle_poll: bool,
}
