//! Reclaim and release by the pool's policy (issue 26): a guest that reports no logged-in user
//! for `idleTimeout` loses its claim (and one with a user logged in keeps it), and
//! `onRelease: reset` hands the next holder a fresh clone of the golden VM: a disk written
//! before the release (the emulator's disk marker) is gone.
//!
//! From the emulator: the guest agent's `userlist` answers from the VM annotation
//! `sandbox.corral.dev/guest-users`; a written disk is the annotation
//! `sandbox.corral.dev/disk-marker`, which a clone from the golden VM does not carry.

use std::time::{Duration, Instant};

use corral_tests::{annotate, client_as};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use sandbox::emulator::knobs::{DISK_MARKER_ANNOTATION, GUEST_USERS_ANNOTATION};
use vdi_core::audit::parse_note;
use vdi_core::names::BROKER_NAME;
use vdi_core::policy::{DesktopPoolSpec, OnRelease};

use crate::{Seen, claim, managed_pool, members, spec, wait_members};

/// The pools' `idleTimeout` here, in seconds: the shortest the policy admits.
const IDLE_SECONDS: u64 = 10;
/// How long past `idleTimeout` the broker may take to see the idle guest and reclaim: its
/// polling of `userlist`, the margin, a loaded machine.
const IDLE_SLACK: Duration = Duration::from_secs(40);

/// The broker's Events on `member` in `ns` with `reason`: their notes' facts (user, why).
pub(crate) async fn broker_events(ns: &str, member: &str, reason: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client_as("admin").await, ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(member)
                && e.reporting_controller.as_deref() == Some(BROKER_NAME)
        })
        .filter_map(|e| {
            let (facts, _) = parse_note(e.note.as_deref()?);
            let facts = facts?;
            Some((
                facts.user.unwrap_or_default(),
                facts.why.unwrap_or_default(),
            ))
        })
        .collect()
}

#[tokio::test]
async fn an_idle_guest_loses_its_claim_and_a_busy_one_keeps_it() {
    let ns = managed_pool(
        "idle",
        "id",
        DesktopPoolSpec {
            idle_timeout: Some(format!("{IDLE_SECONDS}s")),
            ..spec(2)
        },
    )
    .await;
    let alice = claim("alice", &ns, "id").await.member;
    let bob = claim("bob", &ns, "id").await.member;
    annotate(&ns, &bob, GUEST_USERS_ANNOTATION, Some("bob")).await;
    annotate(&ns, &alice, GUEST_USERS_ANNOTATION, Some("")).await;
    let idle_since = Instant::now();
    let busy = members(&ns, "id").await[&bob].clone();

    let idle = Duration::from_secs(IDLE_SECONDS);
    // Reclaimed and stopped (onRelease keep stops it): the state asserted is the one waited on.
    let now = wait_members(&ns, "id", "alice's idle claim reclaimed and stopped", |m| {
        m.get(&alice)
            .is_some_and(|m| m.free() && !m.deleting && m.power == "Stopped")
    })
    .await;
    let took = idle_since.elapsed();
    eprintln!("idle guest reclaimed {took:?} after its user logged out");
    assert!(
        took <= idle + IDLE_SLACK,
        "reclaimed after {took:?}, more than idleTimeout + {IDLE_SLACK:?}"
    );
    assert!(took >= idle, "reclaimed after {took:?}, before idleTimeout");
    let kept = &now[&bob];
    assert_eq!(
        (&kept.uid, &kept.holder, &kept.label, kept.power.as_str()),
        (&busy.uid, &busy.holder, &busy.label, "Running"),
        "bob's busy guest lost its claim"
    );
    let events = broker_events(&ns, &alice, "Reclaimed").await;
    assert!(
        events.contains(&("alice".to_owned(), "idle".to_owned())),
        "no Reclaimed Event naming alice and idle on {alice}: {events:?}"
    );
}

#[tokio::test]
async fn on_release_reset_gives_the_next_holder_a_fresh_clone() {
    let ns = managed_pool(
        "reset",
        "rt",
        DesktopPoolSpec {
            on_release: Some(OnRelease::Reset),
            ..spec(1)
        },
    )
    .await;
    let seen = Seen::start(&ns, "rt").await;
    let member = claim("alice", &ns, "rt").await.member;
    annotate(&ns, &member, DISK_MARKER_ANNOTATION, Some("alice was here")).await;
    let written = members(&ns, "rt").await[&member].clone();

    corral_tests::release_as("alice", &ns, &member).await;
    let now = wait_members(&ns, "rt", "a fresh clone", |m| {
        m.get(&member)
            .is_some_and(|m| m.uid != written.uid && m.free() && m.settled())
    })
    .await;
    let fresh = &now[&member];
    assert!(
        !fresh.annotations.contains_key(DISK_MARKER_ANNOTATION),
        "the disk written before the release is still there: {fresh:?}"
    );
    assert!(
        seen.deleted(&now)
            .contains(&(written.uid.clone(), member.clone())),
        "the written member was never deleted"
    );

    // The next holder gets the fresh one.
    let next = claim("bob", &ns, "rt").await.member;
    assert_eq!(next, member);
    let held = members(&ns, "rt").await[&member].clone();
    assert_eq!(held.uid, fresh.uid);
    assert!(!held.annotations.contains_key(DISK_MARKER_ANNOTATION));
}
