//! Claims against a real API server (the sandbox): the Lease race, every member-state row as a
//! starting point for assign and unassign, partial failures, clock skew and identities that
//! need encoding. Power comes from the sandbox's KubeVirt emulation (start/stop subresources).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use corral_tests::{client_as, namespace, sandbox};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use vdi_core::claim::{ClaimOptions, Claimed, PowerAction, assign, unassign};
use vdi_core::cluster::ServerClock;
use vdi_core::labels::{
    ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, POOL_LABEL, encode_identity, lease_name,
};
use vdi_core::model::{ErrorKind, MemberState, Scope};
use vdi_core::resources::VirtualMachine;
use vdi_core::watch::list_pools;
use vdi_core::{Error, Result};

/// Creates `<pool>-1..=<size>` as stopped (Halted) VMs labelled with the pool.
async fn pool(admin: &Client, ns: &str, pool: &str, size: usize) {
    corral_tests::pool_vms(admin, ns, pool, size).await.unwrap();
}

async fn clock(client: &Client) -> ServerClock {
    ServerClock::measure(client).await.unwrap()
}

async fn claim(client: &Client, ns: &str, pool: &str, who: &str) -> Result<Claimed> {
    assign(
        client,
        ns,
        pool,
        who,
        &clock(client).await,
        &ClaimOptions::default(),
    )
    .await
}

/// Lease holder and VM label per member of `pool`.
async fn holders(
    admin: &Client,
    ns: &str,
    pool: &str,
) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), ns);
    let mut out = BTreeMap::new();
    let lp = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
    for vm in vms.list(&lp).await.unwrap() {
        let name = vm.metadata.name.clone().unwrap();
        let label = vm
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ASSIGNED_TO_LABEL).cloned());
        let holder = leases
            .get_opt(&lease_name(&name))
            .await
            .unwrap()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity));
        out.insert(name, (holder, label));
    }
    out
}

