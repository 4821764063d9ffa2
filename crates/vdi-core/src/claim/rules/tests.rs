//! The rules of claiming and releasing, branch by branch, on members built by hand in every
//! state (SPEC "Member state").

use super::*;
use crate::lease::LeaseView;

fn now() -> Timestamp {
    "2026-12-01T12:00:00Z".parse().unwrap()
}

pub(in crate::claim) fn lease(holder: Option<&str>, active: bool) -> LeaseView {
    LeaseView {
        holder: holder.map(str::to_owned),
        acquired_at: Some(now()),
        renewed_at: Some(now()),
        duration_seconds: Some(3600),
        expires_at: Some(if active {
            now() + SignedDuration::from_hours(1)
        } else {
            now() - SignedDuration::from_hours(1)
        }),
        active,
        renew_time_in_future: false,
        transitions: 0,
        resource_version: Some("7".into()),
        problem: None,
        assigned_by: None,
    }
}

pub(in crate::claim) fn unreadable(holder: &str) -> LeaseView {
    LeaseView {
        acquired_at: None,
        renewed_at: None,
        expires_at: None,
        active: false,
        problem: Some("renewTime 9999-12-31T23:59:59Z is out of range".into()),
        ..lease(Some(holder), false)
    }
}

/// A member in `state`, with `lease`, labelled for `label` (decoded).
pub(in crate::claim) fn member(
    name: &str,
    state: MemberState,
    lease: Option<LeaseView>,
    label: Option<&str>,
) -> MemberView {
    let holder = lease
        .as_ref()
        .and_then(|l| l.holder.clone())
        .or_else(|| label.map(str::to_owned));
    MemberView {
        name: name.into(),
        namespace: "ns".into(),
        state,
        state_label: state.label().into(),
        claimable: state.claimable(),
        holder,
        label_holder: label.map(str::to_owned),
        claimed_at: None,
        broker_reason: None,
        lease,
        power: "Stopped".into(),
        reclaim_at: None,
        reclaim_why: None,
        notice: false,
        keepable: false,
        on_release: crate::policy::release::ReleaseEffect::Stop { warm: false }.into(),
        state_note: None,
        offers: None,
        owner: None,
    }
}

pub(in crate::claim) fn free(name: &str) -> MemberView {
    member(name, MemberState::Free, None, None)
}

/// Every state, for members named after it.
fn every_state(holder: &str) -> Vec<MemberView> {
    vec![
        free("free"),
        member(
            "stale",
            MemberState::FreeStaleLease,
            Some(lease(Some(holder), false)),
            None,
        ),
        member(
            "claiming",
            MemberState::Claiming,
            Some(lease(Some(holder), true)),
            None,
        ),
        member("legacy", MemberState::AssignedLegacy, None, Some(holder)),
        member(
            "assigned",
            MemberState::Assigned,
            Some(lease(Some(holder), true)),
            Some(holder),
        ),
        member(
            "expired",
            MemberState::AssignedLeaseExpired,
            Some(lease(Some(holder), false)),
            Some(holder),
        ),
        member(
            "conflict",
            MemberState::Conflict,
            Some(lease(Some(holder), true)),
            Some("mallory"),
        ),
        member(
            "unreadable",
            MemberState::Unreadable,
            Some(unreadable(holder)),
            None,
        ),
    ]
}

fn claim<'a>(assignee: &'a str) -> Claim<'a> {
    Claim {
        namespace: "ns",
        pool: "dev",
        assignee,
        forced: false,
    }
}

