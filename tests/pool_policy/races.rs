//! 32 claims racing a shrink (issue 26): the broker takes a member's Lease before deleting it,
//! as a claim would, so each member ends either claimed or deleted, never both, and a claim
//! that lost leaves nothing behind.

use std::collections::{BTreeMap, BTreeSet};

use corral_tests::{client_as, eventually};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;
use vdi_core::names::{MEMBER_LABEL, POOL_LABEL};

use crate::{Member, SETTLE, Seen, managed_pool, members, spec, try_claim, wait_members};

/// Members of the pool before the race.
const SIZE: i32 = 16;
/// Claims racing the shrink.
const CLAIMS: usize = 32;
/// The size the pool shrinks to.
const SHRUNK: usize = 1;

#[tokio::test]
async fn thirty_two_claims_racing_a_shrink_each_member_deleted_or_claimed_never_both() {
    let ns = managed_pool("race", "rc", spec(SIZE)).await;
    let before = members(&ns, "rc").await;
    let seen = Seen::start(&ns, "rc").await;

    let users = ["alice", "bob", "carol"];
    let claims = (0..CLAIMS).map(|i| {
        let ns = ns.clone();
        async move {
            let user = users[i % users.len()];
            (user, try_claim(user, &ns, "rc").await)
        }
    });
    let shrink = corral_tests::set_pool_spec(&ns, "rc", json!({ "size": SHRUNK }));
    let (results, ()) = futures::join!(futures::future::join_all(claims), shrink);

    let mut won: BTreeMap<String, &str> = BTreeMap::new();
    for (user, result) in &results {
        match result {
            Ok(claimed) => {
                if let Some(other) = won.insert(claimed.member.clone(), user) {
                    panic!("{} was won by {other} and by {user}", claimed.member);
                }
            }
            Err(e) => eprintln!("{user}'s claim lost: {e}"),
        }
    }
    // Left: the members within the size, and every claim won (above the size they stay until
    // released).
    let want: BTreeSet<String> = (1..=SHRUNK)
        .map(|i| format!("rc-{i}"))
        .chain(won.keys().cloned())
        .collect();
    let now = wait_members(&ns, "rc", "the shrink done", |m| {
        m.values().all(Member::settled) && m.keys().cloned().collect::<BTreeSet<_>>() == want
    })
    .await;

    let deleted: BTreeSet<String> = seen
        .deleted(&now)
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    for (name, original) in &before {
        let claimed = won.contains_key(name);
        let gone = deleted.contains(name) || now.get(name).is_none_or(|m| m.uid != original.uid);
        assert!(
            !(claimed && gone),
            "{name} was claimed by {} and deleted",
            won[name]
        );
        if claimed {
            let member = &now[name];
            assert_eq!(
                member.holder.as_deref(),
                Some(won[name]),
                "{name}: the Lease names its winner"
            );
        }
    }
    eprintln!(
        "{} claims won, {} members deleted",
        won.len(),
        deleted.len()
    );

    // A lost claim leaves no Lease: every Lease of the pool is a winner's, on a member that
    // exists (the broker's own, taken for a removal, go with their members).
    let leases: Api<Lease> = Api::namespaced(client_as("admin").await, &ns);
    let selector = ListParams::default().labels(&format!("{POOL_LABEL}=rc"));
    eventually("only the winners' Leases", SETTLE, || async {
        let left: Vec<(String, Option<String>)> = leases
            .list(&selector)
            .await
            .ok()?
            .into_iter()
            .map(|l| {
                (
                    l.labels().get(MEMBER_LABEL).cloned().unwrap_or_default(),
                    l.spec.and_then(|s| s.holder_identity),
                )
            })
            .collect();
        left.iter()
            .all(|(member, holder)| {
                won.get(member).map(|w| w.to_string()) == *holder && now.contains_key(member)
            })
            .then_some(())
    })
    .await;
}
