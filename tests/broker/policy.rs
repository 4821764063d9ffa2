//! A managed pool's claims (a `DesktopPool`, issue 26), per member: `maxSession` announced
//! with a `ReclaimSoon` Event at its notice time (half the limit when that is shorter than five
//! minutes) and then reclaimed, a claim nobody renews reclaimed `disconnectGrace` plus the
//! margin after its last renewal and not before, and what a release does by `onRelease`:
//! `restart` (a new VMI, the member stays running and free) and `reset` (the member deleted and
//! cloned again: another VM uid).
//!
//! From the emulator: the members' clones from the golden VM, the VMI a restart replaces.

use std::time::Duration;

use corral_tests::{
    client_as, golden_vm, managed_pool_in, namespace, pool_members, vmis, wait_pool_members,
};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use vdi_core::audit::parse_note;
use vdi_core::claim::ClaimOptions;
use vdi_core::policy::{DesktopPoolSpec, OnRelease};

use crate::{CONVERGE, claim_with, replicas_steady, wait_event, wait_granted};

/// The broker's default reclaim margin (`--reclaim-margin-seconds`), as in [`crate::reclaim`].
const MARGIN: Duration = Duration::from_secs(30);
/// How long the broker may take to clone a managed pool's members.
const SETTLE: Duration = Duration::from_secs(60);

/// A fresh namespace with a stopped golden VM and the managed pool `pool` of `spec` (cloned
/// from it); returns the namespace once the broker made every member.
async fn managed(prefix: &str, pool: &str, spec: DesktopPoolSpec) -> String {
    let ns = namespace(prefix).await;
    golden_vm(&ns, "golden", "Halted", |_| {}).await;
    let spec = DesktopPoolSpec {
        golden: "golden".into(),
        ..spec
    };
    managed_pool_in(&ns, pool, spec, SETTLE).await;
    ns
}

/// `user`'s claim in `pool` (with a Lease of `lease_seconds`), once granted: its member.
async fn claim_granted(user: &str, ns: &str, pool: &str, lease_seconds: i64) -> String {
    let options = ClaimOptions {
        lease_seconds,
        another: true,
        ..ClaimOptions::default()
    };
    let member = claim_with(user, ns, pool, &options).await.member;
    wait_granted(ns, &member, user, CONVERGE).await;
    member
}

/// The `why` of a broker Event's note.
fn why(event: &Event) -> Option<String> {
    parse_note(event.note.as_deref().unwrap_or_default())
        .0
        .and_then(|f| f.why)
}

/// When an Event was recorded (`eventTime`).
fn at(event: &Event) -> jiff::Timestamp {
    event.event_time.as_ref().expect("an eventTime").0
}

