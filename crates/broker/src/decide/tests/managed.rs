//! Managed pools' rules and the broker's own Leases: state in, plan out.

use vdi_core::policy::{DesktopPoolSpec, Policy};

use super::*;

/// A pool's policy: `maxSession`, `idleTimeout` as texts, `onRelease`.
fn policy(max_session: Option<&str>, idle: Option<&str>, on_release: OnRelease) -> Policy {
    DesktopPoolSpec {
        golden: "golden".into(),
        size: 2,
        max_session: max_session.map(Into::into),
        idle_timeout: idle.map(Into::into),
        on_release: Some(on_release),
        // Longer than any Lease here: a_lease_longer_than_disconnect_grace_… tests the cap.
        disconnect_grace: Some("168h".into()),
        ..Default::default()
    }
    .policy()
    .unwrap()
}

fn decide_managed(
    vm: VmFacts<'_>,
    lease: Option<&LeaseView>,
    grant: GrantFacts,
    policy: &Policy,
    kept_at: Option<&str>,
) -> Decision {
    decide(
        M,
        NS,
        &MemberFacts {
            vm: Some(vm),
            lease,
            lease_deleting: None,
            grant,
            now: now(),
            margin: SignedDuration::from_secs(30),
            policy: Some(policy),
            kept_at: kept_at.map(|k| k.parse().unwrap()),
            refusing: None,
            never: None,
            owns_elsewhere: None,
            policy_unreadable: false,
        },
    )
}

fn t(s: &str) -> Timestamp {
    format!("2026-12-03T{s}Z").parse().unwrap()
}

#[test]
fn the_brokers_own_lease_is_no_claim_even_stale_and_only_a_left_grant_is_revoked() {
    let stale = lease(BROKER_USER, "11:30:00");
    for l in [lease(BROKER_USER, "13:00:00"), stale] {
        let d = decide_with(Some(alices_running()), Some(&l), GrantFacts::default());
        assert_eq!(d.plan, Plan::Nothing, "no grant, no reclaim, no stop");
        assert_eq!((d.requeue_at, d.idle_poll), (None, false));
        let d = decide_with(Some(alices_running()), Some(&l), granted("alice"));
        let t = teardown_plan(&d);
        assert!(t.delete_grant && t.reclaim.is_none() && t.on_release.is_none());
        assert!(!t.write_vm && !t.clear_label && t.event.is_none(), "{t:?}");
    }
}

#[test]
fn a_member_being_removed_is_left_to_the_pool_loop() {
    let removing = VmFacts {
        removing: Some("reset"),
        ..alices_running()
    };
    let l = lease("alice", "13:00:00");
    let p = policy(Some("10m"), None, OnRelease::Reset);
    let d = decide_managed(removing, Some(&l), GrantFacts::default(), &p, None);
    assert_eq!(d.plan, Plan::Nothing);
    let d = decide_with(Some(removing), None, GrantFacts::default());
    assert_eq!(d.plan, Plan::Nothing);
}

#[test]
fn max_session_is_announced_once_within_its_notice_then_reclaimed_with_its_word() {
    // Acquired at 11:00:00.123, now 12:00: a maxSession of 1h3m ends at 12:03:00.123.
    let l = lease("alice", "13:00:00");
    let p = policy(Some("1h3m"), None, OnRelease::Keep);
    let d = decide_managed(alices_running(), Some(&l), granted("alice"), &p, None);
    let g = grant_plan(&d);
    let soon = g.announce.expect("within five minutes: announced");
    assert_eq!((soon.why, soon.keepable), (ReclaimWhy::MaxSession, false));
    assert_eq!(g.notice.as_deref(), Some("maxSession 2026-12-03T12:03:00Z"));
    assert!(g.write_vm && !g.apply_grant && !g.start);
    assert_eq!(
        d.requeue_at,
        Some(soon.at),
        "looked at again at the reclaim"
    );
    // The notice written: nothing more until the reclaim.
    let noticed = VmFacts {
        notice: g.notice.as_deref(),
        ..alices_running()
    };
    let g = grant_plan(&decide_managed(
        noticed,
        Some(&l),
        granted("alice"),
        &p,
        None,
    ))
    .clone();
    assert_eq!((g.announce, g.write_vm), (None, false));
    // Keep cannot move it; once passed it is reclaimed, the Lease deleted under its version.
    let p = policy(Some("59m"), None, OnRelease::Keep);
    let d = decide_managed(
        noticed,
        Some(&l),
        granted("alice"),
        &p,
        Some("2026-12-03T11:59:00Z"),
    );
    let t = teardown_plan(&d);
    assert_eq!(t.reclaim.as_deref(), Some("42"));
    assert_eq!(t.reclaim_why, Some(ReclaimWhy::MaxSession));
    assert!(
        t.why.as_deref().unwrap().starts_with("maxSession 59m"),
        "{t:?}"
    );
    assert_eq!(t.event, Some(Reason::Reclaimed));
    assert!(t.on_release == Some(OnRelease::Keep) && t.delete_grant && t.write_vm);
}

