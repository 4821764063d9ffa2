//! Claims against a real API server (the sandbox): the Lease race, every member-state row as a
//! starting point for assign and unassign, partial failures, clock skew and identities that
//! need encoding. Power comes from the sandbox's KubeVirt emulation (start/stop subresources).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use corral_tests::{actor_as, actor_impersonating, client_as, namespace, sandbox};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use vdi_core::claim::{
    ClaimOptions, Claimed, PowerAction, Released, UnassignOptions, assign, unassign,
};
use vdi_core::cluster::ServerClock;
use vdi_core::error::ErrorKind;
use vdi_core::identity::Actor;
use vdi_core::labels::{
    ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, POOL_LABEL, encode_identity, lease_name,
};
use vdi_core::model::{MemberState, Scope};
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

/// `actor` claims a member of `pool` for `who`.
async fn claim(actor: &Actor, ns: &str, pool: &str, who: &str) -> Result<Claimed> {
    assign(actor, ns, pool, who, &ClaimOptions::default()).await
}

/// A claim Lease of `seconds`.
fn lasting(seconds: i64) -> ClaimOptions {
    ClaimOptions {
        lease_seconds: seconds,
        ..ClaimOptions::default()
    }
}

/// `actor` releases `member` (no force).
async fn release(actor: &Actor, ns: &str, member: &str) -> Result<Released> {
    unassign(actor, ns, member, &UnassignOptions::default()).await
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
    let alice = actor_as("alice").await;
    let bob = actor_as("bob").await;
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
    let err = claim(&bob, &ns, "dev", "bob").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Refused, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "pool has no free members: its 1 member is taken in \"dev\" (namespace \"{ns}\"): \
             1 assigned"
        )
    );
    // bob cannot make pools: his way out is another pool, the holder or an administrator.
    assert_eq!(
        err.suggestion().as_deref(),
        Some(
            "try another pool, ask a holder to release their member, or ask an administrator \
             (corral-vdi:admins) for a bigger pool"
        )
    );
    assert_eq!(holders(&admin, &ns, "dev").await, before);

    // Only the holder may release an active Lease.
    let err = release(&bob, &ns, "dev-1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Refused);
    let text = err.to_string();
    assert!(
        text.contains("claimed by alice until") && text.contains("only alice can release it"),
        "{text}"
    );
    assert_eq!(holders(&admin, &ns, "dev").await, before);

    let released = release(&alice, &ns, "dev-1").await.unwrap();
    assert_eq!(released.previous_holder.as_deref(), Some("alice"));
    assert!(released.lease_released && released.label_removed && !released.forced);
    assert_eq!(released.power, PowerAction::Stopped);
    // Released again at once, while the VM may still be stopping: nothing left to release,
    // and no KubeVirt refusal of a second stop.
    let again = release(&alice, &ns, "dev-1").await.unwrap();
    assert_eq!(again.previous_holder, None);
    assert!(!again.lease_released && !again.label_removed);
    assert!(
        matches!(
            again.power,
            PowerAction::AlreadyStopping | PowerAction::AlreadyStopped
        ),
        "{:?}",
        again.power
    );
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
    let admin_actor = actor_as("admin").await;
    let bob = actor_as("bob").await;

    // claiming / stuck: bob's active Lease, no label. Others skip it; bob resumes it.
    pool(&admin, &ns, "claiming", 1).await;
    claim(&admin_actor, &ns, "claiming", "bob").await.unwrap();
    unassign_label_only(&admin, &ns, "claiming-1").await;
    assert_eq!(
        state_of(&admin, &ns, "claiming-1").await,
        MemberState::Claiming
    );
    refused(claim(&admin_actor, &ns, "claiming", "alice").await);
    let resumed = claim(&bob, &ns, "claiming", "bob").await.unwrap();
    assert!(resumed.resumed);
    assert_eq!(
        state_of(&admin, &ns, "claiming-1").await,
        MemberState::Assigned
    );

    // assigned (legacy, label-only): not claimable. With the guard, only the person the label
    // names or an administrator may release it.
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
    refused(claim(&admin_actor, &ns, "legacy", "alice").await);
    let before = holders(&admin, &ns, "legacy").await;
    let err = release(&bob, &ns, "legacy-1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(
        err.to_string()
            .contains("corral-vdi guard: legacy-1 is assigned to carol"),
        "{err}"
    );
    let hint = err.suggestion().unwrap_or_default();
    assert!(
        hint.contains("corral-vdi guard refused it") && hint.contains("corral-vdi:admins"),
        "the fix names who may, not RBAC: {hint}"
    );
    assert_eq!(holders(&admin, &ns, "legacy").await, before);
    let r = release(&admin_actor, &ns, "legacy-1").await.unwrap();
    assert_eq!(
        (r.previous_holder.as_deref(), r.lease_released),
        (Some("carol"), false)
    );
    assert_eq!(state_of(&admin, &ns, "legacy-1").await, MemberState::Free);

    // free (stale lease) and assigned, lease expired.
    pool(&admin, &ns, "stale", 2).await;
    claim_lasting(&admin_actor, &ns, "stale", "carol", 1).await;
    claim_lasting(&admin_actor, &ns, "stale", "dave", 1).await;
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
    // With the guard, an ordinary user skips carol's expired claim and says so; nothing moves.
    let before = holders(&admin, &ns, "stale").await;
    let text = refused(claim(&bob, &ns, "stale", "bob").await);
    assert!(
        text.contains("1 member's claim expired: an administrator can recover it"),
        "{text}"
    );
    assert_eq!(holders(&admin, &ns, "stale").await, before);
    // An administrator takes the stale free one over (for bob); the expired-but-labelled
    // member is not claimable.
    let taken = claim(&admin_actor, &ns, "stale", "bob").await.unwrap();
    assert_eq!(taken.member, carols);
    refused(claim(&admin_actor, &ns, "stale", "erin").await);
    // An administrator recovers the expired member; then it is claimable again.
    let r = release(&admin_actor, &ns, daves).await.unwrap();
    assert_eq!(
        (r.previous_holder.as_deref(), r.lease_released, r.forced),
        (Some("dave"), true, false)
    );
    assert_eq!(
        claim(&admin_actor, &ns, "stale", "erin")
            .await
            .unwrap()
            .member,
        daves
    );

    // free: unassign has nothing to release and still says so plainly.
    pool(&admin, &ns, "free", 1).await;
    let r = release(&bob, &ns, "free-1").await.unwrap();
    assert_eq!(
        (r.previous_holder, r.lease_released, r.label_removed),
        (None, false, false)
    );

    // Bad input changes nothing.
    let err = claim(&admin_actor, &ns, "no-such-pool", "alice")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string().contains("has no members in namespace"),
        "{err}"
    );
    let err = claim(&admin_actor, &ns, "Bad_Pool", "alice")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let err = claim(&admin_actor, &ns, "free", " ").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(state_of(&admin, &ns, "free-1").await, MemberState::Free);
    let err = release(&admin_actor, &ns, "nope").await.unwrap_err();
    assert!(err.to_string().contains("not found in namespace"), "{err}");
}

