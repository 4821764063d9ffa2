//! Dedicated pools (issue 38 item 2, SPEC "Pool policy and lifecycle": assignment): a user's
//! first claim makes the member theirs; every later claim gives them the same member (the same
//! VM uid); nobody else is given it; a resize never removes it; an administrator moves it. A
//! raw Lease on someone else's desktop is released at once, and a second desktop is never made
//! the same user's.

use std::time::Duration;

use corral_tests::{
    client_as, golden_vm, leases, managed_pool_in, namespace, release_as, vms, wait_pool_members,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::json;
use vdi_core::names::{MEMBER_LABEL, OWNER_ANNOTATION, POOL_LABEL, lease_name};
use vdi_core::policy::{Assignment, DesktopPoolSpec};

use crate::{
    CONVERGE, claim, cli_as, grant, replicas_steady, wait_event, wait_granted, wait_no_grant,
};

/// The uid and owner of `member` in `ns`.
async fn uid_and_owner(ns: &str, member: &str) -> (String, Option<String>) {
    let vm = vms(&client_as("admin").await, ns)
        .get(member)
        .await
        .unwrap();
    (
        vm.uid().unwrap_or_default(),
        vm.annotations().get(OWNER_ANNOTATION).cloned(),
    )
}

/// `user`'s claim on `member` released, and the broker done with it (grant gone, member free).
async fn release(user: &str, ns: &str, pool: &str, member: &str) {
    release_as(user, ns, member).await;
    wait_no_grant(ns, member, CONVERGE).await;
    wait_pool_members(ns, pool, "the member free again", CONVERGE, |m| {
        m.get(member).is_some_and(|m| m.settled() && m.free())
    })
    .await;
}

#[tokio::test]
async fn a_dedicated_desktop_stays_its_owners_until_an_administrator_moves_it() {
    let _steady = replicas_steady().await;
    let ns = namespace("dedicated").await;
    golden_vm(&ns, "golden", "Halted", |_| {}).await;
    let spec = DesktopPoolSpec {
        golden: "golden".into(),
        size: 3,
        assignment: Some(Assignment::Dedicated),
        ..Default::default()
    };
    managed_pool_in(&ns, "dd", spec, Duration::from_secs(90)).await;

    // alice's first claim makes a member hers.
    let first = claim("alice", &ns, "dd").await.member;
    wait_granted(&ns, &first, "alice", CONVERGE).await;
    let (uid, owner) = uid_and_owner(&ns, &first).await;
    assert_eq!(owner.as_deref(), Some("alice"), "{first} is not alice's");

    // Her second, third … and tenth claims give her the same VM.
    for round in 2..=10 {
        release("alice", &ns, "dd", &first).await;
        let again = claim("alice", &ns, "dd").await.member;
        assert_eq!(again, first, "claim {round} gave alice another member");
        wait_granted(&ns, &first, "alice", CONVERGE).await;
        assert_eq!(
            uid_and_owner(&ns, &first).await.0,
            uid,
            "claim {round}: a new VM"
        );
    }

    // bob never gets it: his claims go to unowned members, which become his.
    release("alice", &ns, "dd", &first).await;
    let bobs = claim("bob", &ns, "dd").await.member;
    assert_ne!(bobs, first, "bob was given alice's desktop");
    wait_granted(&ns, &bobs, "bob", CONVERGE).await;
    assert_eq!(uid_and_owner(&ns, &bobs).await.1.as_deref(), Some("bob"));

    // A resize to fewer members than it has owners is refused, naming the owners.
    let (ok, _, stderr) = cli_as("admin", &["pool", "resize", "dd", "--size", "1", "-n", &ns]);
    assert!(!ok, "a resize removed an owned member");
    let highest = first.clone().max(bobs.clone());
    assert!(
        stderr.contains(&highest) && stderr.contains("would lose owned members"),
        "{stderr}"
    );

    // An administrator moves alice's desktop to carol: alice's next claim gets another member.
    let (ok, stdout, stderr) = cli_as(
        "admin",
        &["pool", "owner", &first, "--user", "carol", "-n", &ns],
    );
    assert!(ok, "pool owner: {stderr}");
    assert!(
        stdout.contains(&format!("{first} is now carol's (was alice's)")),
        "{stdout}"
    );
    let (ok, stdout, _) = cli_as("admin", &["pool", "list", "-n", &ns]);
    assert!(ok);
    assert!(
        stdout.contains(&format!("{first} carol")) && stdout.contains("1 unowned"),
        "{stdout}"
    );
    let next = claim("alice", &ns, "dd").await.member;
    assert!(next != first && next != bobs, "alice got {next}");
    wait_granted(&ns, &next, "alice", CONVERGE).await;
    assert_eq!(uid_and_owner(&ns, &next).await.1.as_deref(), Some("alice"));
    let (_, owner) = uid_and_owner(&ns, &first).await;
    assert_eq!(owner.as_deref(), Some("carol"));
}

/// `user`'s claim Lease on `member` of `pool`, written as raw kubectl would (no client rules).
async fn raw_claim(user: &str, ns: &str, pool: &str, member: &str) {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": lease_name(member), "namespace": ns,
                      "labels": { POOL_LABEL: pool, MEMBER_LABEL: member } },
        "spec": { "holderIdentity": user, "acquireTime": now, "renewTime": now,
                  "leaseDurationSeconds": 3600 },
    }))
    .unwrap();
    Api::<Lease>::namespaced(client_as(user).await, ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_or_else(|e| panic!("{user}'s raw claim of {member}: {e}"));
}