#[test]
fn before_its_notice_a_claim_is_looked_at_again_at_the_notice_time() {
    let l = lease("alice", "13:00:00");
    let p = policy(Some("3h"), None, OnRelease::Keep);
    let d = decide_managed(alices_running(), Some(&l), granted("alice"), &p, None);
    let g = grant_plan(&d);
    assert_eq!((g.announce, g.notice.as_deref()), (None, None));
    assert!(!g.write_vm);
    // The disconnect (13:00:00 + 30 s margin) comes first: its notice five minutes before.
    assert_eq!(d.requeue_at, Some(t("12:55:30")));
}

#[test]
fn a_disconnect_is_the_expiry_plus_the_margin_and_says_so() {
    let p = policy(None, None, OnRelease::Restart);
    let inside = lease("alice", "11:59:40");
    let d = decide_managed(alices_running(), Some(&inside), granted("alice"), &p, None);
    let g = grant_plan(&d);
    assert_eq!(
        g.announce.map(|a| (a.why, a.at)),
        Some((ReclaimWhy::Disconnected, t("12:00:10")))
    );
    let stale = lease("alice", "11:59:29");
    let d = decide_managed(alices_running(), Some(&stale), granted("alice"), &p, None);
    let t = teardown_plan(&d);
    assert_eq!(t.reclaim_why, Some(ReclaimWhy::Disconnected));
    assert!(
        t.why.as_deref().unwrap().starts_with("disconnected"),
        "{t:?}"
    );
    assert_eq!(t.on_release, Some(OnRelease::Restart));
}

#[test]
fn idle_counts_from_the_reading_or_a_later_keep_never_before_the_claim() {
    let l = lease("alice", "13:00:00");
    let p = policy(None, Some("30m"), OnRelease::Reset);
    let idle = VmFacts {
        idle_since: Some("2026-12-03T11:20:00Z"),
        ..alices_running()
    };
    let d = decide_managed(idle, Some(&l), granted("alice"), &p, None);
    let plan = teardown_plan(&d);
    assert_eq!(plan.reclaim_why, Some(ReclaimWhy::Idle));
    assert_eq!(plan.on_release, Some(OnRelease::Reset));
    // A Keep at 11:40 moves it to 12:10: still the holder's (noticed from 12:05).
    let d = decide_managed(
        idle,
        Some(&l),
        granted("alice"),
        &p,
        Some("2026-12-03T11:40:00Z"),
    );
    assert!(grant_plan(&d).announce.is_none());
    assert_eq!(d.requeue_at, Some(t("12:05:00")));
    assert!(
        d.idle_poll,
        "a granted, running member of a pool with idleTimeout"
    );
    // A reading older than the claim (11:00) counts from its acquireTime: due 11:30:00.123.
    let old = VmFacts {
        idle_since: Some("2026-12-03T09:00:00Z"),
        ..alices_running()
    };
    let p = policy(None, Some("61m"), OnRelease::Keep);
    let d = decide_managed(old, Some(&l), granted("alice"), &p, None);
    assert_eq!(
        grant_plan(&d).announce.map(|a| a.why),
        Some(ReclaimWhy::Idle),
        "due 12:01:00.123, not 10:01"
    );
}

#[test]
fn only_a_granted_running_member_of_a_pool_with_idle_timeout_is_asked() {
    let l = lease("alice", "13:00:00");
    let idle = policy(None, Some("30m"), OnRelease::Keep);
    let stopped = VmFacts {
        power: "Stopped",
        ..alices_running()
    };
    assert!(!decide_managed(stopped, Some(&l), granted("alice"), &idle, None).idle_poll);
    let no_idle = policy(Some("8h"), None, OnRelease::Keep);
    assert!(
        !decide_managed(alices_running(), Some(&l), granted("alice"), &no_idle, None).idle_poll
    );
    assert!(!decide_with(Some(alices_running()), Some(&l), granted("alice")).idle_poll);
    let conflict = VmFacts {
        label: Some("bob"),
        granted_to: None,
        ..alices_running()
    };
    assert!(!decide_managed(conflict, Some(&l), GrantFacts::default(), &idle, None).idle_poll);
}

#[test]
fn a_release_applies_on_release_and_clears_the_idle_and_notice_marks() {
    let marked = VmFacts {
        idle_since: Some("2026-12-03T11:20:00Z"),
        notice: Some("idle 2026-12-03T11:50:00Z"),
        ..alices_running()
    };
    for on_release in [OnRelease::Keep, OnRelease::Restart, OnRelease::Reset] {
        let p = policy(None, Some("30m"), on_release);
        let d = decide_managed(marked, None, granted("alice"), &p, None);
        let t = teardown_plan(&d);
        assert_eq!(t.on_release, Some(on_release));
        assert!(t.clear_label && t.write_vm && t.event == Some(Reason::Released));
        assert_eq!(t.reclaim_why, None);
    }
    // Only the marks left (no traces): removed, no Event.
    let leftover = VmFacts {
        label: None,
        granted_to: None,
        claimed_at: None,
        ..marked
    };
    let p = policy(None, Some("30m"), OnRelease::Reset);
    let d = decide_managed(leftover, None, GrantFacts::default(), &p, None);
    assert_eq!(d.plan, Plan::ClearReason);
}