/// `actor` claims a member of `pool` for `who` with a Lease of `seconds`.
async fn claim_lasting(actor: &Actor, ns: &str, pool: &str, who: &str, seconds: i64) -> Claimed {
    assign(actor, ns, pool, who, &lasting(seconds))
        .await
        .unwrap_or_else(|e| panic!("{who} claims in {pool}: {e}"))
}

#[tokio::test]
async fn a_refused_label_patch_keeps_the_lease_until_expiry() {
    let ns = namespace("partial").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let carol = actor_as("carol").await; // may manage Leases, may not change VMs
    pool(&admin, &ns, "p", 1).await;
    let err = assign(&carol, &ns, "p", "carol", &lasting(2))
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
    let err = assign(&carol, &ns, "p", "carol", &lasting(2))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Partial);
    refused(claim(&actor_as("bob").await, &ns, "p", "bob").await);
    // After expiry an administrator recovers it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        state_of(&admin, &ns, "p-1").await,
        MemberState::FreeStaleLease
    );
    let r = release(&admin_actor, &ns, "p-1").await.unwrap();
    assert!(r.lease_released);
    assert_eq!(state_of(&admin, &ns, "p-1").await, MemberState::Free);
}

#[tokio::test]
async fn a_refused_start_keeps_the_claim_and_the_holder_can_retry() {
    let ns = namespace("nostart").await;
    let admin = client_as("admin").await;
    let alice = actor_as("alice").await;
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
    refused(claim(&actor_as("bob").await, &ns, "s", "bob").await);

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
    let c = claim(&actor_as("admin").await, &ns, "u", "alice")
        .await
        .unwrap();
    assert_eq!(c.power, PowerAction::Started);
    wait_power(&admin, &ns, "u-1", "ErrorUnschedulable").await;
    assert_eq!(state_of(&admin, &ns, "u-1").await, MemberState::Assigned);
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
    // carol's Lease on the other member truly expires after a second.
    claim_lasting(&admin_actor, &ns, "k", "carol", 1).await;
    unassign_label_only(&admin, &ns, other).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

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
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = claim(&admin_behind, &ns, "k", "hank").await.unwrap();
    assert_eq!(
        got.member, other,
        "an hour-behind clock must not keep a dead claim alive"
    );
}

