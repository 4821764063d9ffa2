//! One test per rule of [`super::decide`]: state in, plan out.

use jiff::SignedDuration;
use vdi_core::lease::LeaseView;

use super::*;

mod managed;

const NS: &str = "corral-vms";
const M: &str = "dev-1";

fn now() -> Timestamp {
    "2026-12-03T12:00:00Z".parse().unwrap()
}

/// A Lease held by `holder`, acquired at 11:00 and expiring at `expires` (a time on 2026-12-03).
fn lease(holder: &str, expires: &str) -> LeaseView {
    LeaseView {
        holder: Some(holder.into()).filter(|h: &String| !h.is_empty()),
        acquired_at: Some("2026-12-03T11:00:00.123456Z".parse().unwrap()),
        renewed_at: None,
        duration_seconds: Some(3600),
        expires_at: Some(format!("2026-12-03T{expires}Z").parse().unwrap()),
        active: false,
        renew_time_in_future: false,
        transitions: 0,
        resource_version: Some("42".into()),
        problem: None,
        assigned_by: None,
    }
}

fn vm() -> VmFacts<'static> {
    VmFacts {
        power: "Stopped",
        ..VmFacts::default()
    }
}

fn decide_with(vm: Option<VmFacts<'_>>, lease: Option<&LeaseView>, grant: GrantFacts) -> Decision {
    decide_deleting(vm, lease, None, grant)
}

/// [`decide_with`] for a Lease being deleted, kept by `finalizers`.
fn decide_deleting(
    vm: Option<VmFacts<'_>>,
    lease: Option<&LeaseView>,
    finalizers: Option<&[String]>,
    grant: GrantFacts,
) -> Decision {
    decide(
        M,
        NS,
        &MemberFacts {
            vm,
            lease,
            lease_deleting: finalizers,
            grant,
            now: now(),
            margin: SignedDuration::from_secs(30),
            policy: None,
            kept_at: None,
            refusing: None,
            never: None,
            owns_elsewhere: None,
            policy_unreadable: false,
        },
    )
}

fn granted(holder: &str) -> GrantFacts {
    GrantFacts {
        exists: true,
        bound: Some(holder.into()),
        current: true,
    }
}