#[tokio::test]
async fn raw_claims_neither_squat_on_someone_s_desktop_nor_collect_a_second_one() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("dedhostile").await;
    golden_vm(&ns, "golden", "Halted", |_| {}).await;
    let spec = DesktopPoolSpec {
        golden: "golden".into(),
        size: 2,
        assignment: Some(Assignment::Dedicated),
        ..Default::default()
    };
    managed_pool_in(&ns, "hd", spec, Duration::from_secs(90)).await;
    let mine = claim("alice", &ns, "hd").await.member;
    wait_granted(&ns, &mine, "alice", CONVERGE).await;
    release("alice", &ns, "hd", &mine).await;
    let other = if mine == "hd-1" { "hd-2" } else { "hd-1" };

    // bob's raw Lease on alice's desktop: never granted, and released at once, so that his
    // renewals cannot keep her out.
    raw_claim("bob", &ns, "hd", &mine).await;
    let reclaimed = wait_event(&ns, &mine, "Reclaimed", "bob", CONVERGE).await;
    let note = reclaimed.note.unwrap_or_default();
    assert!(note.contains("dedicated desktop of alice"), "{note}");
    assert!(
        leases(&admin, &ns)
            .get_opt(&lease_name(&mine))
            .await
            .unwrap()
            .is_none(),
        "bob's Lease on alice's desktop stayed"
    );
    assert_eq!(grant(&ns, &mine).await, (None, None), "a grant for bob");
    assert_eq!(uid_and_owner(&ns, &mine).await.1.as_deref(), Some("alice"));

    // alice's raw Lease on the other member: not made hers too, never granted, and released at
    // once; the Event names her own desktop.
    raw_claim("alice", &ns, "hd", other).await;
    let reclaimed = wait_event(&ns, other, "Reclaimed", "alice", CONVERGE).await;
    let note = reclaimed.note.unwrap_or_default();
    assert!(note.contains(&format!("alice owns {mine}")), "{note}");
    assert!(
        leases(&admin, &ns)
            .get_opt(&lease_name(other))
            .await
            .unwrap()
            .is_none(),
        "alice's second claim stayed"
    );
    assert_eq!(
        uid_and_owner(&ns, other).await.1,
        None,
        "{other} made alice's too"
    );
    assert_eq!(
        grant(&ns, other).await,
        (None, None),
        "a second desktop for alice"
    );

    // Her claim still gives her her own.
    assert_eq!(claim("alice", &ns, "hd").await.member, mine);
}