#[tokio::test]
async fn identities_that_need_encoding_round_trip_through_the_label() {
    let ns = namespace("ids").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let long = format!("{}@example.com", "x".repeat(58));
    let ids = [
        "alice@example.com",
        "system:serviceaccount:corral-vms:broker",
        long.as_str(),
    ];
    pool(&admin, &ns, "id", ids.len()).await;
    for id in ids {
        let c = claim(&admin_actor, &ns, "id", id).await.unwrap();
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
        assert_eq!(m.state, MemberState::Assigned, "a hashed label matches");
        assert!(claim(&admin_actor, &ns, "id", id).await.unwrap().resumed);
    }
    // The holder releases it, acting as itself through impersonation.
    let first = holders(&admin, &ns, "id")
        .await
        .into_iter()
        .find(|(_, (h, _))| h.as_deref() == Some(ids[0]))
        .unwrap()
        .0;
    let holder = actor_impersonating(ids[0], &["system:masters"]).await;
    release(&holder, &ns, &first).await.unwrap();
}

/// The `corral vdi` Go CLI's way of assigning: a merge patch of the label (and annotation),
/// with no precondition, as an administrator runs it.
async fn go_cli_assign(admin: &Client, ns: &str, member: &str, user: &str) {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let patch = json!({ "metadata": {
        "labels": { ASSIGNED_TO_LABEL: user },
        "annotations": { CLAIMED_AT_ANNOTATION: Timestamp::now().round(jiff::Unit::Second).unwrap().to_string() } } });
    vms.patch(member, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn label_and_lease_that_disagree_are_a_conflict_only_an_administrator_resolves() {
    let ns = namespace("conflict").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let alice = actor_as("alice").await;
    let bob = actor_as("bob").await;
    pool(&admin, &ns, "cf", 1).await;
    claim(&alice, &ns, "cf", "alice").await.unwrap();
    // The Go CLI's unassign (label and annotation only; our Lease stays), then its assign to
    // bob: the VM says bob, the Lease says alice.
    unassign_label_only(&admin, &ns, "cf-1").await;
    go_cli_assign(&admin, &ns, "cf-1", "bob").await;

    let pools = list_pools(&admin, &Scope::Namespace(ns.clone()), &clock(&admin).await)
        .await
        .unwrap();
    let m = &pools[0].members[0];
    assert_eq!(m.state, MemberState::Conflict);
    assert!(!m.claimable);
    assert_eq!(
        (m.holder.as_deref(), m.label_holder.as_deref()),
        (Some("alice"), Some("bob")),
        "both names shown"
    );
    assert_eq!(pools[0].counts.taken, 1);

    // Never "resumed" over, nobody gets it, nothing moves.
    let before = holders(&admin, &ns, "cf").await;
    let err = claim(&alice, &ns, "cf", "alice").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(
        err.to_string().contains("its assigned-to label names bob")
            && err.to_string().contains("held by alice"),
        "{err}"
    );
    refused(claim(&bob, &ns, "cf", "bob").await);
    // Neither the Lease holder nor the label's user resolves it; an administrator does.
    for who in [&alice, &bob] {
        let err = release(who, &ns, "cf-1").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        assert!(err.suggestion().unwrap().contains("administrator"), "{err}");
    }
    assert_eq!(holders(&admin, &ns, "cf").await, before);
    let r = release(&admin_actor, &ns, "cf-1").await.unwrap();
    assert!(r.lease_released && r.label_removed && !r.forced);
    assert_eq!(state_of(&admin, &ns, "cf-1").await, MemberState::Free);
    assert_eq!(claim(&bob, &ns, "cf", "bob").await.unwrap().member, "cf-1");
}

#[tokio::test]
async fn a_label_only_writer_racing_a_claim_always_leaves_the_conflict_visible() {
    let ns = namespace("lrace").await;
    let admin = client_as("admin").await;
    let alice = actor_as("alice").await;
    pool(&admin, &ns, "lr", 1).await;
    // One running member, as the issue saw it.
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    vms.patch(
        "lr-1",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "runStrategy": "Always" } })),
    )
    .await
    .unwrap();
    wait_power(&admin, &ns, "lr-1", "Running").await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let (mut won, mut conflicts, mut lost) = (0, 0, 0);
    for round in 0..50u64 {
        // Varied offsets: the writer starts 0..=48 ms after the claim (a claim is a few
        // round trips of a few milliseconds each).
        let offset = Duration::from_millis(round * 7 % 49);
        let writer = {
            let admin = admin.clone();
            let ns = ns.clone();
            async move {
                tokio::time::sleep(offset).await;
                go_cli_assign(&admin, &ns, "lr-1", "bob").await;
            }
        };
        let (result, ()) = tokio::join!(claim(&alice, &ns, "lr", "alice"), writer);
        let state = state_of(&admin, &ns, "lr-1").await;
        match result {
            Ok(c) => {
                won += 1;
                assert!(!c.resumed);
                assert_eq!(
                    state,
                    MemberState::Conflict,
                    "round {round}: alice was told assigned, bob's label landed after: the conflict must show"
                );
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {
                conflicts += 1;
                assert_eq!(state, MemberState::Conflict, "round {round}: {e}");
            }
            Err(e) => {
                lost += 1;
                assert!(
                    e.to_string().contains("pool has no free members"),
                    "round {round}: {e}"
                );
                assert_eq!(state, MemberState::AssignedLegacy, "round {round}");
            }
        }
        // Reset for the next round.
        unassign_label_only(&admin, &ns, "lr-1").await;
        let _ = leases
            .delete(&lease_name("lr-1"), &Default::default())
            .await;
    }
    eprintln!(
        "50 rounds: alice told assigned {won}, conflict reported {conflicts}, bob first {lost}"
    );
}

