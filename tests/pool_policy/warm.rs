//! The warm buffer (issue 26, "Warm 2: after 5 quick claims, 2 free members Running again"):
//! the broker keeps `warm` free members started, within `size`, and refills the buffer after a
//! burst of claims as soon as members can start.

use std::collections::BTreeMap;
use std::time::Instant;

use corral_tests::{client_as, eventually};
use vdi_core::policy::DesktopPoolSpec;

use crate::{FOLLOW, Member, claim, desktop_pools, managed_pool, spec, wait_members};

/// Free members running.
fn warm(members: &BTreeMap<String, Member>) -> usize {
    members
        .values()
        .filter(|m| m.free() && m.power == "Running")
        .count()
}

#[tokio::test]
async fn warm_2_is_back_to_2_running_free_members_after_5_quick_claims() {
    let ns = managed_pool(
        "warm",
        "wm",
        DesktopPoolSpec {
            warm: Some(2),
            ..spec(8)
        },
    )
    .await;
    let settled = |m: &BTreeMap<String, Member>| {
        m.len() == 8 && m.values().all(Member::settled) && warm(m) == 2
    };
    let before = wait_members(&ns, "wm", "2 warm members", settled).await;
    let stopped = before.values().filter(|m| m.power == "Stopped").count();
    assert_eq!(stopped, 6, "only the warm buffer runs: {before:#?}");

    let burst = Instant::now();
    let users = ["alice", "bob", "carol", "alice", "bob"];
    let claims = users.iter().map(|user| claim(user, &ns, "wm"));
    let claimed = futures::future::join_all(claims).await;
    eprintln!("5 claims granted in {:?}", burst.elapsed());

    let after = wait_members(&ns, "wm", "2 warm members again", |m| {
        let running_claims = claimed
            .iter()
            .all(|c| m.get(&c.member).is_some_and(|m| m.power == "Running"));
        running_claims && m.len() == 8 && m.values().all(Member::settled) && warm(m) == 2
    })
    .await;
    eprintln!("warm buffer refilled {:?} after the burst", burst.elapsed());
    // Within size: of the 3 free members, 2 run and 1 waits stopped.
    let free_stopped = after
        .values()
        .filter(|m| m.free() && m.power == "Stopped")
        .count();
    assert_eq!(free_stopped, 1, "{after:#?}");

    // The pool's status says the same.
    let pools = desktop_pools(&client_as("admin").await, &ns);
    eventually(
        "wm's status: 8 members, 5 claimed, 3 free, 2 warm",
        FOLLOW,
        || async {
            let status = pools.get("wm").await.ok()?.status?;
            ((status.members, status.claimed, status.free, status.warm) == (8, 5, 3, 2))
                .then_some(())
        },
    )
    .await;
}