#[test]
fn a_reset_waits_for_no_lease_being_deleted_it_stops_instead() {
    let l = lease("alice", "13:00:00");
    let p = policy(None, None, OnRelease::Reset);
    let finalizers = ["example.com/keep".to_owned()];
    let d = decide(
        M,
        NS,
        &MemberFacts {
            vm: Some(alices_running()),
            lease: Some(&l),
            lease_deleting: Some(&finalizers),
            grant: granted("alice"),
            now: now(),
            margin: SignedDuration::from_secs(30),
            policy: Some(&p),
            kept_at: None,
            refusing: None,
            never: None,
            owns_elsewhere: None,
            policy_unreadable: false,
        },
    );
    assert_eq!(teardown_plan(&d).on_release, Some(OnRelease::Keep));
}

#[test]
fn an_unmanaged_pool_keeps_the_seeds_rules() {
    let l = lease("alice", "12:01:00");
    let d = decide_with(Some(alices_running()), Some(&l), granted("alice"));
    let g = grant_plan(&d);
    assert_eq!((g.announce, g.notice.as_deref()), (None, None));
    assert_eq!(d.requeue_at, Some(t("12:01:30")));
    let stale = lease("alice", "11:00:00");
    let d = decide_with(Some(alices_running()), Some(&stale), granted("alice"));
    let t = teardown_plan(&d);
    assert_eq!((t.why.as_deref(), t.reclaim_why), (None, None));
    assert_eq!(t.on_release, Some(OnRelease::Keep));
}

#[test]
fn an_acquire_time_rewritten_into_the_future_neither_moves_the_record_nor_stretches_max_session() {
    // alice was granted at 11:00 (claimed-at, the broker's record); she then rewrote her
    // Lease's acquireTime to the year 8999.
    let hoarded = LeaseView {
        acquired_at: Some("8999-01-01T00:00:00Z".parse().unwrap()),
        renewed_at: Some(t("11:59:00")),
        ..lease("alice", "12:59:00")
    };
    let p = policy(Some("59m"), None, OnRelease::Keep);
    let d = decide_managed(alices_running(), Some(&hoarded), granted("alice"), &p, None);
    let t = teardown_plan(&d);
    assert_eq!(t.reclaim_why, Some(ReclaimWhy::MaxSession), "{t:?}");
    assert!(
        t.why
            .as_deref()
            .unwrap()
            .contains("since its start 2026-12-03T11:00:00Z"),
        "{t:?}"
    );
    // Within maxSession, the record stays as written: nothing to write.
    let p = policy(Some("2h"), None, OnRelease::Keep);
    let d = decide_managed(alices_running(), Some(&hoarded), granted("alice"), &p, None);
    let g = grant_plan(&d);
    assert_eq!(g.claimed_at, "2026-12-03T11:00:00Z");
    assert!(!g.write_vm, "{g:?}");
    // A claim new to the broker with a start ahead of the clock is recorded at now.
    let d = decide_managed(vm(), Some(&hoarded), GrantFacts::default(), &p, None);
    assert_eq!(grant_plan(&d).claimed_at, "2026-12-03T12:00:00Z");
}

#[test]
fn a_lease_longer_than_disconnect_grace_counts_as_disconnect_grace() {
    // disconnectGrace 10m; alice renewed at 11:40 with a week's leaseDurationSeconds.
    let p = DesktopPoolSpec {
        golden: "golden".into(),
        size: 1,
        disconnect_grace: Some("10m".into()),
        ..Default::default()
    }
    .policy()
    .unwrap();
    let week = LeaseView {
        renewed_at: Some(t("11:40:00")),
        duration_seconds: Some(604_800),
        ..lease("alice", "12:59:00")
    };
    let d = decide_managed(alices_running(), Some(&week), granted("alice"), &p, None);
    let t = teardown_plan(&d);
    assert_eq!(t.reclaim_why, Some(ReclaimWhy::Disconnected), "{t:?}");
    assert!(
        t.why
            .as_deref()
            .unwrap()
            .ends_with("expired at 2026-12-03T11:50:00Z"),
        "the expiry acted on, not the Lease's week: {t:?}"
    );
}

#[test]
fn a_keep_time_in_the_future_is_no_keep() {
    // Idle since 11:10 with idleTimeout 30m: due at 11:40; a Keep written for next year is not
    // believed, one written at 11:50 is.
    let idle = VmFacts {
        idle_since: Some("2026-12-03T11:10:00Z"),
        ..alices_running()
    };
    let l = lease("alice", "13:00:00");
    let p = policy(None, Some("30m"), OnRelease::Keep);
    let d = decide_managed(
        idle,
        Some(&l),
        granted("alice"),
        &p,
        Some("2027-12-03T11:50:00Z"),
    );
    assert_eq!(teardown_plan(&d).reclaim_why, Some(ReclaimWhy::Idle));
    let d = decide_managed(
        idle,
        Some(&l),
        granted("alice"),
        &p,
        Some("2026-12-03T11:50:00Z"),
    );
    grant_plan(&d);
}
