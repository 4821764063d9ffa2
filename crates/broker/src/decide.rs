//! The broker's rules for one member, without a request: what the cluster's current state
//! (its VM, its claim Lease, its grant) asks the broker to do (SPEC "Broker", common names in
//! `vdi_core::names`). [`decide`] is level-based: it looks only at the state now, never at
//! what happened before, so a restart or a missed event changes nothing, and deciding again on
//! the state a plan left behind asks for nothing more.
//!
//! The rules, per member `M` with VM labels/annotations as written and its Lease
//! `corral-vdi-M` (read with [`vdi_core::lease::lease_view`]):
//! - **Active Lease** (a holder `H`, readable times, a `renewTime` (else `acquireTime`) not
//!   ahead of the API server's clock by more than the margin, and `renewTime +
//!   leaseDurationSeconds + margin` after now: a claim still inside the reclaim margin is kept)
//!   and the assigned-to label absent (not yet written: the broker's own removed is a release,
//!   below), the broker's own (equal to the granted-to annotation) or `encode(H)`:
//!   [`Plan::Grant`]. The label follows the Lease, so an administrator's hand edit of the holder
//!   moves the grant.
//! - **The last session first** (SPEC "Broker": a holder is never bound to a member whose
//!   running VMI started before their claim). A claim that ends while the member's VMI runs
//!   records that VMI's uid ([`TeardownPlan::last_session`]); a new holder is granted only once
//!   the member runs another VMI or none ([`Plan::AwaitSession`] until then, "waiting for the
//!   last session to end"; a VMI that runs on is restarted). A hand-over (the Lease names
//!   someone else than the holder granted) while a VMI runs is a [`Plan::Teardown`] of the
//!   previous holder's claim with a restart ([`TeardownPlan::handover`]): KubeVirt can end an
//!   open `portforward` or `usbredir` stream, and a logged-in desktop, only with its VMI.
//! - Active Lease while the cluster does not enforce the claim rules
//!   ([`MemberFacts::refusing`], [`crate::enforcement`]), or held by one of Kubernetes' own
//!   identities (`system:…` other than a service account, which no person signs in as):
//!   [`Plan::Refuse`] with [`Reason::NotGranted`] (no grant, the grant made before revoked, the
//!   reason on the member, one Event). Nothing else of the claim changes: it is granted once
//!   the rules are enforced again.
//! - Active Lease and a label naming someone else that is not the broker's: [`Plan::Refuse`]
//!   with [`Reason::Conflict`] (no grant to either; a reason annotation naming both fixes, one
//!   Event).
//! - **An active claim that can never be granted** (a Lease labelled with another pool than its
//!   member's, [`MemberFacts::never`]; a member someone else owns where owner marks count,
//!   `vdi_core::claim::ownership::owners_count`; a dedicated member nobody owns, claimed by
//!   someone who owns another of the pool, [`MemberFacts::owns_elsewhere`]): if it was never
//!   granted and the pool's policy reads, reclaimed at once ([`Plan::Teardown`], the Lease
//!   deleted under its resourceVersion, Event `Reclaimed` saying why, counted `unfit`), so that
//!   a Lease renewed for ever keeps nobody out; otherwise [`Plan::Refuse`] (a granted session
//!   is revoked, not torn down, and granted again once an administrator undoes the change).
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
//!   annotation names its finalizers until they go.
//! - **A label-only assignment** (label, no active Lease, no trace, no last session recorded:
//!   the seed's Go CLI writes the label alone; with a broker, the guard and the broker's members
//!   policy let only administrators and the broker write it, and the broker's own hand-over
//!   label comes with the last session's record) naming a person or robot, while the claim
//!   rules are enforced: [`Plan::Adopt`], a claim for the labelled user, made once RBAC entitles
//!   them to the pool (else the reason on the member); on a dedicated member someone else owns,
//!   [`Plan::Refuse`]. A label that names nobody (a hashed one, one of Kubernetes' own
//!   identities) is left alone.
//! - **Active Lease, the label removed** after the broker wrote it (granted-to names the holder
//!   and the grant binds them): released ([`Plan::Teardown`], the Lease deleted under its
//!   resourceVersion, one `Released` Event saying the label went), the Go CLI's unassign.
//! - A grant whose member is gone: [`Plan::DeleteOrphanGrant`].
//! - **The broker's own Lease** (held by `vdi_core::names::BROKER_USER`: the pool loop took
//!   the member to remove it) or a VM annotated `corral.dev/vdi-removing`: no claim. No grant,
//!   no reclaim, no start or stop; a grant left on it is revoked ([`Plan::Teardown`] of the
//!   grant alone); the member is the pool loop's.
//!
//! **Managed pools** (a DesktopPool whose policy reads, [`MemberFacts::policy`]; the `managed`
//! module): an active claim is also reclaimed when `maxSession` since its acquireTime or
//! `idleTimeout` without a logged-in user passed ([`vdi_core::policy::reclaim::due`]; a
//! disconnect is the expiry plus the margin, as above), with the rule's word in the Event
//! ([`TeardownPlan::reclaim_why`]). From its next reclaim's notice time
//! ([`vdi_core::policy::reclaim::notice_lead`] before it) the member carries
//! [`NOTICE_ANNOTATION`] and one Event `ReclaimSoon` is recorded as it is written
//! ([`GrantPlan::announce`]); the member is looked at again at the notice time and at the
//! reclaim. Every end of a claim (release, reclaim, force release) applies the pool's
//! `onRelease` ([`TeardownPlan::on_release`]) where an unmanaged pool stops the member. Its
//! guest is asked who is logged in while the claim is granted and the member runs
//! ([`Decision::idle_poll`]).
//!
//! Events are planned only for a change the plan makes (a grant, a teardown of traces, a
//! reason written anew), so deciding again on the same state plans none.

