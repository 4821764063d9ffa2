//! Failover: kill -9 of the leading replica; the other one leads within the leader Lease's
//! duration, and a claim made while nobody leads is granted once it does (not before).

use std::time::Duration;

use corral_tests::{client_as, desktop_member, leases, namespace};
use sandbox::broker::Signal;
use tokio::time::Instant;
use vdi_core::names::lease_name;

use crate::{CONVERGE, claim, grant, leader, replicas_mine, wait_granted};

/// What the other replica may take beyond the Lease's duration to notice it ended and write
/// itself in (its polling, a request's round trip), on a loaded machine.
const SLACK: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_other_replica_leads_within_the_lease_duration_and_grants_what_waited() {
    let _mine = replicas_mine().await;
    let admin = client_as("admin").await;
    let ns = namespace("failover").await;
    desktop_member(&ns, "fo", "fo-1", true).await;
    let brokers = corral_tests::brokers();

    let (Some(old), duration) = leader(&admin).await else {
        panic!("no broker leads before the test");
    };
    let replicas = brokers.replicas();
    let index = replicas
        .iter()
        .position(|r| r.identity == old)
        .unwrap_or_else(|| panic!("the leader {old} is none of the replicas {replicas:?}"));
    brokers.kill(index, Signal::Kill).unwrap();
    let killed = Instant::now();

    // A claim made now, while the dead leader still holds the leader Lease.
    let claim_ns = ns.clone();
    let claiming = tokio::spawn(async move { claim("alice", &claim_ns, "fo").await });
    let claim_leases = leases(&admin, &ns);
    let mut claim_seen = None;
    let mut granted_early = false;
    let limit = Duration::from_secs(u64::try_from(duration).unwrap()) + SLACK;
    let new = loop {
        if claim_seen.is_none()
            && claim_leases
                .get_opt(&lease_name("fo-1"))
                .await
                .unwrap()
                .is_some()
        {
            claim_seen = Some(killed.elapsed());
        }
        granted_early |= grant(&ns, "fo-1").await.1.is_some();
        match leader(&admin).await.0 {
            Some(holder) if holder != old => break holder,
            _ => {}
        }
        if killed.elapsed() > limit * 2 {
            break String::new();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let failover = killed.elapsed();
    let written = claim_seen.map_or("never".to_owned(), |d| format!("{d:.1?}"));
    println!(
        "failover: {failover:.1?} from kill -9 of {old} until {new} leads \
         (leaseDurationSeconds {duration}); the claim's Lease written {written} after the kill"
    );
    // The killed replica comes back as a follower before anything is asserted, so a failure
    // here leaves the other tests two replicas.
    brokers.start(index).await.unwrap();

    assert!(!new.is_empty(), "nobody led {:?} after the kill", limit * 2);
    assert!(
        failover < limit,
        "{new} led {failover:.1?} after the kill, not within the Lease's {duration} s (+{SLACK:?})"
    );
    let claim_seen =
        claim_seen.expect("the claim's Lease was not written before the new leader led");
    assert!(claim_seen < failover);
    // The leader gauge moved: 1 on the new leader, 0 on the killed one back as a follower.
    for (identity, want) in [(new.as_str(), 1.0), (old.as_str(), 0.0)] {
        corral_tests::eventually(
            &format!("{identity}'s leader gauge {want}"),
            CONVERGE,
            || async {
                let text = crate::metrics::scrape(identity).await?;
                (crate::metrics::sample(&text, "corral_vdi_leader") == Some(want)).then_some(())
            },
        )
        .await;
    }
    assert!(!granted_early, "the claim was granted while nobody led");
    let claimed = tokio::time::timeout(Duration::from_secs(30), claiming)
        .await
        .expect("the claim waiting for the broker ended within 30 s of the new leader")
        .unwrap();
    assert_eq!(claimed.member, "fo-1");
    wait_granted(&ns, "fo-1", "alice", CONVERGE).await;
}