fn grant_plan(d: &Decision) -> &GrantPlan {
    match &d.plan {
        Plan::Grant(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn teardown_plan(d: &Decision) -> &TeardownPlan {
    match &d.plan {
        Plan::Teardown(t) => t,
        other => panic!("expected a teardown, got {other:?}"),
    }
}

fn refusal_plan(d: &Decision) -> &RefusalPlan {
    match &d.plan {
        Plan::Refuse(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// alice's running member as the broker left it after granting it.
fn alices_running() -> VmFacts<'static> {
    VmFacts {
        label: Some("alice"),
        granted_to: Some("alice"),
        claimed_at: Some("2026-12-03T11:00:00Z"),
        power: "Running",
        ..vm()
    }
}

#[test]
fn a_new_claim_is_granted_labelled_and_started_and_looked_at_again_after_expiry_and_margin() {
    let l = lease("alice@example.com", "13:00:00");
    let d = decide_with(Some(vm()), Some(&l), GrantFacts::default());
    let g = grant_plan(&d);
    assert_eq!(g.holder, "alice@example.com");
    assert_eq!(g.label, encode_identity("alice@example.com"));
    assert_eq!(
        g.claimed_at, "2026-12-03T11:00:00Z",
        "the Lease's acquireTime"
    );
    assert!(g.apply_grant && g.start && g.write_vm);
    assert_eq!(
        (g.previous.as_deref(), g.event),
        (None, Some(Reason::Claimed))
    );
    assert_eq!(d.requeue_at, Some("2026-12-03T13:00:30Z".parse().unwrap()));
    assert_eq!(g.assigned_by, None, "alice claimed it herself");
}

#[test]
fn an_administrators_assignment_is_granted_naming_who_assigned_it() {
    let l = LeaseView {
        assigned_by: Some("admin".into()),
        ..lease("alice", "13:00:00")
    };
    let d = decide_with(Some(vm()), Some(&l), GrantFacts::default());
    let g = grant_plan(&d);
    assert_eq!(
        (g.holder.as_str(), g.assigned_by.as_deref(), g.event),
        ("alice", Some("admin"), Some(Reason::Claimed))
    );
}

#[test]
fn a_finished_claim_asks_for_nothing_more() {
    let l = lease("alice", "13:00:00");
    let running = VmFacts {
        label: Some("alice"),
        granted_to: Some("alice"),
        claimed_at: Some("2026-12-03T11:00:00Z"),
        power: "Running",
        ..vm()
    };
    let g = grant_plan(&decide_with(Some(running), Some(&l), granted("alice"))).clone();
    assert!(!g.apply_grant && !g.start && !g.write_vm, "{g:?}");
    assert_eq!((g.previous, g.event), (None, None));
}

#[test]
fn a_vm_its_holder_stopped_stays_stopped_but_an_owed_start_is_retried() {
    let l = lease("alice", "13:00:00");
    let stopped = VmFacts {
        label: Some("alice"),
        granted_to: Some("alice"),
        claimed_at: Some("2026-12-03T11:00:00Z"),
        ..vm()
    };
    let g = grant_plan(&decide_with(Some(stopped), Some(&l), granted("alice"))).clone();
    assert!(!g.start && !g.write_vm);
    let owed = VmFacts {
        reason: Some("no node has a free nvidia.com/T4 for dev-1: …"),
        ..stopped
    };
    let g = grant_plan(&decide_with(Some(owed), Some(&l), granted("alice"))).clone();
    assert!(
        g.start && !g.write_vm,
        "the start is retried; the reason goes once it starts"
    );
    assert_eq!(g.event, None);
}

#[test]
fn a_claim_inside_the_reclaim_margin_is_kept() {
    let l = lease("alice", "11:59:45");
    let g = grant_plan(&decide_with(Some(vm()), Some(&l), GrantFacts::default())).clone();
    assert_eq!(g.holder, "alice");
}

#[test]
fn a_hand_edited_holder_of_a_running_member_ends_the_old_session_before_the_new_grant() {
    // The administrator changed only holderIdentity: acquireTime is still alice's.
    let l = lease("bob", "13:00:00");
    let mut old = granted("alice");
    old.current = false;
    let running = VmFacts {
        vmi: Some("vmi-a"),
        ..alices_running()
    };
    // First alice's claim ends as a release would, with a restart whatever onRelease says, and
    // the label and claimed-at follow the Lease at once.
    let d = decide_with(Some(running), Some(&l), old.clone());
    let t = teardown_plan(&d);
    assert!(t.delete_grant && t.cut_console && t.write_vm, "{t:?}");
    assert_eq!(
        t.on_release,
        Some(OnRelease::Restart),
        "alice's streams end with the VMI"
    );
    assert_eq!(t.last_session.as_deref(), Some("vmi-a"));
    assert_eq!(t.event, Some(Reason::HolderChanged));
    assert_eq!(t.holder.as_deref(), Some("alice"));
    let next = t.handover.clone().unwrap();
    assert_eq!((next.holder.as_str(), next.label.as_str()), ("bob", "bob"));
    assert_eq!(
        next.claimed_at, "2026-12-03T12:00:00Z",
        "when the broker saw bob"
    );
    // Then, while alice's VMI still shuts down: bob waits, nothing granted.
    let handed = VmFacts {
        label: Some("bob"),
        granted_to: None,
        claimed_at: Some("2026-12-03T12:00:00Z"),
        last_session: Some("vmi-a"),
        power: "Terminating",
        vmi: Some("vmi-a"),
        ..vm()
    };
    let d = decide_with(Some(handed), Some(&l), GrantFacts::default());
    match &d.plan {
        Plan::AwaitSession(a) => {
            assert!(!a.restart, "shutting down already");
            assert!(
                a.reason
                    .contains("waiting for the last session on dev-1 to end")
            );
        }
        other => panic!("expected a wait, got {other:?}"),
    }
    // A new VMI: bob is granted, his claimed-at kept, the mark of the last session removed.
    let fresh = VmFacts {
        vmi: Some("vmi-b"),
        power: "Running",
        ..handed
    };
    let g = grant_plan(&decide_with(Some(fresh), Some(&l), GrantFacts::default())).clone();
    assert!(g.apply_grant && g.write_vm && g.clear_last_session, "{g:?}");
    assert_eq!(g.claimed_at, "2026-12-03T12:00:00Z");
    assert_eq!((g.previous, g.event), (None, Some(Reason::Claimed)));
    // A stopped member has no session to end: granted at once (it is started for bob).
    let stopped = VmFacts {
        power: "Stopped",
        ..alices_running()
    };
    let g = grant_plan(&decide_with(Some(stopped), Some(&l), old)).clone();
    assert!(g.start && g.apply_grant);
    assert_eq!(g.previous.as_deref(), Some("alice"));
    assert_eq!(g.event, Some(Reason::HolderChanged));
    assert_eq!(g.claimed_at, "2026-12-03T12:00:00Z");
    // An editor who set acquireTime anew: that is bob's time.
    let mut anew = l.clone();
    anew.acquired_at = Some("2026-12-03T11:59:58.5Z".parse().unwrap());
    let g = grant_plan(&decide_with(Some(stopped), Some(&anew), granted("alice"))).clone();
    assert_eq!(g.claimed_at, "2026-12-03T11:59:58Z");
}

#[test]
fn a_released_member_still_running_the_last_session_is_restarted_before_the_next_grant() {
    let l = lease("bob", "13:00:00");
    // alice's claim ended while her VMI ran: the teardown records it.
    let t = teardown_plan(&decide_with(
        Some(VmFacts {
            vmi: Some("vmi-a"),
            ..alices_running()
        }),
        None,
        granted("alice"),
    ))
    .clone();
    assert_eq!(t.last_session.as_deref(), Some("vmi-a"));
    // Kept running since (a warm member): bob's claim restarts it, and waits.
    let kept = VmFacts {
        last_session: Some("vmi-a"),
        vmi: Some("vmi-a"),
        power: "Running",
        ..vm()
    };
    match decide_with(Some(kept), Some(&l), GrantFacts::default()).plan {
        Plan::AwaitSession(a) => assert!(a.restart && a.write_vm, "{a:?}"),
        other => panic!("expected a wait, got {other:?}"),
    }
    // Stopped since (no VMI): bob is granted and it starts for him.
    let stopped = VmFacts {
        last_session: Some("vmi-a"),
        ..vm()
    };
    let g = grant_plan(&decide_with(Some(stopped), Some(&l), GrantFacts::default())).clone();
    assert!(g.start && g.clear_last_session);
}

#[test]
fn a_label_the_holder_wrote_is_adopted() {
    let l = lease("alice", "13:00:00");
    let labelled = VmFacts {
        label: Some("alice"),
        claimed_at: Some("2026-12-03T11:00:01Z"),
        power: "Running",
        ..vm()
    };
    let g = grant_plan(&decide_with(
        Some(labelled),
        Some(&l),
        GrantFacts::default(),
    ))
    .clone();
    assert!(g.apply_grant && g.write_vm && !g.start);
    assert_eq!(g.event, Some(Reason::Claimed));
    assert_eq!(g.claimed_at, "2026-12-03T11:00:00Z");
}

#[test]
fn a_label_naming_someone_else_is_a_conflict_with_no_grant_to_either() {
    let l = lease("alice", "13:00:00");
    let foreign = VmFacts {
        label: Some("bob"),
        power: "Running",
        ..vm()
    };
    let d = decide_with(Some(foreign), Some(&l), GrantFacts::default());
    let c = refusal_plan(&d);
    assert_eq!((c.event, c.holder.as_str()), (Reason::Conflict, "alice"));
    assert!(
        c.reason
            .starts_with("label and Lease disagree: dev-1 is labelled for bob")
    );
    assert!(c.reason.contains("held by alice"), "{}", c.reason);
    assert!(!c.delete_grant && c.write_vm && c.clear_granted_to);
    assert_eq!(d.requeue_at, Some("2026-12-03T13:00:30Z".parse().unwrap()));
    // A grant the broker had made goes; once the reason is written, nothing more.
    let had = VmFacts {
        label: Some("bob"),
        granted_to: Some("alice"),
        ..foreign
    };
    let c = refusal_plan(&decide_with(Some(had), Some(&l), granted("alice"))).clone();
    assert!(c.delete_grant && c.write_vm);
    let written = VmFacts {
        reason: Some(c.reason.as_str()),
        ..foreign
    };
    let c = refusal_plan(&decide_with(Some(written), Some(&l), GrantFacts::default())).clone();
    assert!(!c.delete_grant && !c.write_vm);
}

#[test]
fn the_conflict_reason_names_both_sides_and_both_fixes_never_only_the_eviction() {
    let reason = conflict_reason(M, NS, "alice", "bob");
    for part in [
        "dev-1 is labelled for alice",
        "its Lease corral-vdi-dev-1 is held by bob",
        "to keep it alice's, delete the Lease (`kubectl delete lease corral-vdi-dev-1 -n corral-vms`)",
        "to free the member, `corral-vdi unassign dev-1 -n corral-vms --force`",
    ] {
        assert!(reason.contains(part), "{part:?} not in {reason:?}");
    }
    let keep = reason.find("to keep it").unwrap();
    let free = reason.find("to free the member").unwrap();
    assert!(
        keep < free,
        "the fix that keeps the label's user comes first"
    );
}

#[test]
fn a_released_claim_is_torn_down() {
    let gone = VmFacts {
        label: Some("alice"),
        granted_to: Some("alice"),
        claimed_at: Some("2026-12-03T11:00:00Z"),
        power: "Running",
        ..vm()
    };
    for lease in [None, Some(lease("", "13:00:00"))] {
        let d = decide_with(Some(gone), lease.as_ref(), granted("alice"));
        let t = teardown_plan(&d);
        assert_eq!(t.reclaim, None);
        assert!(
            t.delete_grant
                && t.cut_console
                && t.on_release == Some(OnRelease::Keep)
                && t.clear_label
                && t.write_vm
        );
        assert_eq!(
            (t.holder.as_deref(), t.event),
            (Some("alice"), Some(Reason::Released))
        );
        assert_eq!(d.requeue_at, None);
    }
}

#[test]
fn a_claim_stale_past_the_margin_is_reclaimed_with_its_resource_version() {
    let l = lease("alice", "11:59:29");
    let labelled = VmFacts {
        label: Some("alice"),
        claimed_at: Some("2026-12-03T11:00:00Z"),
        power: "Running",
        ..vm()
    };
    let d = decide_with(Some(labelled), Some(&l), GrantFacts::default());
    let t = teardown_plan(&d);
    assert_eq!(t.reclaim.as_deref(), Some("42"));
    assert!(
        t.on_release == Some(OnRelease::Keep)
            && t.clear_label
            && t.write_vm
            && t.cut_console
            && !t.delete_grant
    );
    assert_eq!(
        (t.holder.as_deref(), t.event),
        (Some("alice"), Some(Reason::Reclaimed))
    );
}

#[test]
fn an_administrators_label_on_a_free_member_is_adopted_as_a_claim_for_its_user() {
    let legacy = VmFacts {
        label: Some("carol"),
        claimed_at: Some("2026-12-03T11:00:00Z"),
        power: "Running",
        ..vm()
    };
    let adopt = |holder: &str| {
        Plan::Adopt(AdoptPlan {
            holder: holder.into(),
        })
    };
    assert_eq!(
        decide_with(Some(legacy), None, GrantFacts::default()).plan,
        adopt("carol")
    );
    // A Lease without a holder is a free member's too.
    let mut released = lease("", "13:00:00");
    released.holder = None;
    assert_eq!(
        decide_with(Some(legacy), Some(&released), GrantFacts::default()).plan,
        adopt("carol")
    );
    // The full identity, from the label's reversible encoding.
    let encoded = encode_identity("carol@example.com");
    let long = VmFacts {
        label: Some(&encoded),
        ..legacy
    };
    assert_eq!(
        decide_with(Some(long), None, GrantFacts::default()).plan,
        adopt("carol@example.com")
    );
    assert_eq!(
        decide_with(Some(vm()), None, GrantFacts::default()).plan,
        Plan::Nothing,
        "a free member"
    );
}

#[test]
fn a_label_that_names_nobody_or_while_claims_are_not_enforced_is_left_alone() {
    let system = encode_identity("system:kube-scheduler");
    for label in ["sha.0123456789abcdef0123456789abcdef", system.as_str()] {
        let legacy = VmFacts {
            label: Some(label),
            ..vm()
        };
        assert_eq!(
            decide_with(Some(legacy), None, GrantFacts::default()).plan,
            Plan::Nothing,
            "{label}"
        );
    }
    let legacy = VmFacts {
        label: Some("carol"),
        ..vm()
    };
    let d = decide(
        M,
        NS,
        &MemberFacts {
            vm: Some(legacy),
            lease: None,
            lease_deleting: None,
            grant: GrantFacts::default(),
            now: now(),
            margin: SignedDuration::from_secs(30),
            policy: None,
            kept_at: None,
            refusing: Some("the guard is not installed"),
            never: None,
            owns_elsewhere: None,
            policy_unreadable: false,
        },
    );
    assert_eq!(d.plan, Plan::Nothing);
}

#[test]
fn a_label_on_someone_elses_dedicated_member_is_refused_naming_both() {
    let owned = VmFacts {
        label: Some("carol"),
        owner: Some("bob"),
        ..vm()
    };
    let d = decide_with(Some(owned), None, GrantFacts::default());
    let r = refusal_plan(&d);
    assert_eq!((r.event, r.holder.as_str()), (Reason::NotGranted, "carol"));
    assert!(!r.delete_grant && !r.clear_granted_to && r.write_vm);
    assert!(
        r.reason.contains("labelled for carol")
            && r.reason.contains("dedicated desktop of bob")
            && r.reason.contains("pool owner dev-1 --user carol"),
        "{}",
        r.reason
    );
    let own = VmFacts {
        owner: Some("carol"),
        ..owned
    };
    assert_eq!(
        decide_with(Some(own), None, GrantFacts::default()).plan,
        Plan::Adopt(AdoptPlan {
            holder: "carol".into()
        })
    );
}

#[test]
fn removing_the_label_the_broker_wrote_releases_the_claim() {
    let unlabelled = VmFacts {
        label: None,
        ..alices_running()
    };
    let l = lease("alice", "13:00:00");
    let d = decide_with(Some(unlabelled), Some(&l), granted("alice"));
    let t = teardown_plan(&d);
    assert_eq!(
        t.reclaim.as_deref(),
        Some("42"),
        "the Lease deleted under its version"
    );
    assert_eq!(t.event, Some(Reason::Released));
    assert!(
        t.why
            .as_deref()
            .is_some_and(|w| w.contains("assigned-to label was removed")),
        "{:?}",
        t.why
    );
    assert!(t.delete_grant && t.cut_console && t.write_vm);
    assert_eq!(
        t.on_release,
        Some(OnRelease::Keep),
        "stopped, as any release"
    );
    // Not granted yet (the broker's own label not written, or a grant bound to someone else):
    // the label is the broker's to write, no release.
    let d = decide_with(Some(unlabelled), Some(&l), GrantFacts::default());
    assert!(grant_plan(&d).write_vm);
}

#[test]
fn a_leftover_reason_goes_when_the_claim_is_gone() {
    let left = VmFacts {
        reason: Some("label and Lease disagree: …"),
        ..vm()
    };
    assert_eq!(
        decide_with(Some(left), None, GrantFacts::default()).plan,
        Plan::ClearReason
    );
}

#[test]
fn a_grant_without_granted_to_is_still_torn_down_and_a_foreign_label_is_kept() {
    let foreign = VmFacts {
        label: Some("carol"),
        ..vm()
    };
    let d = decide_with(Some(foreign), None, granted("alice"));
    let t = teardown_plan(&d);
    assert!(
        t.delete_grant && t.on_release.is_none() && !t.clear_label && !t.write_vm && !t.cut_console
    );
}

#[test]
fn a_grant_whose_member_is_gone_is_deleted() {
    let l = lease("alice", "13:00:00");
    assert_eq!(
        decide_with(None, Some(&l), granted("alice")).plan,
        Plan::DeleteOrphanGrant
    );
    assert_eq!(
        decide_with(None, Some(&l), GrantFacts::default()).plan,
        Plan::Nothing
    );
}

#[test]
fn an_unreadable_claim_is_refused_with_its_bad_field_and_never_reported_released() {
    let mut l = lease("alice", "13:00:00");
    l.problem = Some("renewTime 9999-12-31T23:59:59.000000Z is out of range".into());
    (l.acquired_at, l.expires_at) = (None, None);
    // A new claim: no grant, the reason, one Event.
    let d = decide_with(Some(vm()), Some(&l), GrantFacts::default());
    let r = refusal_plan(&d);
    assert_eq!(r.event, Reason::UnreadableClaim);
    assert_eq!(
        r.reason,
        "claim Lease corral-vdi-dev-1 is unreadable: renewTime 9999-12-31T23:59:59.000000Z is \
         out of range; no access granted: an administrator corrects or deletes it (`kubectl \
         delete lease corral-vdi-dev-1 -n corral-vms`)"
    );
    assert!(r.write_vm && !r.delete_grant);
    // A granted claim edited unreadable: access revoked, never deleted, granted-to kept (the
    // claim is torn down, Released, only once its Lease goes), the VM left running.
    let r = refusal_plan(&decide_with(
        Some(alices_running()),
        Some(&l),
        granted("alice"),
    ))
    .clone();
    assert!(r.delete_grant && r.write_vm && !r.clear_granted_to);
    // Its reason written: nothing more, no second Event.
    let written = VmFacts {
        reason: Some(r.reason.as_str()),
        ..alices_running()
    };
    let r = refusal_plan(&decide_with(Some(written), Some(&l), GrantFacts::default())).clone();
    assert!(!r.delete_grant && !r.write_vm);
}

#[test]
fn a_claim_that_never_expires_or_lies_about_its_time_is_reclaimed_with_the_reason() {
    let ahead: Timestamp = "8999-12-31T23:59:59.999999Z".parse().unwrap();
    let mut missing = lease("bob", "13:00:00");
    (missing.acquired_at, missing.renewed_at, missing.expires_at) = (None, None, None);
    let mut no_duration = lease("bob", "13:00:00");
    (no_duration.duration_seconds, no_duration.expires_at) = (None, None);
    let mut future = lease("bob", "13:00:00");
    (future.acquired_at, future.renewed_at) = (Some(ahead), Some(ahead));
    future.expires_at = ahead.checked_add(SignedDuration::from_hours(168)).ok();
    // Ahead by less than the margin is a clock's skew: kept.
    let mut skewed = lease("bob", "13:00:00");
    skewed.renewed_at = Some("2026-12-03T12:00:29Z".parse().unwrap());
    for (l, why) in [
        (missing, "renewTime missing"),
        (no_duration, "leaseDurationSeconds missing"),
        (
            future,
            "renewTime 8999-12-31T23:59:59.999999Z is ahead of the API server's clock",
        ),
    ] {
        let d = decide_with(Some(vm()), Some(&l), GrantFacts::default());
        let t = teardown_plan(&d);
        assert_eq!(t.reclaim.as_deref(), Some("42"), "{why}");
        assert_eq!(t.why.as_deref(), Some(why));
        assert_eq!(
            (t.holder.as_deref(), t.event),
            (Some("bob"), Some(Reason::Reclaimed))
        );
        assert!(t.on_release == Some(OnRelease::Keep), "{why}: its VM stops");
    }
    grant_plan(&decide_with(
        Some(vm()),
        Some(&skewed),
        GrantFacts::default(),
    ));
}

#[test]
fn a_lease_stuck_deleting_is_released_once_and_named_never_deleted_again() {
    let l = lease("alice", "11:00:00");
    let finalizers = ["hostile.example/keep".to_owned()];
    let reason = deleting_reason(M, NS, &finalizers);
    assert_eq!(
        reason,
        "claim Lease corral-vdi-dev-1 is stuck deleting with finalizers [hostile.example/keep]: \
         an administrator removes them (`kubectl patch lease corral-vdi-dev-1 -n corral-vms \
         --type merge -p '{\"metadata\":{\"finalizers\":null}}'`)"
    );
    // With the broker's traces (stale past the margin and held: never reclaimed again).
    let d = decide_deleting(
        Some(alices_running()),
        Some(&l),
        Some(&finalizers),
        granted("alice"),
    );
    let t = teardown_plan(&d);
    assert_eq!(
        (t.reclaim.as_deref(), t.event),
        (None, Some(Reason::Released))
    );
    assert!(
        t.delete_grant
            && t.on_release == Some(OnRelease::Keep)
            && t.clear_label
            && t.cut_console
            && t.write_vm
    );
    assert_eq!(t.reason.as_deref(), Some(reason.as_str()));
    // Torn down: only the reason is written, without an Event; once written, nothing.
    let free = VmFacts {
        power: "Stopped",
        ..vm()
    };
    let d = decide_deleting(
        Some(free),
        Some(&l),
        Some(&finalizers),
        GrantFacts::default(),
    );
    let t = teardown_plan(&d);
    assert!(t.write_vm && t.event.is_none() && t.reclaim.is_none() && t.on_release.is_none());
    let named = VmFacts {
        reason: Some(reason.as_str()),
        ..free
    };
    let d = decide_deleting(
        Some(named),
        Some(&l),
        Some(&finalizers),
        GrantFacts::default(),
    );
    assert_eq!(d.plan, Plan::Nothing);
    // The finalizers removed and the Lease gone: the reason goes.
    assert_eq!(
        decide_with(Some(named), None, GrantFacts::default()).plan,
        Plan::ClearReason
    );
}

#[test]
fn an_identity_is_shown_capped() {
    let long = "x".repeat(5000);
    let capped = shown(&long);
    assert_eq!(capped.chars().count(), IDENTITY_SHOWN + 1);
    assert!(capped.ends_with('…'));
    assert_eq!(shown("alice"), "alice");
    let reason = conflict_reason(M, NS, "alice", &long);
    assert!(reason.len() < 1000, "{} characters", reason.len());
}

#[test]
fn no_claim_is_granted_while_the_claim_rules_are_not_enforced_and_the_grant_is_revoked() {
    let l = lease("bob", "13:00:00");
    let why = "the cluster does not enforce the claim rules";
    for (vm, grant) in [
        (vm(), GrantFacts::default()),
        (
            VmFacts {
                label: Some("bob"),
                granted_to: Some("bob"),
                claimed_at: Some("2026-12-03T11:00:00Z"),
                power: "Running",
                ..vm()
            },
            granted("bob"),
        ),
    ] {
        let d = decide(
            M,
            NS,
            &MemberFacts {
                vm: Some(vm),
                lease: Some(&l),
                lease_deleting: None,
                grant: grant.clone(),
                now: now(),
                margin: SignedDuration::from_secs(30),
                policy: None,
                kept_at: None,
                refusing: Some(why),
                never: None,
                owns_elsewhere: None,
                policy_unreadable: false,
            },
        );
        let r = refusal_plan(&d);
        assert_eq!((r.event, r.reason.as_str()), (Reason::NotGranted, why));
        assert_eq!(r.delete_grant, grant.exists, "{r:?}");
    }
}

#[test]
fn kubernetes_own_identities_are_never_granted_but_service_accounts_are() {
    for holder in [
        "system:anonymous",
        "system:kube-controller-manager",
        "system:node:n1",
    ] {
        let l = lease(holder, "13:00:00");
        let d = decide_with(Some(vm()), Some(&l), GrantFacts::default());
        let r = refusal_plan(&d);
        assert_eq!(r.event, Reason::NotGranted);
        assert!(r.reason.contains(holder), "{r:?}");
    }
    let l = lease("system:serviceaccount:corral-vms:kiosk", "13:00:00");
    let d = decide_with(Some(vm()), Some(&l), GrantFacts::default());
    assert!(grant_plan(&d).apply_grant);
}

/// [`decide_with`] on alice's active claim of a stopped member, with `never` and
/// `owns_elsewhere` as given and the member owned by `owner`.
fn decide_unfit(owner: Option<&str>, never: Option<&str>, elsewhere: Option<&str>) -> Decision {
    let l = lease("alice", "13:00:00");
    let member = VmFacts { owner, ..vm() };
    decide(
        M,
        NS,
        &MemberFacts {
            vm: Some(member),
            lease: Some(&l),
            lease_deleting: None,
            grant: GrantFacts::default(),
            now: now(),
            margin: SignedDuration::from_secs(30),
            policy: None,
            kept_at: None,
            refusing: None,
            never,
            owns_elsewhere: elsewhere,
            policy_unreadable: false,
        },
    )
}

#[test]
fn a_claim_that_can_never_be_granted_is_released_at_once() {
    // Another pool's Lease, or someone else's dedicated desktop: the Lease deleted under its
    // resourceVersion, so that renewing it blocks nobody; the power left alone (never granted).
    for (d, why) in [
        (
            decide_unfit(
                None,
                Some("the claim Lease of dev-1 says pool \"open\""),
                None,
            ),
            "says pool \"open\"",
        ),
        (
            decide_unfit(Some("bob"), None, None),
            "dedicated desktop of bob",
        ),
    ] {
        let t = teardown_plan(&d);
        assert_eq!(t.reclaim.as_deref(), Some("42"));
        assert_eq!(t.event, Some(Reason::Reclaimed));
        assert!(
            t.why.as_deref().is_some_and(|w| w.contains(why)),
            "{:?}",
            t.why
        );
        assert_eq!(
            t.on_release, None,
            "never granted: its power is not the claim's"
        );
        assert!(!t.delete_grant);
    }
    // Her own desktop: granted.
    assert!(grant_plan(&decide_unfit(Some("alice"), None, None)).apply_grant);
}

#[test]
fn a_second_desktop_is_never_made_the_same_users() {
    let d = decide_unfit(None, None, Some("dev-2"));
    let t = teardown_plan(&d);
    assert!(t.unfit && t.reclaim.is_some());
    let why = t.why.clone().unwrap_or_default();
    assert!(
        why.contains("alice owns dev-2") && why.contains("unassign dev-1"),
        "{why}"
    );
}

#[test]
fn a_granted_session_is_refused_not_torn_down_when_ownership_changes() {
    // alice was granted dev-1 (floating then); it is bob's now: refused, her Lease kept.
    let l = lease("alice", "13:00:00");
    let moved = VmFacts {
        owner: Some("bob"),
        ..alices_running()
    };
    let d = decide_with(Some(moved), Some(&l), granted("alice"));
    let r = refusal_plan(&d);
    assert!(
        r.delete_grant && r.reason.contains("dedicated desktop of bob"),
        "{r:?}"
    );
}