mod managed;
mod plans;
mod sentences;

use jiff::Timestamp;
use vdi_core::names::{
    BROKER_USER, DecodedLabel, decode_identity, encode_identity, label_matches_identity,
};
use vdi_core::policy::OnRelease;
// What a claim's end does: the core's rule, which the views' words follow too.
use vdi_core::claim::ownership::owners_count;
use vdi_core::policy::reclaim::{
    ReclaimDue, ReclaimWhy, WrittenTimes, recorded_start, trusted_times,
};
use vdi_core::policy::release::on_release;
use vdi_core::state::label_holder;
use vdi_core::validate::can_be_a_person;

pub use managed::NOTICE_ANNOTATION;

pub use plans::{
    AdoptPlan, AwaitPlan, Decision, GrantFacts, GrantPlan, Handover, MemberFacts, Plan, Reason,
    RefusalPlan, TeardownPlan, VmFacts,
};
pub use sentences::{
    IDENTITY_SHOWN, conflict_reason, deleting_reason, label_not_entitled_reason,
    label_owned_reason, not_a_person_reason, owned_reason, owns_elsewhere_reason, shown,
    unreadable_reason,
};

/// What the Lease says now, with the reclaim margin (and a managed pool's rules) applied.
enum Claim<'a> {
    /// A holder, readable, not yet past expiry + margin nor, in a managed pool, past another
    /// reclaim rule; in a managed pool, its next reclaim.
    Active(&'a str, Option<ReclaimDue>),
    /// A holder and a Lease to delete (with its resourceVersion): stale past expiry + margin
    /// (`why` none in an unmanaged pool), one that never expires or lies about its time, or
    /// one a managed pool's rule ends (`rule`).
    Reclaim {
        holder: &'a str,
        resource_version: Option<&'a str>,
        why: Option<String>,
        rule: Option<ReclaimWhy>,
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
    let reclaim = |why, rule| Claim::Reclaim {
        holder,
        resource_version: lease.resource_version.as_deref(),
        why,
        rule,
    };
    // The time the expiry counts from, as lease_view counts it: renewTime, else acquireTime.
    let last = (lease.renewed_at.map(|r| ("renewTime", r)))
        .or_else(|| lease.acquired_at.map(|a| ("acquireTime", a)));
    let Some((field, last)) = last else {
        return reclaim(Some("renewTime missing".into()), None);
    };
    if now.checked_add(margin).is_ok_and(|limit| last > limit) {
        return reclaim(
            Some(format!("{field} {last} is ahead of the API server's clock")),
            None,
        );
    }
    let Some(end) = lease.expires_at else {
        return reclaim(Some("leaseDurationSeconds missing".into()), None);
    };
    match facts.policy {
        Some(policy) => {
            let idle_since = facts
                .vm
                .and_then(|vm| vm.idle_since)
                .and_then(|i| i.parse::<Timestamp>().ok());
            let written = WrittenTimes {
                lease,
                recorded_start: facts
                    .vm
                    .and_then(|vm| recorded_start(vm.granted_to, vm.claimed_at, holder)),
                kept_at: facts.kept_at,
                idle_since,
            };
            match managed::next_reclaim(policy, &written, now, margin) {
                Some(next) if next.at <= now => {
                    let times = trusted_times(policy, &written, now);
                    let why = managed::explain(policy, lease, &times, &next);
                    reclaim(Some(why), Some(next.why))
                }
                next => Claim::Active(holder, next),
            }
        }
        None if end.checked_add(margin).unwrap_or(end) <= now => reclaim(None, None),
        None => Claim::Active(holder, None),
    }
}

/// Decides what to do with member `member` in `namespace` (see the module doc for the rules).
pub fn decide(member: &str, namespace: &str, facts: &MemberFacts<'_>) -> Decision {
    let nothing = |plan| Decision {
        plan,
        requeue_at: None,
        idle_poll: false,
    };
    let Some(vm) = facts.vm else {
        return nothing(if facts.grant.exists {
            Plan::DeleteOrphanGrant
        } else {
            Plan::Nothing
        });
    };
    // The broker's own hold (a member taken for removal) and a member being removed are no
    // claims: the pool loop's. A grant left on them is only revoked.
    let broker_holds = facts.lease.and_then(|l| l.holder.as_deref()) == Some(BROKER_USER);
    if broker_holds || vm.removing.is_some() {
        return nothing(if facts.grant.exists {
            Plan::Teardown(revoke(vm))
        } else {
            Plan::Nothing
        });
    }
    let traces = vm.granted_to.is_some() || facts.grant.exists;
    match claim(facts) {
        Claim::Active(holder, next) => {
            let encoded = encode_identity(holder);
            let ours = |l: &str| vm.granted_to == Some(l);
            let plan = match vm.label {
                _ if facts.refusing.is_some() || !can_be_a_person(holder) => {
                    let reason = match facts.refusing {
                        Some(why) => why.to_owned(),
                        None => not_a_person_reason(member, namespace, holder),
                    };
                    refuse(vm, &facts.grant, Reason::NotGranted, holder, reason)
                }
                // The label the broker wrote with the grant was removed: an administrator's
                // release of the label alone (the seed's Go CLI's unassign).
                None if ours(&encoded) && facts.grant.bound.as_deref() == Some(holder) => {
                    Plan::Teardown(unlabelled(vm, facts, holder))
                }
                Some(label) if label != encoded && !ours(label) => {
                    let reason = conflict_reason(member, namespace, label, holder);
                    refuse(vm, &facts.grant, Reason::Conflict, holder, reason)
                }
                // Claims that can never be granted are released at once, so that a Lease
                // renewed for ever blocks nobody: another pool's, someone else's desktop, a
                // second desktop of the same user. Only claims never granted, and only while
                // the pool's policy reads: a granted session is refused (revoked, its Lease
                // kept) and granted again once an administrator undoes the change.
                _ if facts.never.is_some() => {
                    let why = facts.never.unwrap_or_default().to_owned();
                    unfit(vm, facts, holder, why)
                }
                _ if owned_by_another(facts, vm, holder) => {
                    let owner = vm.owner.unwrap_or_default();
                    let why = owned_reason(member, namespace, owner, holder);
                    unfit(vm, facts, holder, why)
                }
                _ if facts.owns_elsewhere.is_some() && vm.owner.is_none() => {
                    let own = facts.owns_elsewhere.unwrap_or_default();
                    let why = owns_elsewhere_reason(member, namespace, own, holder);
                    unfit(vm, facts, holder, why)
                }
                _ => {
                    let granted = vm.granted_to == Some(encoded.as_str());
                    match vm.vmi {
                        // Granted to someone else while a VMI runs their session: theirs
                        // ends first (a restart), the new holder is bound after.
                        Some(vmi) if vm.granted_to.is_some() && !granted => {
                            Plan::Teardown(handover(vm, facts, holder, encoded, vmi))
                        }
                        Some(vmi) if !granted && vm.last_session == Some(vmi) => {
                            Plan::AwaitSession(await_session(vm, member, holder))
                        }
                        _ => Plan::Grant(grant(vm, facts, holder, encoded, next)),
                    }
                }
            };
            let requeue_at = match next {
                Some(next) if facts.now < next.notice_at => Some(next.notice_at),
                Some(next) => Some(next.at),
                None => facts
                    .lease
                    .and_then(|l| l.expires_at)
                    .and_then(|e| e.checked_add(facts.margin).ok()),
            };
            let idle_poll = matches!(plan, Plan::Grant(_))
                && vm.power == "Running"
                && facts.policy.is_some_and(|p| p.idle_timeout.is_some());
            Decision {
                plan,
                requeue_at,
                idle_poll,
            }
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
            rule,
        } => {
            let mut plan = teardown(vm, facts, Some(holder), None);
            plan.reclaim = Some(resource_version.unwrap_or_default().to_owned());
            plan.why = why;
            plan.reclaim_why = rule;
            plan.cut_console = vm.power != "Stopped";
            plan.on_release =
                (vm.label.is_none() || plan.clear_label).then(|| on_release(facts.policy));
            plan.event = Some(Reason::Reclaimed);
            nothing(Plan::Teardown(plan))
        }
        Claim::Deleting(finalizers) => {
            let reason =
                (!finalizers.is_empty()).then(|| deleting_reason(member, namespace, finalizers));
            let mut plan = teardown(vm, facts, None, reason);
            // A reset takes the Lease, which cannot be taken while it is being deleted: the
            // member is stopped instead.
            if plan.on_release == Some(OnRelease::Reset) {
                plan.on_release = Some(OnRelease::Keep);
            }
            nothing(if traces || plan.write_vm {
                Plan::Teardown(plan)
            } else {
                Plan::Nothing
            })
        }
        Claim::Inactive => nothing(if traces {
            Plan::Teardown(teardown(vm, facts, None, None))
        } else if let Some(labelled) = label_claimant(facts, vm) {
            match vm.owner {
                Some(owner) if owned_by_another(facts, vm, &labelled) => {
                    let reason = label_owned_reason(member, namespace, &labelled, owner);
                    refuse(vm, &facts.grant, Reason::NotGranted, &labelled, reason)
                }
                _ => Plan::Adopt(AdoptPlan { holder: labelled }),
            }
        } else if vm.reason.is_some() || vm.idle_since.is_some() || vm.notice.is_some() {
            Plan::ClearReason
        } else {
            Plan::Nothing
        }),
    }
}

/// A member someone else owns: never granted to `holder`, unless its pool is floating now (an
/// administrator's choice). A pool whose policy cannot be read, or that has none any more,
/// keeps its owners' members theirs.
fn owned_by_another(facts: &MemberFacts<'_>, vm: VmFacts<'_>, holder: &str) -> bool {
    owners_count(facts.policy.map(|p| p.dedicated())) && vm.owner.is_some_and(|o| o != holder)
}

/// Whom a free member's label-only assignment is for, if the broker adopts it as a claim
/// ([`Plan::Adopt`]): the label decodes to an identity a person or robot signs in as, and the
/// cluster enforces the claim rules (else nothing of a claim would be granted either).
fn label_claimant(facts: &MemberFacts<'_>, vm: VmFacts<'_>) -> Option<String> {
    // A label beside the last session's record is the broker's own hand-over label (written
    // for a new holder who then gave the claim up), not an administrator's assignment.
    if facts.refusing.is_some() || vm.last_session.is_some() {
        return None;
    }
    match decode_identity(vm.label?) {
        DecodedLabel::Identity(id) if can_be_a_person(&id) => Some(id),
        _ => None,
    }
}

/// `holder`'s granted claim whose assigned-to label was removed: released as its holder's
/// release would be (the Lease deleted under its resourceVersion, access revoked, the console
/// cut, `onRelease` applied, one `Released` Event).
fn unlabelled(vm: VmFacts<'_>, facts: &MemberFacts<'_>, holder: &str) -> TeardownPlan {
    let mut plan = teardown(vm, facts, Some(holder), None);
    plan.reclaim = facts.lease.and_then(|l| l.resource_version.clone());
    plan.why = Some(
        "its assigned-to label was removed: an administrator's release of the label alone".into(),
    );
    plan.event = Some(Reason::Released);
    plan
}

/// `holder`'s active claim that is not to be granted (`why`). Never granted before and the
/// pool's policy readable (or no DesktopPool at all): released as a reclaim is (the Lease deleted
/// under its resourceVersion, whatever the broker made of it undone), one `Reclaimed` Event
/// naming why, the member's power left alone. Otherwise refused: no grant (revoked), the reason
/// on the member, the Lease kept.
fn unfit(vm: VmFacts<'_>, facts: &MemberFacts<'_>, holder: &str, why: String) -> Plan {
    let granted = vm.granted_to == Some(encode_identity(holder).as_str());
    if granted || facts.policy_unreadable {
        return refuse(vm, &facts.grant, Reason::NotGranted, holder, why);
    }
    let mut plan = teardown(vm, facts, Some(holder), None);
    plan.reclaim = facts.lease.and_then(|l| l.resource_version.clone());
    plan.why = Some(why);
    plan.event = Some(Reason::Reclaimed);
    plan.unfit = true;
    Plan::Teardown(plan)
}

fn grant(
    vm: VmFacts<'_>,
    facts: &MemberFacts<'_>,
    holder: &str,
    encoded: String,
    next: Option<ReclaimDue>,
) -> GrantPlan {
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
    // Compared to the second, as claimed-at is written. Claimed-at is the broker's record of
    // when it first granted the holder, in the API server's clock (the claim's start as
    // `vdi_core::policy::reclaim::trusted_times` counts it): an acquireTime ahead of that clock
    // is not believed, and for a holder granted already it never moves.
    let now = Timestamp::from_second(facts.now.as_second()).unwrap_or(facts.now);
    let acquired = facts
        .lease
        .and_then(|l| l.acquired_at)
        .and_then(|a| Timestamp::from_second(a.as_second()).ok());
    let written = vm.claimed_at.and_then(|w| w.parse::<Timestamp>().ok());
    let anew = acquired.filter(|a| *a <= now);
    let claimed_at = if handover {
        // A new holder: the Lease's acquireTime when the editor set it anew (later than the old
        // holder's claimed-at, not ahead of now), else now, when the broker saw the new holder.
        vdi_core::clock::annotation_time(
            anew.filter(|a| written.is_none_or(|w| *a > w))
                .unwrap_or(now),
        )
    } else if granted && written.is_some() {
        vm.claimed_at.unwrap_or_default().to_owned()
    } else {
        // New to the broker: the time of the hand-over it recorded (a member handed over while
        // it ran, decide::handover), else the Lease's acquireTime, else what is written, else
        // now; never ahead of now.
        let handed_over = written.filter(|_| vm.last_session.is_some());
        let at = handed_over.or(anew).or(written).map_or(now, |t| t.min(now));
        vdi_core::clock::annotation_time(at)
    };
    let start = !vdi_core::resources::runs(vm.power)
        && vm.power != "Paused"
        && (!granted || vm.reason.is_some());
    // A managed pool's next reclaim, once its notice time passed.
    let soon = next.filter(|next| next.notice_due(facts.now));
    let notice = soon.as_ref().map(managed::notice_value);
    let announce = soon.filter(|_| vm.notice != notice.as_deref());
    // A dedicated pool's member becomes its first holder's.
    let owner = (facts.policy.is_some_and(|p| p.dedicated()) && vm.owner.is_none())
        .then(|| holder.to_owned());
    let write_vm = owner.is_some()
        || vm.label != Some(encoded.as_str())
        || !granted
        || vm.claimed_at != Some(claimed_at.as_str())
        || vm.notice != notice.as_deref()
        || vm.last_session.is_some();
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
        start,
        clear_last_session: vm.last_session.is_some(),
        write_vm,
        event,
        notice,
        announce,
        assigned_by: facts.lease.and_then(|l| l.assigned_by.clone()),
        owner,
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
    facts: &MemberFacts<'_>,
    stale_holder: Option<&str>,
    reason: Option<String>,
) -> TeardownPlan {
    let grant = &facts.grant;
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
    let last_session = session_ending(vm, traces);
    let holder = stale_holder
        .map(str::to_owned)
        .or_else(|| grant.bound.clone())
        .or_else(|| vm.granted_to.map(label_holder));
    TeardownPlan {
        reclaim: None,
        why: None,
        reclaim_why: None,
        holder,
        delete_grant: grant.exists,
        cut_console: traces && vm.power != "Stopped",
        on_release: (traces && ours).then(|| on_release(facts.policy)),
        clear_label: claim_label,
        write_vm: vm.granted_to.is_some()
            || last_session.is_some()
            || vm.reason != reason.as_deref()
            || claim_label
            || vm.idle_since.is_some()
            || vm.notice.is_some(),
        reason,
        event: traces.then_some(Reason::Released),
        last_session,
        handover: None,
        unfit: false,
    }
}

/// The VMI whose session ends with a claim (its traces on the member), to be recorded as
/// [`TeardownPlan::last_session`]: the member's VMI, if one runs and is not recorded yet.
fn session_ending(vm: VmFacts<'_>, traces: bool) -> Option<String> {
    vm.vmi
        .filter(|v| traces && vm.last_session != Some(*v))
        .map(str::to_owned)
}

/// A member granted to someone else whose VMI `vmi` runs, and whose Lease now names `holder`
/// (an administrator's hand edit, or a new claim the broker saw without the release before
/// it): the previous holder's claim ends as a release would, but the member is restarted (a
/// new VMI: every stream of theirs ends, and their logged-in session with it) whatever
/// `onRelease` says, the label follows the Lease at once (with claimed-at now), and the new
/// holder is granted once `vmi` is gone ([`await_session`] until then).
fn handover(
    vm: VmFacts<'_>,
    facts: &MemberFacts<'_>,
    holder: &str,
    encoded: String,
    vmi: &str,
) -> TeardownPlan {
    let mut plan = teardown(vm, facts, None, None);
    plan.on_release = Some(OnRelease::Restart);
    plan.cut_console = true;
    plan.clear_label = false;
    plan.write_vm = true;
    plan.event = Some(Reason::HolderChanged);
    plan.last_session = Some(vmi.to_owned());
    plan.handover = Some(Handover {
        holder: holder.to_owned(),
        label: encoded,
        claimed_at: vdi_core::clock::annotation_time(facts.now),
    });
    plan
}

/// An active claim of `holder` on `member`, whose VMI is still the last claim's session: no
/// grant until it is gone; restarted if it runs on (not shutting down).
fn await_session(vm: VmFacts<'_>, member: &str, holder: &str) -> AwaitPlan {
    let reason = format!(
        "waiting for the last session on {member} to end: its VMI is still shutting down \
         (KubeVirt gives a guest up to its terminationGracePeriodSeconds); access follows then"
    );
    AwaitPlan {
        holder: holder.to_owned(),
        restart: matches!(vm.power, "Running" | "Paused"),
        write_vm: vm.reason != Some(reason.as_str()),
        reason,
    }
}

/// Only the grant revoked (and the console it gave cut): a member that is no claim's.
fn revoke(vm: VmFacts<'_>) -> TeardownPlan {
    TeardownPlan {
        reclaim: None,
        why: None,
        reclaim_why: None,
        holder: None,
        delete_grant: true,
        cut_console: vm.power != "Stopped",
        on_release: None,
        clear_label: false,
        reason: None,
        write_vm: false,
        event: None,
        last_session: None,
        handover: None,
        unfit: false,
    }
}

#[cfg(test)]
mod tests;
