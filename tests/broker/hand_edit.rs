//! A claim Lease edited by hand: an administrator hands alice's desktop to bob by changing the
//! Lease's holder, and the grant (binding, label, granted-to) follows within 5 s.

use std::time::Duration;

use corral_tests::{client_as, desktop_member, namespace, set_lease_spec};
use serde_json::json;
use tokio::time::Instant;
use vdi_core::labels::lease_name;
use vdi_core::stream::Subresource;

use crate::{
    FOLLOW, assert_grant_shape, claim, replicas_steady, stream_code, wait_event, wait_granted,
};

#[tokio::test]
async fn a_holder_changed_by_hand_moves_the_grant_within_5_s() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("handedit").await;
    desktop_member(&ns, "he", "he-1", true).await;
    claim("alice", &ns, "he").await;
    wait_granted(&ns, "he-1", "alice", FOLLOW).await;

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
    assert_grant_shape(&ns, "he", "he-1", "bob").await;
    wait_event(&ns, "he-1", "HolderChanged", "bob", FOLLOW).await;
}
