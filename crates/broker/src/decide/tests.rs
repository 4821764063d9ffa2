//! One test per rule of [`super::decide`]: state in, plan out.

use super::*;

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
    }
}

fn vm() -> VmFacts<'static> {
    VmFacts {
        power: "Stopped",
        ..VmFacts::default()
    }
}

fn decide_with(vm: Option<VmFacts<'_>>, lease: Option<&LeaseView>, grant: GrantFacts) -> Decision {
    decide(
        M,
        NS,
        &MemberFacts {
            vm,
            lease,
            grant,
            now: now(),
            margin: SignedDuration::from_secs(30),
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
fn the_label_follows_a_hand_edited_holder_and_the_old_holder_is_revoked() {
    let l = lease("bob", "13:00:00");
    let alices = VmFacts {
        label: Some("alice"),
        granted_to: Some("alice"),
        claimed_at: Some("2026-12-03T10:00:00Z"),
        power: "Running",
        ..vm()
    };
    let mut old = granted("alice");
    old.current = false;
    let d = decide_with(Some(alices), Some(&l), old);
    let g = grant_plan(&d);
    assert_eq!((g.holder.as_str(), g.label.as_str()), ("bob", "bob"));
    assert!(g.apply_grant && g.write_vm && !g.start);
    assert_eq!(g.previous.as_deref(), Some("alice"));
    assert_eq!(g.event, Some(Reason::HolderChanged));
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
    let Plan::Conflict(c) = &d.plan else {
        panic!("{d:?}")
    };
    assert!(
        c.reason
            .starts_with("label and Lease disagree: dev-1 is labelled for bob")
    );
    assert!(c.reason.contains("held by alice"), "{}", c.reason);
    assert!(
        c.reason
            .contains("`corral-vdi unassign dev-1 -n corral-vms --force`")
    );
    assert!(!c.delete_grant && c.write_vm);
    assert_eq!(d.requeue_at, Some("2026-12-03T13:00:30Z".parse().unwrap()));
    // A grant the broker had made goes; once the reason is written, nothing more.
    let had = VmFacts {
        label: Some("bob"),
        granted_to: Some("alice"),
        ..foreign
    };
    let Plan::Conflict(c) = decide_with(Some(had), Some(&l), granted("alice")).plan else {
        panic!()
    };
    assert!(c.delete_grant && c.write_vm);
    let written = VmFacts {
        reason: Some(c.reason.as_str()),
        ..foreign
    };
    let Plan::Conflict(c) = decide_with(Some(written), Some(&l), GrantFacts::default()).plan else {
        panic!()
    };
    assert!(!c.delete_grant && !c.write_vm);
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
        assert!(t.delete_grant && t.cut_console && t.stop && t.clear_label && t.write_vm);
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
    assert!(t.stop && t.clear_label && t.write_vm && t.cut_console && !t.delete_grant);
    assert_eq!(
        (t.holder.as_deref(), t.event),
        (Some("alice"), Some(Reason::Reclaimed))
    );
}

#[test]
fn a_label_only_member_is_left_alone() {
    let legacy = VmFacts {
        label: Some("carol"),
        claimed_at: Some("2026-12-03T11:00:00Z"),
        power: "Running",
        ..vm()
    };
    assert_eq!(
        decide_with(Some(legacy), None, GrantFacts::default()).plan,
        Plan::Nothing
    );
    assert_eq!(
        decide_with(Some(vm()), None, GrantFacts::default()).plan,
        Plan::Nothing,
        "a free member"
    );
}

#[test]
fn a_leftover_reason_goes_when_the_claim_is_gone() {
    let left = VmFacts {
        label: Some("carol"),
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
    assert!(t.delete_grant && !t.stop && !t.clear_label && !t.write_vm && !t.cut_console);
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
fn an_unreadable_lease_grants_nothing() {
    let mut l = lease("alice", "13:00:00");
    l.problem = Some("renewTime 9999-12-31T23:59:59.000000Z is out of range".into());
    l.expires_at = None;
    let had = VmFacts {
        label: Some("alice"),
        granted_to: Some("alice"),
        power: "Running",
        ..vm()
    };
    let t = teardown_plan(&decide_with(Some(had), Some(&l), granted("alice"))).clone();
    assert_eq!(t.reclaim, None, "an unreadable Lease is never deleted");
    assert!(t.delete_grant && t.stop);
}
