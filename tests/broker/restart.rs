//! Restart reconciliation: both replicas stopped, 100 claims and releases happen (users' own
//! claims and releases, an administrator's force releases and assignments), the replicas start
//! again — and the broker ends with exactly the grants of the claims active now: one per claim,
//! bound to its holder, none left from a released one, whose VM is stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_tests::{
    client_as, eventually, leases, namespace, plant_lease, pool_vms, vms, wait_power,
};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DeleteParams;
use sandbox::broker::Signal;
use serde_json::json;
use tokio::time::Instant;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, GRANTED_TO_ANNOTATION, MEMBER_LABEL, POOL_LABEL,
    grant_name, lease_name,
};

use crate::{CONVERGE, assert_grant_shape, claim, managed_grants, replicas_mine, wait_granted};

/// Pools of the test, each of [`MEMBERS`] members.
const POOLS: usize = 10;
const MEMBERS: usize = 4;

/// One change made while no replica runs, as the cluster's API takes it: a claim is the Lease
/// alone (created by its holder, or by the administrator for someone), a release deletes it
/// (by its holder, or an administrator's force release).
#[derive(Clone, Debug)]
enum Op {
    /// `by` creates member `m`'s Lease naming `holder`.
    Claim {
        by: &'static str,
        holder: &'static str,
        m: usize,
    },
    /// `by` deletes member `m`'s Lease.
    Release { by: &'static str, m: usize },
}

/// The ten changes made in pool `p` while the broker is down, by member number (1: the one alice
/// holds, granted and running, before). Even pools end with bob on 1 (alice's member handed on through a release),
/// dave on 3 (assigned by the administrator) and carol on 4; odd pools with alice on 4 alone
/// (member 1, which ran for alice, released by force).
fn changes(p: usize) -> [Op; 10] {
    use Op::{Claim, Release};
    let own = |who: &'static str, m| Claim {
        by: who,
        holder: who,
        m,
    };
    if p.is_multiple_of(2) {
        [
            Release { by: "alice", m: 1 },
            own("bob", 2),
            own("carol", 3),
            Release { by: "bob", m: 2 },
            own("alice", 2),
            Release { by: "admin", m: 3 },
            own("carol", 4),
            Claim {
                by: "admin",
                holder: "dave",
                m: 3,
            },
            Release { by: "admin", m: 2 },
            own("bob", 1),
        ]
    } else {
        [
            Release { by: "admin", m: 1 },
            own("bob", 1),
            own("alice", 2),
            Release { by: "alice", m: 2 },
            own("carol", 2),
            Release { by: "carol", m: 2 },
            own("carol", 3),
            Release { by: "bob", m: 1 },
            own("alice", 4),
            Release { by: "admin", m: 3 },
        ]
    }
}

#[tokio::test]
async fn a_broker_restarted_after_100_missed_claims_and_releases_has_exactly_the_right_grants() {
    let _mine = replicas_mine().await;
    let admin = client_as("admin").await;
    let ns = namespace("restart").await;
    for p in 0..POOLS {
        pool_vms(&admin, &ns, &format!("r{p}"), MEMBERS)
            .await
            .unwrap();
    }
    // Before: alice holds a member of every pool, granted and running: member 1 of the test's
    // order (the claim picks it, in an order spread by identity), the others after it.
    let alices: BTreeMap<usize, String> = futures::stream::iter(0..POOLS)
        .map(|p| {
            let ns = ns.clone();
            async move {
                let member = claim("alice", &ns, &format!("r{p}")).await.member;
                wait_granted(&ns, &member, "alice", CONVERGE).await;
                (p, member)
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let order: Vec<Vec<String>> = (0..POOLS)
        .map(|p| {
            let first = &alices[&p];
            std::iter::once(first.clone())
                .chain(
                    (1..=MEMBERS)
                        .map(|i| format!("r{p}-{i}"))
                        .filter(|m| m != first),
                )
                .collect()
        })
        .collect();
    let member = |p: usize, m: usize| order[p][m - 1].clone();
    for p in 0..POOLS {
        wait_power(&ns, &member(p, 1), "Running").await;
    }

    let brokers = corral_tests::brokers();
    brokers.signal_all(Signal::Kill).unwrap();
    eventually("both replicas gone", Duration::from_secs(10), || async {
        brokers
            .replicas()
            .iter()
            .all(|r| r.pid.is_none())
            .then_some(())
    })
    .await;

    // The 100 changes, as the API takes them, and what they leave: member → holder.
    let mut holders: BTreeMap<String, &str> = (0..POOLS).map(|p| (member(p, 1), "alice")).collect();
    let mut count = 0;
    for p in 0..POOLS {
        for op in changes(p) {
            match op {
                Op::Claim { by, holder, m } => {
                    let now = corral_tests::now_micro();
                    plant_lease(
                        &client_as(by).await,
                        &ns,
                        &lease_name(&member(p, m)),
                        json!({ POOL_LABEL: format!("r{p}"), MEMBER_LABEL: member(p, m) }),
                        json!({ "holderIdentity": holder, "acquireTime": now, "renewTime": now,
                                "leaseDurationSeconds": 3600 }),
                    )
                    .await;
                    assert!(holders.insert(member(p, m), holder).is_none());
                }
                Op::Release { by, m } => {
                    leases(&client_as(by).await, &ns)
                        .delete(&lease_name(&member(p, m)), &DeleteParams::default())
                        .await
                        .unwrap_or_else(|e| panic!("{by} releases {}: {e}", member(p, m)));
                    assert!(holders.remove(&member(p, m)).is_some());
                }
            }
            count += 1;
        }
    }
    assert_eq!(count, 100);

    let restarted = Instant::now();
    for i in 0..brokers.replicas().len() {
        brokers.start(i).await.unwrap();
    }
    // Converged: the managed grants are exactly the active claims', each for its holder.
    let want: std::collections::BTreeSet<String> = holders.keys().map(|m| grant_name(m)).collect();
    let converged = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (roles, bindings) = managed_grants(&ns).await;
            if roles == want && bindings == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let (roles, bindings) = managed_grants(&ns).await;
    assert!(
        converged.is_ok(),
        "60 s after the restart the grants are not the active claims'.\n want {want:?}\n roles {roles:?}\n bindings {bindings:?}"
    );
    println!(
        "restart → grants of the {} active claims exactly: {:.1?}",
        holders.len(),
        restarted.elapsed()
    );

    let api = vms(&admin, &ns);
    for (p, members) in order.iter().enumerate() {
        let pool = format!("r{p}");
        for name in members {
            let name = name.clone();
            match holders.get(&name) {
                Some(holder) => {
                    wait_granted(&ns, &name, holder, CONVERGE).await;
                    assert_grant_shape(&ns, &pool, &name, holder).await;
                    wait_power(&ns, &name, "Running").await;
                }
                None => {
                    // Released: no claim marks (the wait's own condition), and stopped.
                    let what = format!("{name}'s claim marks cleared");
                    eventually(&what, CONVERGE, || async {
                        let vm = api.get(&name).await.ok()?;
                        let marked = vm.labels().contains_key(ASSIGNED_TO_LABEL)
                            || vm.annotations().contains_key(CLAIMED_AT_ANNOTATION)
                            || vm.annotations().contains_key(GRANTED_TO_ANNOTATION);
                        (!marked).then_some(vm)
                    })
                    .await;
                    wait_power(&ns, &name, "Stopped").await;
                }
            }
        }
    }
}
