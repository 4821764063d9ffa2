//! A claim Lease edited by hand: an administrator hands alice's desktop to bob by changing the
//! Lease's holder. The grant (binding, label, granted-to) follows within 5 s, and every stream
//! alice had open ends within the same 5 s: KubeVirt cannot end an established `portforward` or
//! `usbredir` stream except with its VMI, so the broker restarts the desktop (KubeVirt's
//! `restart` subresource), which then runs again for bob. claimed-at becomes the time of the
//! hand-over.

use std::time::Duration;

use corral_tests::{
    client_as, desktop_member, eventually, namespace, set_lease_spec, streams_as, vmis, vms,
    wait_power,
};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;
use vdi_core::names::{CLAIMED_AT_ANNOTATION, lease_name};
use vdi_core::stream::{self, Subresource};

use crate::{
    FOLLOW, STREAMS, assert_grant_shape, claim, console, ends_by, replicas_steady, stream_code,
    wait_event, wait_granted,
};

/// The uid of `member`'s VMI in `ns`, if one exists.
async fn vmi_uid(admin: &Client, ns: &str, member: &str) -> Option<String> {
    vmis(admin, ns).get_opt(member).await.unwrap()?.uid()
}

/// `member`'s claimed-at annotation in `ns`.
async fn claimed_at(admin: &Client, ns: &str, member: &str) -> jiff::Timestamp {
    let vm = vms(admin, ns).get(member).await.unwrap();
    let at = vm.annotations().get(CLAIMED_AT_ANNOTATION).cloned();
    at.as_deref()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{member}'s claimed-at {at:?}"))
}

#[tokio::test]
async fn a_holder_changed_by_hand_moves_the_grant_and_ends_every_stream_of_the_old_holder() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("handedit").await;
    desktop_member(&ns, "he", "he-1", true).await;
    claim("alice", &ns, "he").await;
    wait_granted(&ns, "he-1", "alice", FOLLOW).await;
    wait_power(&ns, "he-1", "Running").await;
    let alices_claim = claimed_at(&admin, &ns, "he-1").await;
    let alices_vmi = vmi_uid(&admin, &ns, "he-1").await;
    assert!(alices_vmi.is_some(), "he-1 runs without a VMI");

    // alice's open streams: her console, a port-forward to the guest's sshd, a USB redirection.
    let mut open = vec![("vnc", console("alice", &ns, "he-1").await)];
    for sub in [Subresource::PortForward { port: 22 }, Subresource::UsbRedir] {
        let stream = stream::open(&streams_as("alice").await, &ns, "he-1", sub)
            .await
            .unwrap_or_else(|e| panic!("alice's {} on he-1: {e}", sub.name()));
        open.push((sub.name(), stream));
    }
    // claimed-at is written to the second: the hand-over lands in a later one.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let edited = Instant::now();
    let edited_at = jiff::Timestamp::now();
    set_lease_spec(
        &admin,
        &ns,
        &lease_name("he-1"),
        json!({ "holderIdentity": "bob" }),
    )
    .await;
    wait_granted(&ns, "he-1", "bob", FOLLOW).await;
    let deadline = edited + FOLLOW;
    for (name, stream) in &mut open {
        assert!(
            ends_by(stream, deadline).await,
            "alice's open {name} stream still open 5 s after her desktop was handed to bob"
        );
    }
    // RBAC follows the binding a moment later (its authorizer reads through a cache).
    loop {
        let mut codes = Vec::new();
        for sub in STREAMS {
            codes.push(stream_code("alice", &ns, "he-1", sub).await);
        }
        if codes.iter().all(|c| *c == 403) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "5 s after the hand edit alice's vnc, portforward, usbredir answer {codes:?}, not 403"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "hand edit → grant moved, alice's streams ended: {:.1?}",
        edited.elapsed()
    );

    // Restarted: a new VMI, Running again, for bob.
    eventually(
        "he-1 running again on a new VMI",
        Duration::from_secs(20),
        || async {
            let uid = vmi_uid(&admin, &ns, "he-1").await;
            (uid.is_some() && uid != alices_vmi).then_some(())
        },
    )
    .await;
    wait_power(&ns, "he-1", "Running").await;
    let vnc = Subresource::Vnc {
        preserve_session: false,
    };
    eventually("bob's vnc on he-1", FOLLOW, || async {
        (stream_code("bob", &ns, "he-1", vnc).await == 101).then_some(())
    })
    .await;
    assert_grant_shape(&ns, "he", "he-1", "bob").await;
    let event = wait_event(&ns, "he-1", "HolderChanged", "bob", FOLLOW).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("restarted he-1 so that alice's open streams end"),
        "{note}"
    );
    let bobs_claim = claimed_at(&admin, &ns, "he-1").await;
    assert!(
        bobs_claim > alices_claim
            && bobs_claim >= jiff::Timestamp::from_second(edited_at.as_second() - 1).unwrap(),
        "claimed-at {bobs_claim} is not the hand-over's time (alice's {alices_claim}, edited at \
         {edited_at})"
    );
}