fn refused(result: Result<Claimed>) -> String {
    match result {
        Err(e @ Error::Refused { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn state_of(admin: &Client, ns: &str, member: &str) -> MemberState {
    let pools = list_pools(admin, &Scope::Namespace(ns.into()), &clock(admin).await)
        .await
        .unwrap();
    pools
        .iter()
        .flat_map(|p| &p.members)
        .find(|m| m.name == member)
        .map(|m| m.state)
        .unwrap()
}

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
            let who = format!("user-{round}-{k}");
            (who.clone(), claim(&client, &ns, &pool_name, &who).await)
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
    pool(&admin, &ns, "st", 4).await;
    // Every member gets a Lease that goes stale after a second.
    let short = ClaimOptions { lease_seconds: 1 };
    for i in 0..4 {
        assign(
            &admin,
            &ns,
            "st",
            &format!("old-{i}"),
            &clock(&admin).await,
            &short,
        )
        .await
        .unwrap();
    }
    for i in 1..=4 {
        unassign_label_only(&admin, &ns, &format!("st-{i}")).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        state_of(&admin, &ns, "st-1").await,
        MemberState::FreeStaleLease
    );
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

/// Removes the presentation label (as a failed claim would leave it): the member then shows
/// its Lease alone.
async fn unassign_label_only(admin: &Client, ns: &str, member: &str) {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let patch = json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: null }, "annotations": { CLAIMED_AT_ANNOTATION: null } } });
    vms.patch(member, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

async fn wait_power(admin: &Client, ns: &str, member: &str, want: &str) {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let vm = vms.get(member).await.unwrap();
        if vm.printable_status() == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{member} is {}, not {want}",
            vm.printable_status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_claim_labels_starts_and_unassign_backs_it_all_out() {
    let ns = namespace("life").await;
    let admin = client_as("admin").await;
    let alice = client_as("alice").await;
    pool(&admin, &ns, "dev", 1).await;

    let c = claim(&alice, &ns, "dev", "alice").await.unwrap();
    assert_eq!(
        (c.member.as_str(), c.resumed, c.power.clone()),
        ("dev-1", false, PowerAction::Started)
    );
    wait_power(&admin, &ns, "dev-1", "Running").await;
    let vm = Api::<VirtualMachine>::namespaced(admin.clone(), &ns)
        .get("dev-1")
        .await
        .unwrap();
    assert_eq!(
        vm.metadata.labels.as_ref().unwrap()[ASSIGNED_TO_LABEL],
        "alice"
    );
    let claimed_at: Timestamp = vm.metadata.annotations.as_ref().unwrap()[CLAIMED_AT_ANNOTATION]
        .parse()
        .unwrap();
    assert!((Timestamp::now().duration_since(claimed_at)).abs() < SignedDuration::from_secs(30));
    assert_eq!(state_of(&admin, &ns, "dev-1").await, MemberState::Assigned);

    // The holder may re-run assign: idempotent.
    let again = claim(&alice, &ns, "dev", "alice").await.unwrap();
    assert!(again.resumed && again.member == "dev-1");
    assert!(matches!(again.power, PowerAction::AlreadyRunning(_)));
    // Nobody else gets it, and nothing moves.
    let before = holders(&admin, &ns, "dev").await;
    let text = refused(claim(&client_as("bob").await, &ns, "dev", "bob").await);
    assert!(
        text.contains("pool has no free members") && text.contains("1 assigned"),
        "{text}"
    );
    assert_eq!(holders(&admin, &ns, "dev").await, before);

    // Only the holder may release an active Lease.
    let err = unassign(
        &client_as("bob").await,
        &ns,
        "dev-1",
        "bob",
        &clock(&admin).await,
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Refused);
    let text = err.to_string();
    assert!(
        text.contains("claimed by alice until") && text.contains("only alice can release it"),
        "{text}"
    );
    assert_eq!(holders(&admin, &ns, "dev").await, before);

    let released = unassign(&alice, &ns, "dev-1", "alice", &clock(&alice).await)
        .await
        .unwrap();
    assert_eq!(released.previous_holder.as_deref(), Some("alice"));
    assert!(released.lease_released && released.label_removed);
    assert_eq!(released.power, PowerAction::Stopped);
    let vm = Api::<VirtualMachine>::namespaced(admin.clone(), &ns)
        .get("dev-1")
        .await
        .unwrap();
    assert!(
        !vm.metadata.labels.unwrap().contains_key(ASSIGNED_TO_LABEL),
        "label removed, not blanked"
    );
    assert!(
        !vm.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(CLAIMED_AT_ANNOTATION)
    );
    wait_power(&admin, &ns, "dev-1", "Stopped").await;
    assert_eq!(state_of(&admin, &ns, "dev-1").await, MemberState::Free);
}

#[tokio::test]
async fn every_state_row_as_a_starting_point() {
    let ns = namespace("rows").await;
    let admin = client_as("admin").await;
    let bob = client_as("bob").await;
    let short = ClaimOptions { lease_seconds: 1 };
    let c = clock(&admin).await;

    // claiming / stuck: bob's active Lease, no label. Others skip it; bob resumes it.
    pool(&admin, &ns, "claiming", 1).await;
    assign(&admin, &ns, "claiming", "bob", &c, &ClaimOptions::default())
        .await
        .unwrap();
    unassign_label_only(&admin, &ns, "claiming-1").await;
    assert_eq!(
        state_of(&admin, &ns, "claiming-1").await,
        MemberState::Claiming
    );
    refused(claim(&admin, &ns, "claiming", "alice").await);
    let resumed = claim(&bob, &ns, "claiming", "bob").await.unwrap();
    assert!(resumed.resumed);
    assert_eq!(
        state_of(&admin, &ns, "claiming-1").await,
        MemberState::Assigned
    );

    // assigned (legacy, label-only): not claimable; anyone RBAC allows may release it.
    pool(&admin, &ns, "legacy", 1).await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let patch = json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: "carol" } } });
    vms.patch("legacy-1", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    assert_eq!(
        state_of(&admin, &ns, "legacy-1").await,
        MemberState::AssignedLegacy
    );
    refused(claim(&admin, &ns, "legacy", "alice").await);
    let r = unassign(&bob, &ns, "legacy-1", "bob", &c).await.unwrap();
    assert_eq!(
        (r.previous_holder.as_deref(), r.lease_released),
        (Some("carol"), false)
    );
    assert_eq!(state_of(&admin, &ns, "legacy-1").await, MemberState::Free);

    // free (stale lease) and assigned, lease expired.
    pool(&admin, &ns, "stale", 2).await;
    assign(&admin, &ns, "stale", "carol", &c, &short)
        .await
        .unwrap();
    assign(&admin, &ns, "stale", "dave", &c, &short)
        .await
        .unwrap();
    let carols = holders(&admin, &ns, "stale")
        .await
        .into_iter()
        .find(|(_, (h, _))| h.as_deref() == Some("carol"))
        .unwrap()
        .0;
    unassign_label_only(&admin, &ns, &carols).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let daves = if carols == "stale-1" {
        "stale-2"
    } else {
        "stale-1"
    };
    assert_eq!(
        state_of(&admin, &ns, &carols).await,
        MemberState::FreeStaleLease
    );
    assert_eq!(
        state_of(&admin, &ns, daves).await,
        MemberState::AssignedLeaseExpired
    );
    // The expired-but-labelled member is not claimable; the stale free one is taken over.
    let taken = claim(&bob, &ns, "stale", "bob").await.unwrap();
    assert_eq!(taken.member, carols);
    refused(claim(&admin, &ns, "stale", "erin").await);
    // An administrator recovers the expired member; then it is claimable again.
    let r = unassign(&admin, &ns, daves, "admin", &c).await.unwrap();
    assert_eq!(
        (r.previous_holder.as_deref(), r.lease_released),
        (Some("dave"), true)
    );
    assert_eq!(
        claim(&admin, &ns, "stale", "erin").await.unwrap().member,
        daves
    );

    // free: unassign has nothing to release and still says so plainly.
    pool(&admin, &ns, "free", 1).await;
    let r = unassign(&bob, &ns, "free-1", "bob", &c).await.unwrap();
    assert_eq!(
        (r.previous_holder, r.lease_released, r.label_removed),
        (None, false, false)
    );

    // Bad input changes nothing.
    let err = claim(&admin, &ns, "no-such-pool", "alice")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string().contains("has no members in namespace"),
        "{err}"
    );
    let err = claim(&admin, &ns, "Bad_Pool", "alice").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let err = claim(&admin, &ns, "free", " ").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(state_of(&admin, &ns, "free-1").await, MemberState::Free);
    let err = unassign(&admin, &ns, "nope", "admin", &c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not found in namespace"), "{err}");
}