#[tokio::test]
async fn one_person_gets_their_desktop_back_unless_they_ask_for_another() {
    let ns = namespace("onepp").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let alice = actor_as("alice").await;
    pool(&admin, &ns, "op", 3).await;
    // alice holds op-2 the Phase 1 way (label only): "Get a desktop" gives it back, with a Lease.
    go_cli_assign(&admin, &ns, "op-2", "alice").await;
    let c = claim(&alice, &ns, "op", "alice").await.unwrap();
    assert_eq!((c.member.as_str(), c.resumed), ("op-2", true));
    assert_eq!(state_of(&admin, &ns, "op-2").await, MemberState::Assigned);
    assert_eq!(
        holders(&admin, &ns, "op").await["op-2"],
        (Some("alice".into()), Some("alice".into()))
    );
    // Again: the same one.
    assert_eq!(
        claim(&alice, &ns, "op", "alice").await.unwrap().member,
        "op-2"
    );
    // bob may not assign for alice (the guard's rule), not even "resume" hers: refused before
    // anything, and nothing moved.
    let before = holders(&admin, &ns, "op").await;
    for another in [false, true] {
        let options = ClaimOptions {
            another,
            ..ClaimOptions::default()
        };
        let err = assign(&actor_as("bob").await, &ns, "op", "alice", &options)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
        assert!(
            err.to_string()
                .contains("bob may not assign desktops to alice"),
            "{err}"
        );
    }
    assert_eq!(holders(&admin, &ns, "op").await, before);
    // An administrator asks for a second one explicitly.
    let second = assign(
        &admin_actor,
        &ns,
        "op",
        "alice",
        &ClaimOptions {
            another: true,
            ..ClaimOptions::default()
        },
    )
    .await
    .unwrap();
    assert_ne!(second.member, "op-2");
    assert!(!second.resumed);
}

#[tokio::test]
async fn an_administrator_force_releases_and_an_event_records_it() {
    let ns = namespace("force").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let alice = actor_as("alice").await;
    let bob = actor_as("bob").await;
    pool(&admin, &ns, "fr", 1).await;
    claim(&bob, &ns, "fr", "bob").await.unwrap();
    // alice may not, even with force: with the guard enforced she is refused up front, and
    // nothing moves.
    let before = holders(&admin, &ns, "fr").await;
    let err = unassign(&alice, &ns, "fr-1", &UnassignOptions { force: true })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert_eq!(
        err.to_string(),
        "alice may not force-release fr-1 from bob: with the cluster's Corral VDI guard only \
         administrators (corral-vdi:admins) release someone else's desktop; nothing was changed"
    );
    assert!(
        err.suggestion()
            .is_some_and(|s| s.starts_with("ask bob to release it")),
        "{err:?}"
    );
    assert_eq!(holders(&admin, &ns, "fr").await, before);
    // Without force an administrator is refused too, with the way to force it.
    let err = release(&admin_actor, &ns, "fr-1").await.unwrap_err();
    assert!(err.suggestion().unwrap().contains("--force"), "{err:?}");
    let r = unassign(&admin_actor, &ns, "fr-1", &UnassignOptions { force: true })
        .await
        .unwrap();
    assert!(r.forced && r.lease_released);
    assert_eq!(r.previous_holder.as_deref(), Some("bob"));
    assert_eq!(state_of(&admin, &ns, "fr-1").await, MemberState::Free);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), &ns);
    let list = events
        .list(&ListParams::default().fields("involvedObject.name=fr-1"))
        .await
        .unwrap();
    let event = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some(vdi_core::claim::FORCE_RELEASE_REASON))
        .expect("a ForceReleased event on the VM");
    let message = event.message.clone().unwrap_or_default();
    assert!(
        message.starts_with("admin force-released fr-1 from bob at "),
        "{message}"
    );
}