#[tokio::test]
async fn max_session_is_announced_then_reclaimed_at_its_end() {
    let _steady = replicas_steady().await;
    let spec = DesktopPoolSpec {
        size: 1,
        max_session: Some("20s".into()),
        ..Default::default()
    };
    let ns = managed("maxsession", "ms", spec).await;
    let member = claim_granted("alice", &ns, "ms", 3600).await;
    let acquired = pool_members(&ns, "ms").await[&member].clone();
    assert_eq!(acquired.holder.as_deref(), Some("alice"));

    // Notice at half of the 20 s (shorter than five minutes), then the reclaim at 20 s.
    let soon = wait_event(
        &ns,
        &member,
        "ReclaimSoon",
        "alice",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(why(&soon).as_deref(), Some("maxSession"), "{soon:?}");
    let reclaimed = wait_event(&ns, &member, "Reclaimed", "alice", Duration::from_secs(25)).await;
    assert_eq!(
        why(&reclaimed).as_deref(),
        Some("maxSession"),
        "{reclaimed:?}"
    );
    let (soon_at, reclaimed_at) = (at(&soon), at(&reclaimed));
    let gap = reclaimed_at.duration_since(soon_at);
    println!("the notice came {gap:#} before the reclaim");
    assert!(
        gap >= jiff::SignedDuration::from_secs(3),
        "the notice ({soon_at}) came only {gap:#} before the reclaim ({reclaimed_at})"
    );
    // onRelease keep stops it.
    let what = "the reclaimed member free and stopped";
    let now = wait_pool_members(&ns, "ms", what, CONVERGE, |m| {
        m[&member].free() && !m[&member].deleting && m[&member].power == "Stopped"
    })
    .await;
    assert_eq!(now[&member].uid, acquired.uid);
}

#[tokio::test]
async fn a_claim_nobody_renews_is_reclaimed_after_disconnect_grace_and_the_margin() {
    let _steady = replicas_steady().await;
    let spec = DesktopPoolSpec {
        size: 1,
        disconnect_grace: Some("10s".into()),
        ..Default::default()
    };
    let ns = managed("disconnect", "dc", spec).await;
    // Before the claim: the time the claim takes must not shrink `took`.
    let claimed = jiff::Timestamp::now();
    let member = claim_granted("alice", &ns, "dc", 10).await;

    let reclaimed = wait_event(&ns, &member, "Reclaimed", "alice", Duration::from_secs(60)).await;
    assert_eq!(
        why(&reclaimed).as_deref(),
        Some("disconnected"),
        "{reclaimed:?}"
    );
    let took = at(&reclaimed).duration_since(claimed);
    let least =
        jiff::SignedDuration::try_from(MARGIN).unwrap() + jiff::SignedDuration::from_secs(9);
    assert!(
        took >= least,
        "reclaimed {took:#} after the claim, before 10 s + the margin"
    );
    let soon = wait_event(&ns, &member, "ReclaimSoon", "alice", CONVERGE).await;
    assert_eq!(why(&soon).as_deref(), Some("disconnected"));
    assert!(
        at(&soon) < at(&reclaimed),
        "the notice came after the reclaim"
    );
    wait_pool_members(&ns, "dc", "the reclaimed member free", CONVERGE, |m| {
        m[&member].free()
    })
    .await;
}

#[tokio::test]
async fn on_release_restart_gives_a_new_vmi_and_keeps_the_member_running_and_free() {
    let _steady = replicas_steady().await;
    let spec = DesktopPoolSpec {
        size: 1,
        warm: Some(1),
        on_release: Some(OnRelease::Restart),
        ..Default::default()
    };
    let ns = managed("restart", "rs", spec).await;
    let member = claim_granted("alice", &ns, "rs", 3600).await;
    let admin = client_as("admin").await;
    let vmi_uid = |vmi: kube::api::DynamicObject| vmi.uid().unwrap_or_default();
    let before = vmi_uid(vmis(&admin, &ns).get(&member).await.unwrap());

    corral_tests::release_as("alice", &ns, &member).await;
    wait_event(&ns, &member, "Released", "alice", CONVERGE).await;
    corral_tests::eventually("a new VMI", CONVERGE, || async {
        let vmi = vmis(&admin, &ns).get_opt(&member).await.ok()??;
        (vmi_uid(vmi) != before).then_some(())
    })
    .await;
    let now = wait_pool_members(&ns, "rs", "the member free and running", CONVERGE, |m| {
        m[&member].free() && m[&member].power == "Running"
    })
    .await;
    assert!(
        !now[&member]
            .annotations
            .contains_key(vdi_core::names::CLAIMED_AT_ANNOTATION),
        "{:?}",
        now[&member]
    );
}

#[tokio::test]
async fn a_reclaim_in_a_pool_that_resets_gives_a_fresh_clone() {
    let _steady = replicas_steady().await;
    let spec = DesktopPoolSpec {
        size: 1,
        max_session: Some("10s".into()),
        on_release: Some(OnRelease::Reset),
        ..Default::default()
    };
    let ns = managed("reset", "rr", spec).await;
    let member = claim_granted("alice", &ns, "rr", 3600).await;
    let claimed = pool_members(&ns, "rr").await[&member].clone();

    let reclaimed = wait_event(&ns, &member, "Reclaimed", "alice", Duration::from_secs(25)).await;
    assert_eq!(why(&reclaimed).as_deref(), Some("maxSession"));
    let now = wait_pool_members(&ns, "rr", "a fresh clone", SETTLE, |m| {
        m.get(&member)
            .is_some_and(|m| m.uid != claimed.uid && m.free() && m.settled())
    })
    .await;
    assert_eq!(now.len(), 1, "{now:#?}");
}
