//! Dedicated pools (issue 38 item 2, SPEC "Pool policy and lifecycle": assignment): a user's
//! first claim makes the member theirs; every later claim gives them the same member (the same
//! VM uid); nobody else is given it; a resize never removes it; an administrator moves it.

use std::time::Duration;

use corral_tests::{
    client_as, golden_vm, managed_pool_in, namespace, release_as, vms, wait_pool_members,
};
use kube::ResourceExt;
use vdi_core::names::OWNER_ANNOTATION;
use vdi_core::policy::{Assignment, DesktopPoolSpec};

use crate::{CONVERGE, claim, cli_as, replicas_steady, wait_granted, wait_no_grant};

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