/// Gives `user` the desktop-user role in `ns`.
async fn grant_desktop_user(admin: &Client, ns: &str, user: &str) {
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), ns);
    let name = format!(
        "desktop-{}",
        encode_identity(user).replace('.', "-").to_lowercase()
    );
    let binding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "corral-vdi:desktop-user" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }]
    }))
    .unwrap();
    bindings
        .create(&Default::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_guard_checks_encoded_identities_itself() {
    let ns = namespace("enc").await;
    let admin = client_as("admin").await;
    let email = "alice@example.com";
    let broker = "system:serviceaccount:corral-vms:broker";
    for user in [email, broker] {
        grant_desktop_user(&admin, &ns, user).await;
    }
    pool(&admin, &ns, "enc", 2).await;
    // A base32 identity labels its own desktop: the guard computes the same encoding.
    let c = claim(&actor_impersonating(email, &[]).await, &ns, "enc", email)
        .await
        .unwrap();
    assert_eq!(
        holders(&admin, &ns, "enc").await[&c.member],
        (
            Some(email.into()),
            Some("b32.mfwgsy3fibsxqylnobwgkltdn5wq".into())
        )
    );
    // A hashed identity cannot be checked by CEL: refused before any Lease is written.
    let before = holders(&admin, &ns, "enc").await;
    let err = claim(&actor_impersonating(broker, &[]).await, &ns, "enc", broker)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(
        err.to_string().contains("cannot check a label")
            && err.suggestion().unwrap().contains("administrator"),
        "{err}"
    );
    assert_eq!(holders(&admin, &ns, "enc").await, before);
    // An administrator assigns to it.
    let c = claim(&actor_as("admin").await, &ns, "enc", broker)
        .await
        .unwrap();
    assert_eq!(
        holders(&admin, &ns, "enc").await[&c.member].0.as_deref(),
        Some(broker)
    );
}

#[tokio::test]
async fn what_each_identity_may_do_comes_from_the_cluster() {
    use vdi_core::identity::permissions;
    let ns = namespace("perm").await;
    let alice = permissions(&actor_as("alice").await, &ns, true).await;
    assert!(!alice.admin && alice.claim.allowed);
    for (what, verdict, needle) in [
        (
            "assign",
            &alice.assign,
            "only members of corral-vdi:admins may assign desktops",
        ),
        (
            "new pool",
            &alice.create_pool,
            "RBAC does not let you create virtualmachineclones.clone.kubevirt.io",
        ),
        (
            "delete pool",
            &alice.delete_pool,
            "RBAC does not let you delete virtualmachines.kubevirt.io",
        ),
        (
            "force release",
            &alice.force_release,
            "only members of corral-vdi:admins may release",
        ),
    ] {
        assert!(!verdict.allowed, "{what}");
        let reason = verdict.reason.clone().unwrap();
        assert!(reason.contains(needle), "{what}: {reason}");
    }
    let admin = permissions(&actor_as("admin").await, &ns, true).await;
    assert!(admin.admin);
    for verdict in [
        &admin.claim,
        &admin.assign,
        &admin.create_pool,
        &admin.delete_pool,
        &admin.force_release,
    ] {
        assert!(verdict.allowed && verdict.reason.is_none(), "{admin:?}");
    }
    let carol = permissions(&actor_as("carol").await, &ns, true).await;
    assert!(!carol.claim.allowed);
    assert!(
        carol
            .claim
            .reason
            .clone()
            .unwrap()
            .contains("patch virtualmachines.kubevirt.io"),
        "{carol:?}"
    );
    // Without the guard, RBAC alone decides: alice may assign to others there.
    let unguarded = permissions(&actor_as("alice").await, &ns, false).await;
    assert!(unguarded.assign.allowed);
}
