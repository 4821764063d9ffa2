//! A claim Lease edited by hand: an administrator hands alice's desktop to bob by changing the
//! Lease's holder, and the grant (binding, label, granted-to) follows within 5 s, cutting
//! alice's open console while the desktop keeps running for bob.

use std::time::Duration;

use corral_tests::{client_as, desktop_member, namespace, set_lease_spec, wait_power};
use serde_json::json;
use tokio::time::Instant;
use vdi_core::labels::lease_name;
use vdi_core::stream::Subresource;

use crate::{
    FOLLOW, assert_grant_shape, claim, console, ends_by, replicas_steady, stream_code, wait_event,
    wait_granted,
};

#[tokio::test]
async fn a_holder_changed_by_hand_moves_the_grant_within_5_s() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("handedit").await;
    desktop_member(&ns, "he", "he-1", true).await;
    claim("alice", &ns, "he").await;
    wait_granted(&ns, "he-1", "alice", FOLLOW).await;
    wait_power(&ns, "he-1", "Running").await;
    // alice's open console: the broker cuts it when access moves (the VM keeps running, so
    // nothing else would end it).
    let mut alices = console("alice", &ns, "he-1").await;

    let edited = Instant::now();
    set_lease_spec(
        &admin,
        &ns,
        &lease_name("he-1"),
        json!({ "holderIdentity": "bob" }),
    )
    .await;
    wait_granted(&ns, "he-1", "bob", FOLLOW).await;
    let vnc = Subresource::Vnc {
        preserve_session: false,
    };
    // RBAC follows the binding a moment later (its authorizer reads through a cache): both
    // answers are asked for within the same 5 s.
    let deadline = edited + FOLLOW;
    // First the cut (bob's take-over below would end alice's console by itself).
    assert!(
        ends_by(&mut alices, deadline).await,
        "alice's open console still open 5 s after her desktop was handed to bob"
    );
    loop {
        let (alice, bob) = (
            stream_code("alice", &ns, "he-1", vnc).await,
            stream_code("bob", &ns, "he-1", vnc).await,
        );
        if (alice, bob) == (403, 101) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "5 s after the hand edit: alice's vnc {alice} (not 403), bob's {bob} (not 101)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("hand edit → grant moved: {:.1?}", edited.elapsed());
    wait_power(&ns, "he-1", "Running").await;
    assert_grant_shape(&ns, "he", "he-1", "bob").await;
    wait_event(&ns, "he-1", "HolderChanged", "bob", FOLLOW).await;
}
