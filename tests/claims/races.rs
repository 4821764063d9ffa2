//! Races for a member: claimants racing for a pool's members never share one, stale-Lease
//! takeovers race too, and a workstation whose clock is skewed neither steals a live claim nor
//! is blocked by an expired one.

use std::collections::HashSet;
use std::time::Duration;

use corral_tests::{
    actor_as, actor_impersonating, client_as, eventually, member_state, namespace, sandbox,
};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use vdi_core::claim::assign;
use vdi_core::clock::ServerClock;
use vdi_core::error::ErrorKind;
use vdi_core::identity::Actor;
use vdi_core::names::{encode_identity, lease_name};
use vdi_core::state::MemberState;

use crate::{claim, claim_lasting, holders, lasting, pool, refused, release, unassign_label_only};

/// K claimants on separate clients (own connections) and identities race for M members.
async fn race(ns: &str, pool_name: &str, members: usize, claimants: usize, round: usize) {
    let kubeconfig = sandbox().kubeconfig.clone();
    let mut tasks = Vec::new();
    for k in 0..claimants {
        let kubeconfig = kubeconfig.clone();
        let (ns, pool_name) = (ns.to_owned(), pool_name.to_owned());
        tasks.push(tokio::spawn(async move {
            let client = sandbox::kubeconfig::client(&kubeconfig, "admin")
                .await
                .unwrap();
            let actor = Actor::connect(client).await.unwrap();
            let who = format!("user-{round}-{k}");
            (who.clone(), claim(&actor, &ns, &pool_name, &who).await)
        }));
    }
    let mut winners = HashSet::new();
    let mut won_members = HashSet::new();
    let mut losers = 0;
    for task in tasks {
        let (who, result) = task.await.unwrap();
        match result {
            Ok(c) => {
                assert_eq!(c.identity, who);
                assert!(
                    won_members.insert(c.member.clone()),
                    "{} handed out twice",
                    c.member
                );
                winners.insert(who);
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
                assert!(e.to_string().contains("pool has no free members"), "{e}");
                losers += 1;
            }
        }
    }
    assert_eq!(
        winners.len(),
        members.min(claimants),
        "K={claimants} M={members}"
    );
    assert_eq!(losers, claimants - winners.len());
    let admin = client_as("admin").await;
    for (member, (holder, label)) in holders(&admin, ns, pool_name).await {
        match holder {
            Some(h) => {
                assert!(
                    winners.contains(&h),
                    "{member} held by {h}, who did not win"
                );
                assert_eq!(
                    label,
                    Some(encode_identity(&h)),
                    "{member}: Lease and label disagree"
                );
            }
            None => assert_eq!(label, None, "{member} labelled without a Lease"),
        }
    }
}

#[tokio::test]
async fn racing_claimants_never_share_a_member() {
    let ns = namespace("race").await;
    let admin = client_as("admin").await;
    for (round, (members, claimants)) in [(3, 2), (2, 8), (8, 8), (5, 32), (16, 64), (64, 16)]
        .into_iter()
        .enumerate()
    {
        let name = format!("race{round}");
        pool(&admin, &ns, &name, members).await;
        race(&ns, &name, members, claimants, round).await;
    }
}

#[tokio::test]
async fn stale_lease_takeovers_race_too() {
    let ns = namespace("stale").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    pool(&admin, &ns, "st", 4).await;
    // Every member gets a Lease that goes stale after a second. Racing takeovers of stale
    // Leases are administrators' acts with the guard installed, as here.
    for i in 0..4 {
        assign(&admin_actor, &ns, "st", &format!("old-{i}"), &lasting(1))
            .await
            .unwrap();
    }
    for i in 1..=4 {
        unassign_label_only(&admin, &ns, &format!("st-{i}")).await;
    }
    let what = "every member's Lease stale";
    eventually(what, Duration::from_secs(30), || async {
        for i in 1..=4 {
            let state = member_state(&admin, &ns, &format!("st-{i}")).await;
            if state != MemberState::FreeStaleLease {
                return None;
            }
        }
        Some(())
    })
    .await;
    race(&ns, "st", 4, 12, 99).await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    for i in 1..=4 {
        let lease = leases.get(&lease_name(&format!("st-{i}"))).await.unwrap();
        assert_eq!(
            lease.spec.unwrap().lease_transitions,
            Some(1),
            "one takeover per member"
        );
    }
}

#[tokio::test]
async fn a_skewed_workstation_neither_steals_nor_blocks() {
    let ns = namespace("skew").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    pool(&admin, &ns, "k", 2).await;
    let hour = SignedDuration::from_hours(1);
    let ahead = ServerClock::measure_skewed(&admin, hour).await.unwrap();
    let behind = ServerClock::measure_skewed(&admin, -hour).await.unwrap();
    for c in [ahead, behind] {
        assert!((c.now().duration_since(Timestamp::now())).abs() < SignedDuration::from_secs(2));
    }
    let admin_ahead = Actor::with_clock(admin.clone(), ahead).await.unwrap();
    let admin_behind = Actor::with_clock(admin.clone(), behind).await.unwrap();
    let alice_ahead = Actor::with_clock(client_as("alice").await, ahead)
        .await
        .unwrap();
    // bob holds k-1 (fresh, one hour): a workstation an hour ahead must not see it as expired.
    claim(&admin_actor, &ns, "k", "bob").await.unwrap();
    let bobs = holders(&admin, &ns, "k")
        .await
        .into_iter()
        .find(|(_, (h, _))| h.is_some())
        .unwrap()
        .0;
    let other = if bobs == "k-1" { "k-2" } else { "k-1" };
    // carol's Lease on the other member truly expires after a second: waited out with two
    // more (room for the clocks' measured offsets and a loaded machine).
    claim_lasting(&admin_actor, &ns, "k", "carol", 1).await;
    unassign_label_only(&admin, &ns, other).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Ahead: takes the really stale member, never bob's.
    let got = claim(&admin_ahead, &ns, "k", "erin").await.unwrap();
    assert_eq!(got.member, other);
    refused(claim(&admin_ahead, &ns, "k", "frank").await);
    let err = release(&alice_ahead, &ns, &bobs).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Refused,
        "an hour-ahead clock must not expire bob's claim"
    );
    // Lease times are written in server time, not the skewed local time.
    let lease = Api::<Lease>::namespaced(admin.clone(), &ns)
        .get(&lease_name(other))
        .await
        .unwrap();
    let renew = lease.spec.unwrap().renew_time.unwrap().0;
    assert!((renew.duration_since(Timestamp::now())).abs() < SignedDuration::from_secs(30));

    // Behind: erin's fresh Lease is active for it too, so it is not kept from her, and a
    // stale Lease is still stale for it.
    let resumed = claim(&admin_behind, &ns, "k", "erin").await.unwrap();
    assert!(resumed.resumed);
    let erin_behind = Actor::with_clock(
        actor_impersonating("erin", &["system:masters"])
            .await
            .client()
            .clone(),
        behind,
    )
    .await
    .unwrap();
    release(&erin_behind, &ns, other).await.unwrap();
    claim_lasting(&admin_actor, &ns, "k", "gina", 1).await;
    unassign_label_only(&admin, &ns, other).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = claim(&admin_behind, &ns, "k", "hank").await.unwrap();
    assert_eq!(
        got.member, other,
        "an hour-behind clock must not keep a dead claim alive"
    );
}