#[tokio::test]
async fn a_refused_label_patch_keeps_the_lease_until_expiry() {
    let ns = namespace("partial").await;
    let admin = client_as("admin").await;
    let carol = client_as("carol").await; // may manage Leases, may not change VMs
    pool(&admin, &ns, "p", 1).await;
    let short = ClaimOptions { lease_seconds: 2 };
    let err = assign(&carol, &ns, "p", "carol", &clock(&carol).await, &short)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Partial, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("carol holds the Lease on p-1") && text.contains("forbidden"),
        "{text}"
    );
    assert_eq!(
        holders(&admin, &ns, "p").await["p-1"],
        (Some("carol".into()), None)
    );
    assert_eq!(state_of(&admin, &ns, "p-1").await, MemberState::Claiming);
    // The holder's retry resumes the same member (and fails the same way); others cannot take it.
    let err = assign(&carol, &ns, "p", "carol", &clock(&carol).await, &short)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Partial);
    refused(claim(&client_as("bob").await, &ns, "p", "bob").await);
    // After expiry an administrator recovers it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        state_of(&admin, &ns, "p-1").await,
        MemberState::FreeStaleLease
    );
    let r = unassign(&admin, &ns, "p-1", "admin", &clock(&admin).await)
        .await
        .unwrap();
    assert!(r.lease_released);
    assert_eq!(state_of(&admin, &ns, "p-1").await, MemberState::Free);
}

#[tokio::test]
async fn a_refused_start_keeps_the_claim_and_the_holder_can_retry() {
    let ns = namespace("nostart").await;
    let admin = client_as("admin").await;
    let alice = client_as("alice").await;
    pool(&admin, &ns, "s", 1).await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let refuse = json!({ "metadata": { "annotations": {
        "sandbox.corral.dev/refuse-start": "VM needs manual recovery (emulated)" } } });
    vms.patch("s-1", &PatchParams::default(), &Patch::Merge(refuse))
        .await
        .unwrap();

    let err = claim(&alice, &ns, "s", "alice").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Partial);
    let text = err.to_string();
    assert!(
        text.contains("s-1 is assigned to alice") && text.contains("manual recovery"),
        "{text}"
    );
    // SPEC: a start failure leaves the label on, and the Lease held.
    assert_eq!(
        holders(&admin, &ns, "s").await["s-1"],
        (Some("alice".into()), Some("alice".into()))
    );
    refused(claim(&client_as("bob").await, &ns, "s", "bob").await);

    let fixed =
        json!({ "metadata": { "annotations": { "sandbox.corral.dev/refuse-start": null } } });
    vms.patch("s-1", &PatchParams::default(), &Patch::Merge(fixed))
        .await
        .unwrap();
    let c = claim(&alice, &ns, "s", "alice").await.unwrap();
    assert!(c.resumed);
    assert_eq!(c.power, PowerAction::Started);
    wait_power(&admin, &ns, "s-1", "Running").await;
}

