//! Reclaim: a claim whose Lease ended more than the skew margin ago (judged by the API
//! server's clock) is taken back by the broker — Lease, grant and claim marks gone, VM stopped,
//! an Event `Reclaimed` — so an ordinary user's next claim finds the member free.

use std::time::Duration;

use corral_tests::{client_as, desktop_member, leases, namespace, set_lease_spec, vms, wait_power};
use kube::ResourceExt;
use serde_json::json;
use vdi_core::claim::ClaimOptions;
use vdi_core::names::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, lease_name};

use crate::{
    CONVERGE, claim, claim_with, replicas_steady, wait_event, wait_granted, wait_no_grant,
};

/// The broker's default margin past a Lease's end before it reclaims (common.md:
/// `--reclaim-margin-seconds`, default 30).
const MARGIN: Duration = Duration::from_secs(30);

/// Waits until `member`'s claim is reclaimed within `within`: its Lease gone, no grant, no
/// claim marks on the VM, the VM stopped, an Event `Reclaimed` naming `holder`.
async fn assert_reclaimed(ns: &str, member: &str, holder: &str, within: Duration) {
    let admin = client_as("admin").await;
    let leases = leases(&admin, ns);
    corral_tests::eventually(&format!("{member}'s Lease reclaimed"), within, || async {
        leases
            .get_opt(&lease_name(member))
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    wait_no_grant(ns, member, CONVERGE).await;
    wait_event(ns, member, "Reclaimed", holder, CONVERGE).await;
    wait_power(ns, member, "Stopped").await;
    let vm = vms(&admin, ns).get(member).await.unwrap();
    assert!(
        !vm.labels().contains_key(ASSIGNED_TO_LABEL)
            && !vm.annotations().contains_key(CLAIMED_AT_ANNOTATION),
        "the reclaimed member keeps its claim marks: {:?} {:?}",
        vm.labels(),
        vm.annotations()
    );
}

#[tokio::test]
async fn a_claim_stale_for_hours_is_reclaimed_and_bob_then_claims_it() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("reclaim").await;
    desktop_member(&ns, "rc", "rc-1", true).await;
    claim("alice", &ns, "rc").await;
    wait_granted(&ns, "rc-1", "alice", CONVERGE).await;
    wait_power(&ns, "rc-1", "Running").await;

    // As if alice's client had stopped renewing two hours ago, a one-minute claim.
    let renewed = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(2);
    set_lease_spec(
        &admin,
        &ns,
        &lease_name("rc-1"),
        json!({ "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
                "leaseDurationSeconds": 60 }),
    )
    .await;
    assert_reclaimed(&ns, "rc-1", "alice", Duration::from_secs(15)).await;

    // bob, an ordinary user, gets it (with the guard, only an administrator could recover a
    // stale claim without a broker).
    assert_eq!(claim("bob", &ns, "rc").await.member, "rc-1");
    wait_granted(&ns, "rc-1", "bob", CONVERGE).await;
}

#[tokio::test]
async fn a_short_claim_is_reclaimed_after_its_end_and_the_margin_not_before() {
    let _steady = replicas_steady().await;
    let ns = namespace("expire").await;
    desktop_member(&ns, "ex", "ex-1", true).await;
    let lease = Duration::from_secs(10);
    let claimed = claim_with(
        "alice",
        &ns,
        "ex",
        &ClaimOptions {
            lease_seconds: lease.as_secs() as i64,
            ..ClaimOptions::default()
        },
    )
    .await;
    let ends = claimed.lease_expires_at;
    wait_granted(&ns, "ex-1", "alice", CONVERGE).await;
    // Still alice's well before its end plus the margin (nobody renews it): 15 s before, so
    // that a late look on a loaded machine does not land past it.
    let before = jiff::SignedDuration::from_secs(15);
    let early = ends + jiff::SignedDuration::try_from(MARGIN).unwrap() - before;
    let wait = early.duration_since(jiff::Timestamp::now());
    tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
    let (_, binding) = crate::grant(&ns, "ex-1").await;
    assert!(
        binding.is_some(),
        "alice's claim reclaimed before its end plus the margin ({ends} + {MARGIN:?})"
    );
    // Its end plus the margin is 15 s away: room for a loaded machine after that.
    assert_reclaimed(&ns, "ex-1", "alice", Duration::from_secs(40)).await;
    assert_eq!(claim("bob", &ns, "ex").await.member, "ex-1");
}