#[test]
fn bad_input_is_refused_before_any_request() {
    let options = ClaimOptions::default();
    assert_eq!(check_assign("ns", "dev", "alice", &options).unwrap(), 3600);
    for (namespace, pool, user, seconds) in [
        ("Not_A_Namespace", "dev", "alice", 3600),
        ("ns", "Dev Pool", "alice", 3600),
        ("ns", "dev", "", 3600),
        ("ns", "dev", "alice", 0),
        ("ns", "dev", "alice", 8 * 24 * 3600),
    ] {
        let options = ClaimOptions {
            lease_seconds: seconds,
            ..options
        };
        let err = check_assign(namespace, pool, user, &options).unwrap_err();
        assert!(
            matches!(err, Error::Invalid { .. }),
            "{namespace} {pool} {user} {seconds}: {err:?}"
        );
    }
    for timeout in [
        std::time::Duration::ZERO,
        std::time::Duration::from_secs(25 * 3600),
    ] {
        let options = ClaimOptions { timeout, ..options };
        let err = check_assign("ns", "dev", "alice", &options).unwrap_err();
        assert!(
            err.to_string().contains("a wait for the broker's grant of"),
            "{timeout:?}: {err}"
        );
    }
    check_unassign("ns", "dev-1").unwrap();
    assert!(matches!(
        check_unassign("ns", "Dev 1"),
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        check_unassign("", "dev-1"),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn only_free_members_and_stale_leases_are_candidates() {
    let members = every_state("bob");
    let mut names: Vec<&str> = candidates(&members, "alice")
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["free", "stale"]);
}

#[test]
fn each_identity_tries_the_members_in_its_own_fixed_order() {
    let members: Vec<MemberView> = (1..=10).map(|i| free(&format!("dev-{i}"))).collect();
    let order = |who: &str| -> Vec<String> {
        candidates(&members, who)
            .iter()
            .map(|m| m.name.clone())
            .collect()
    };
    // Deterministic: a retry tries the same order.
    assert_eq!(order("alice"), order("alice"));
    // A permutation: every member, once.
    let mut all = order("alice");
    all.sort();
    let mut expected: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    expected.sort();
    assert_eq!(all, expected);
    // Spread: twenty claimants do not all start with the same member.
    let firsts: std::collections::BTreeSet<String> = (0..20)
        .map(|i| order(&format!("user-{i}"))[0].clone())
        .collect();
    assert!(firsts.len() > 3, "{firsts:?}");
}

#[test]
fn running_members_are_tried_first_each_group_in_the_identitys_order() {
    let mut members: Vec<MemberView> = (1..=6).map(|i| free(&format!("dev-{i}"))).collect();
    for m in &mut members {
        m.power = "Stopped".into();
    }
    let stopped = |who: &str| -> Vec<String> {
        candidates(&members, who)
            .iter()
            .map(|m| m.name.clone())
            .collect()
    };
    let before = stopped("alice");
    members[1].power = "Running".into();
    members[4].power = "Stopping".into();
    let order: Vec<String> = candidates(&members, "alice")
        .iter()
        .map(|m| m.name.clone())
        .collect();
    assert_eq!(order[0], "dev-2", "the running one first: {order:?}");
    let rest: Vec<&String> = before.iter().filter(|n| *n != "dev-2").collect();
    assert_eq!(
        order[1..].iter().collect::<Vec<_>>(),
        rest,
        "then the same order"
    );
}

#[test]
fn a_new_lease_is_created_and_a_stale_one_is_taken_over_with_its_resource_version() {
    let made = claim("alice").lease("dev-2", now(), 600, None, "alice");
    assert_eq!(
        made.metadata.annotations, None,
        "her own claim names no assigner"
    );
    assert_eq!(made.metadata.name.as_deref(), Some("corral-vdi-dev-2"));
    assert_eq!(made.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(made.metadata.resource_version, None);
    let labels = made.metadata.labels.unwrap();
    assert_eq!(labels[POOL_LABEL], "dev");
    assert_eq!(labels[MEMBER_LABEL], "dev-2");
    let spec = made.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("alice"));
    assert_eq!(spec.acquire_time, Some(MicroTime(now())));
    assert_eq!(spec.renew_time, Some(MicroTime(now())));
    assert_eq!(spec.lease_duration_seconds, Some(600));
    assert_eq!(spec.lease_transitions, Some(0));

    let old = ClaimLease::from(Lease {
        metadata: ObjectMeta {
            name: Some(lease_name("dev-2")),
            resource_version: Some("41".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("bob".into()),
            lease_transitions: Some(3),
            ..Default::default()
        }),
    });
    let taken = claim("alice").lease("dev-2", now(), 600, Some(&old), "admin");
    assert_eq!(taken.metadata.resource_version.as_deref(), Some("41"));
    assert_eq!(
        taken.metadata.annotations.unwrap()[ASSIGNED_BY_ANNOTATION],
        "admin",
        "an administrator's assignment names them"
    );
    let spec = taken.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("alice"));
    assert_eq!(spec.lease_transitions, Some(4));
}

#[test]
fn a_lease_ends_after_its_duration_or_at_the_end_of_the_calendar() {
    assert_eq!(
        lease_end(now(), 3600),
        now() + SignedDuration::from_hours(1)
    );
    assert_eq!(
        lease_end(Timestamp::MAX - SignedDuration::from_secs(10), 3600),
        Timestamp::MAX
    );
}

#[test]
fn with_the_guard_only_administrators_assign_to_others_or_to_identities_it_cannot_check() {
    assert!(!guard_may_refuse(false, "alice", "alice"));
    assert!(guard_may_refuse(false, "alice", "bob"));
    assert!(!guard_may_refuse(true, "admin", "bob"));
    let unguardable = "Ünïcode Person";
    assert!(!guard_can_check(unguardable));
    assert!(guard_may_refuse(false, unguardable, unguardable));
    assert!(!guard_may_refuse(true, unguardable, unguardable));

    let for_bob = guard_refusal("alice", &claim("bob"));
    assert_eq!(for_bob.kind(), ErrorKind::Forbidden);
    assert!(
        for_bob
            .to_string()
            .starts_with("alice may not assign desktops to bob: "),
        "{for_bob}"
    );
    assert!(
        for_bob
            .suggestion()
            .unwrap()
            .contains("`corral-vdi assign dev bob -n ns`"),
        "{for_bob:?}"
    );
    let own = guard_refusal(unguardable, &claim(unguardable));
    assert_eq!(own.kind(), ErrorKind::Forbidden);
    assert!(
        own.to_string().contains(&format!(
            "cannot check a label for the identity \"{unguardable}\""
        )),
        "{own}"
    );
}

#[test]
fn a_claim_resumes_the_member_whose_active_lease_the_assignee_holds() {
    let members = every_state("bob");
    // Bob holds "claiming" (active Lease, no label) first in member order.
    assert_eq!(held_by(&members, "bob").unwrap().unwrap().name, "claiming");
    // Stale Leases, labels alone and others' Leases are not held.
    assert!(held_by(&members, "alice").unwrap().is_none());
    let stale_only = vec![member(
        "stale",
        MemberState::FreeStaleLease,
        Some(lease(Some("alice"), false)),
        None,
    )];
    assert!(held_by(&stale_only, "alice").unwrap().is_none());
    // Held, but labelled for someone else: never resumed over.
    let conflict: Vec<MemberView> = members
        .into_iter()
        .filter(|m| m.name == "conflict")
        .collect();
    let err = held_by(&conflict, "bob").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(
        err.to_string().starts_with(
            "conflict is in conflict: its assigned-to label names mallory but its Lease is \
             held by bob"
        ),
        "{err}"
    );
    assert!(
        err.suggestion()
            .unwrap()
            .contains("`corral-vdi unassign conflict -n ns`"),
        "{err:?}"
    );
}

#[test]
fn a_label_without_a_live_lease_of_anyone_else_is_the_assignees() {
    let mine = encode_identity("alice");
    let label = Some(mine.as_str());
    let legacy = member("m", MemberState::AssignedLegacy, None, Some("alice"));
    assert!(labelled_for(&legacy, label, "alice"));
    // The label must be the assignee's, as written on the VM.
    assert!(!labelled_for(&legacy, Some("bob"), "alice"));
    assert!(!labelled_for(&legacy, None, "alice"));
    // Their own expired Lease, or one without a holder, is no obstacle; another's is.
    let own_expired = member(
        "m",
        MemberState::AssignedLeaseExpired,
        Some(lease(Some("alice"), false)),
        Some("alice"),
    );
    assert!(labelled_for(&own_expired, label, "alice"));
    let holderless = member(
        "m",
        MemberState::AssignedLeaseExpired,
        Some(lease(None, false)),
        Some("alice"),
    );
    assert!(labelled_for(&holderless, label, "alice"));
    let others_expired = member(
        "m",
        MemberState::AssignedLeaseExpired,
        Some(lease(Some("bob"), false)),
        Some("alice"),
    );
    assert!(!labelled_for(&others_expired, label, "alice"));
    // Other states are not adopted by label (an active claim is resumed instead).
    for m in every_state("alice") {
        let adopted = labelled_for(&m, label, "alice");
        assert_eq!(
            adopted,
            matches!(m.name.as_str(), "legacy" | "expired"),
            "{}",
            m.name
        );
    }
}

#[test]
fn a_stale_lease_is_someone_elses_only_when_it_names_another_holder() {
    let stale = |holder| {
        member(
            "m",
            MemberState::FreeStaleLease,
            Some(lease(holder, false)),
            None,
        )
    };
    assert!(others_stale(&stale(Some("bob")), "alice"));
    assert!(!others_stale(&stale(Some("alice")), "alice"));
    assert!(!others_stale(&stale(None), "alice"));
    for m in every_state("bob") {
        assert_eq!(others_stale(&m, "alice"), m.name == "stale", "{}", m.name);
    }
}

#[test]
fn no_free_members_counts_the_states_races_and_skipped_claims() {
    let members = every_state("bob");
    let err = no_free_members("dev", "ns", &members, 2, 0, false);
    assert_eq!(err.kind(), ErrorKind::Refused);
    assert_eq!(
        err.to_string(),
        "pool has no free members: all 8 members are taken in \"dev\" (namespace \"ns\"): \
         1 assigned, 1 assigned (legacy, label-only), 1 assigned, lease expired, \
         1 claiming / stuck, 1 conflict (label and Lease disagree), 1 free, \
         1 free (stale lease), 1 unreadable claim; lost 2 race(s) to other claimants"
    );
    assert!(
        err.suggestion().unwrap().starts_with("try another pool"),
        "{err:?}"
    );

    let one = [member("dev-1", MemberState::Assigned, None, Some("bob"))];
    let err = no_free_members("dev", "ns", &one, 0, 1, false);
    assert!(
        err.to_string()
            .starts_with("pool has no free members: its 1 member is taken"),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("; 1 member's claim expired: an administrator can recover it"),
        "{err}"
    );
    assert!(
        err.suggestion()
            .unwrap()
            .starts_with("ask an administrator (corral-vdi:admins) to recover"),
        "{err:?}"
    );
    let err = no_free_members("dev", "ns", &members, 0, 3, true);
    assert!(
        err.to_string()
            .ends_with("; 3 members' claims expired: an administrator can recover them"),
        "{err}"
    );
    assert!(
        err.suggestion().unwrap().starts_with("unassign a member"),
        "{err:?}"
    );
}

#[test]
fn a_holder_releases_their_own_claim_and_anyone_a_stale_or_label_only_one() {
    let own = member(
        "m",
        MemberState::Assigned,
        Some(lease(Some("alice"), true)),
        Some("alice"),
    );
    assert_eq!(
        may_release(&own, "alice", false, false, Some(now())).unwrap(),
        None
    );
    for m in every_state("bob") {
        if matches!(m.name.as_str(), "free" | "stale" | "legacy" | "expired") {
            assert_eq!(
                may_release(&m, "alice", false, false, Some(now())).unwrap(),
                None,
                "{}",
                m.name
            );
        }
    }
}

#[test]
fn someone_elses_live_claim_needs_force_and_names_holder_and_expiry() {
    for name in ["claiming", "assigned"] {
        let members = every_state("bob");
        let m = members.iter().find(|m| m.name == name).unwrap();
        let err = may_release(m, "alice", false, false, Some(now())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Refused, "{name}");
        assert_eq!(
            err.to_string(),
            format!(
                "{name} is claimed by bob until 2026-12-01 13:00:00 UTC (in 1h); only bob \
                 can release it"
            )
        );
        assert!(
            err.suggestion()
                .unwrap()
                .contains(", or wait until the Lease expires at 2026-12-01 13:00:00 UTC"),
            "{err:?}"
        );
        // An administrator, too, needs force.
        assert!(may_release(m, "admin", true, false, Some(now())).is_err());
        let foreign = may_release(m, "alice", false, true, Some(now()))
            .unwrap()
            .unwrap();
        assert_eq!(foreign.holder, "bob");
        assert_eq!(foreign.until, "2026-12-01 13:00:00 UTC (in 1h)");
        assert!(
            may_release(m, "admin", true, true, Some(now()))
                .unwrap()
                .is_some()
        );
    }
}

#[test]
fn an_unreadable_claim_may_be_live_so_only_its_holder_or_force_releases_it() {
    let members = every_state("bob");
    let m = members.iter().find(|m| m.name == "unreadable").unwrap();
    let err = may_release(m, "alice", false, false, Some(now())).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "unreadable is claimed by bob, but its Lease corral-vdi-unreadable cannot be \
             read (renewTime"
        ),
        "{err}"
    );
    // It never expires by itself: no "wait until".
    assert!(!err.suggestion().unwrap().contains("wait until"), "{err:?}");
    let foreign = may_release(m, "alice", false, true, Some(now()))
        .unwrap()
        .unwrap();
    assert!(
        foreign
            .until
            .starts_with("an unknown time (its Lease cannot be read: "),
        "{foreign:?}"
    );
    assert_eq!(
        may_release(m, "bob", false, false, Some(now())).unwrap(),
        None
    );
}

#[test]
fn a_conflict_is_released_only_by_an_administrator_and_without_force() {
    let members = every_state("bob");
    let m = members.iter().find(|m| m.name == "conflict").unwrap();
    for (caller, force) in [("alice", false), ("alice", true), ("bob", false)] {
        let err = may_release(m, caller, false, force, Some(now())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{caller} {force}");
    }
    assert_eq!(
        may_release(m, "admin", true, false, Some(now())).unwrap(),
        None
    );
}

#[test]
fn the_guard_refuses_a_forced_release_by_a_non_administrator_plainly() {
    let foreign = Foreign {
        holder: "bob".into(),
        until: "2026-12-01 13:00:00 UTC (in 1h)".into(),
    };
    let err = force_refusal("alice", "dev-1", &foreign);
    assert_eq!(err.kind(), ErrorKind::Forbidden);
    assert!(
        err.to_string()
            .starts_with("alice may not force-release dev-1 from bob: "),
        "{err}"
    );
    assert!(err.to_string().ends_with("; nothing was changed"), "{err}");
    assert!(
        err.suggestion()
            .unwrap()
            .contains("wait until the Lease expires at 2026-12-01 13:00:00 UTC (in 1h)"),
        "{err:?}"
    );
}