#[tokio::test]
async fn an_unschedulable_desktop_keeps_its_claim_and_shows_why() {
    let ns = namespace("unsched").await;
    let admin = client_as("admin").await;
    pool(&admin, &ns, "u", 1).await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let big =
        json!({ "metadata": { "annotations": { "sandbox.corral.dev/unschedulable": "true" } } });
    vms.patch("u-1", &PatchParams::default(), &Patch::Merge(big))
        .await
        .unwrap();
    let c = claim(&admin, &ns, "u", "alice").await.unwrap();
    assert_eq!(c.power, PowerAction::Started);
    wait_power(&admin, &ns, "u-1", "ErrorUnschedulable").await;
    assert_eq!(state_of(&admin, &ns, "u-1").await, MemberState::Assigned);
}

#[tokio::test]
async fn a_skewed_workstation_neither_steals_nor_blocks() {
    let ns = namespace("skew").await;
    let admin = client_as("admin").await;
    pool(&admin, &ns, "k", 2).await;
    let hour = SignedDuration::from_hours(1);
    let ahead = ServerClock::measure_skewed(&admin, hour).await.unwrap();
    let behind = ServerClock::measure_skewed(&admin, -hour).await.unwrap();
    for c in [ahead, behind] {
        assert!((c.now().duration_since(Timestamp::now())).abs() < SignedDuration::from_secs(2));
    }
    // bob holds k-1 (fresh, one hour): a workstation an hour ahead must not see it as expired.
    assign(
        &admin,
        &ns,
        "k",
        "bob",
        &clock(&admin).await,
        &ClaimOptions::default(),
    )
    .await
    .unwrap();
    let bobs = holders(&admin, &ns, "k")
        .await
        .into_iter()
        .find(|(_, (h, _))| h.is_some())
        .unwrap()
        .0;
    let other = if bobs == "k-1" { "k-2" } else { "k-1" };
    // carol's Lease on the other member truly expires after a second.
    assign(
        &admin,
        &ns,
        "k",
        "carol",
        &clock(&admin).await,
        &ClaimOptions { lease_seconds: 1 },
    )
    .await
    .unwrap();
    unassign_label_only(&admin, &ns, other).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Ahead: takes the really stale member, never bob's.
    let got = assign(&admin, &ns, "k", "erin", &ahead, &ClaimOptions::default())
        .await
        .unwrap();
    assert_eq!(got.member, other);
    refused(assign(&admin, &ns, "k", "frank", &ahead, &ClaimOptions::default()).await);
    let err = unassign(&admin, &ns, &bobs, "frank", &ahead)
        .await
        .unwrap_err();
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
    let resumed = assign(&admin, &ns, "k", "erin", &behind, &ClaimOptions::default())
        .await
        .unwrap();
    assert!(resumed.resumed);
    unassign(&admin, &ns, other, "erin", &behind).await.unwrap();
    assign(
        &admin,
        &ns,
        "k",
        "gina",
        &clock(&admin).await,
        &ClaimOptions { lease_seconds: 1 },
    )
    .await
    .unwrap();
    unassign_label_only(&admin, &ns, other).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = assign(&admin, &ns, "k", "hank", &behind, &ClaimOptions::default())
        .await
        .unwrap();
    assert_eq!(
        got.member, other,
        "an hour-behind clock must not keep a dead claim alive"
    );
}

#[tokio::test]
async fn identities_that_need_encoding_round_trip_through_the_label() {
    let ns = namespace("ids").await;
    let admin = client_as("admin").await;
    let long = format!("{}@example.com", "x".repeat(58));
    let ids = [
        "alice@example.com",
        "system:serviceaccount:corral-vms:broker",
        long.as_str(),
    ];
    pool(&admin, &ns, "id", ids.len()).await;
    for id in ids {
        let c = claim(&admin, &ns, "id", id).await.unwrap();
        let vm = Api::<VirtualMachine>::namespaced(admin.clone(), &ns)
            .get(&c.member)
            .await
            .unwrap();
        let label = vm.metadata.labels.unwrap()[ASSIGNED_TO_LABEL].clone();
        assert_eq!(label, encode_identity(id));
        assert!(vdi_core::labels::is_valid_label_value(&label));
        let pools = list_pools(&admin, &Scope::Namespace(ns.clone()), &clock(&admin).await)
            .await
            .unwrap();
        let m = pools[0]
            .members
            .iter()
            .find(|m| m.name == c.member)
            .unwrap();
        assert_eq!(m.holder.as_deref(), Some(id), "the full identity is shown");
        assert!(claim(&admin, &ns, "id", id).await.unwrap().resumed);
    }
    let first = holders(&admin, &ns, "id")
        .await
        .into_iter()
        .find(|(_, (h, _))| h.as_deref() == Some(ids[0]))
        .unwrap()
        .0;
    unassign(&admin, &ns, &first, ids[0], &clock(&admin).await)
        .await
        .unwrap();
}
