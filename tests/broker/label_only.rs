//! The `corral vdi` Go CLI's label-only writer on a cluster with a broker: it writes the
//! assigned-to label alone (a merge patch, no Lease), which the guard lets only administrators
//! do. On a free member the broker adopts it as a claim (a Lease for the labelled user within the
//! pool's entitlements, then the grant); its removal from a Lease claim is a release. On
//! someone's active member it is a conflict: no grant to either.

use std::time::Duration;

use corral_tests::{client_as, desktop_member, leases, member_state, namespace, vms, wait_power};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use vdi_core::broker::claimants::Claimant;
use vdi_core::entitlement::{self, Who};
use vdi_core::names::{
    ASSIGNED_BY_ANNOTATION, ASSIGNED_TO_LABEL, BROKER_REASON_ANNOTATION, BROKER_USER,
    DEFAULT_LEASE_SECONDS, POOL_LABEL, lease_name,
};
use vdi_core::state::MemberState;
use vdi_core::stream::Subresource;

use crate::entitlements::closed_pool;
use crate::{
    CONVERGE, FOLLOW, claim, grant, power_code, replicas_steady, stream_code, vm_version,
    wait_event, wait_granted, wait_no_grant,
};

/// The Go CLI's assign (`user` `Some`) or unassign (`None`): a merge patch of the assigned-to
/// label alone, as admin.
async fn label_only(ns: &str, member: &str, user: Option<&str>) {
    vms(&client_as("admin").await, ns)
        .patch(
            member,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: user } } })),
        )
        .await
        .unwrap();
}

const VNC: Subresource = Subresource::Vnc {
    preserve_session: false,
};

/// What the issue asks: within 15 s of the label, the labelled user holds a Lease claim and
/// reaches the console.
const ADOPTED: Duration = Duration::from_secs(15);

#[tokio::test]
async fn an_administrators_label_on_a_free_member_is_a_claim_and_its_removal_a_release() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("legacy").await;
    desktop_member(&ns, "lo", "lo-1", true).await;
    label_only(&ns, "lo-1", Some("carol")).await;

    wait_granted(&ns, "lo-1", "carol", ADOPTED).await;
    let lease = leases(&admin, &ns).get(&lease_name("lo-1")).await.unwrap();
    assert_eq!(lease.data["spec"]["holderIdentity"], json!("carol"));
    assert_eq!(
        lease.data["spec"]["leaseDurationSeconds"],
        json!(DEFAULT_LEASE_SECONDS)
    );
    assert_eq!(
        lease.labels().get(POOL_LABEL).map(String::as_str),
        Some("lo")
    );
    assert_eq!(
        lease
            .annotations()
            .get(ASSIGNED_BY_ANNOTATION)
            .map(String::as_str),
        Some(BROKER_USER),
        "the adopted claim says who wrote it"
    );
    let claimed = wait_event(&ns, "lo-1", "Claimed", "carol", FOLLOW).await;
    let note = claimed.note.unwrap_or_default();
    assert!(note.contains("label-only assignment"), "{note}");
    corral_tests::eventually(
        "carol's console through the adopted claim",
        ADOPTED,
        || async { (stream_code("carol", &ns, "lo-1", VNC).await == 101).then_some(()) },
    )
    .await;
    assert_eq!(stream_code("bob", &ns, "lo-1", VNC).await, 403);
    assert_eq!(
        member_state(&admin, &ns, "lo-1").await,
        MemberState::Assigned
    );
    wait_power(&ns, "lo-1", "Running").await;

    // The Go CLI's unassign: the label removed from carol's Lease claim releases it.
    label_only(&ns, "lo-1", None).await;
    wait_no_grant(&ns, "lo-1", CONVERGE).await;
    let released = wait_event(&ns, "lo-1", "Released", "carol", FOLLOW).await;
    let note = released.note.unwrap_or_default();
    assert!(note.contains("assigned-to label was removed"), "{note}");
    assert!(
        leases(&admin, &ns)
            .get_opt(&lease_name("lo-1"))
            .await
            .unwrap()
            .is_none(),
        "carol's Lease outlived the label"
    );
    wait_power(&ns, "lo-1", "Stopped").await;
    assert_eq!(stream_code("carol", &ns, "lo-1", VNC).await, 403);
    assert_eq!(member_state(&admin, &ns, "lo-1").await, MemberState::Free);
}

#[tokio::test]
async fn a_label_for_someone_the_pool_is_not_for_is_no_claim_until_they_are_entitled() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = closed_pool("lentitle", "eng", 1).await;
    entitlement::entitle(
        &admin,
        &ns,
        "eng",
        &[Who::Claimant(Claimant::Group("engineering".into()))],
        "admin",
    )
    .await
    .unwrap();
    label_only(&ns, "eng-1", Some("carol")).await;

    let refused = wait_event(&ns, "eng-1", "NotGranted", "carol", CONVERGE).await;
    let reason = vms(&admin, &ns)
        .get("eng-1")
        .await
        .unwrap()
        .annotations()
        .get(BROKER_REASON_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    assert!(
        reason.contains("labelled for carol, whom pool \"eng\" is not for")
            && reason.contains(&format!("corral-vdi pool entitle eng --user carol -n {ns}")),
        "{reason}"
    );
    assert!(refused.note.unwrap_or_default().contains(&reason));
    // Nothing else moved: no Lease, no grant, the label left as the administrator wrote it.
    let after = vm_version(&admin, &ns, "eng-1").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        leases(&admin, &ns)
            .get_opt(&lease_name("eng-1"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(grant(&ns, "eng-1").await, (None, None), "a grant for carol");
    assert_eq!(vm_version(&admin, &ns, "eng-1").await, after);
    assert_eq!(
        member_state(&admin, &ns, "eng-1").await,
        MemberState::AssignedLegacy
    );

    // Entitled, the label is adopted at the broker's next look (30 s at most).
    entitlement::entitle(
        &admin,
        &ns,
        "eng",
        &[Who::Claimant(Claimant::User("carol".into()))],
        "admin",
    )
    .await
    .unwrap();
    wait_granted(&ns, "eng-1", "carol", CONVERGE + ADOPTED).await;
}

#[tokio::test]
async fn a_label_naming_someone_else_than_the_holder_is_a_conflict_with_no_grant() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("lconflict").await;
    desktop_member(&ns, "cf", "cf-1", true).await;
    claim("alice", &ns, "cf").await;
    wait_granted(&ns, "cf-1", "alice", FOLLOW).await;
    let lease_before = leases(&admin, &ns)
        .get(&lease_name("cf-1"))
        .await
        .unwrap()
        .resource_version();

    label_only(&ns, "cf-1", Some("bob")).await;
    wait_no_grant(&ns, "cf-1", FOLLOW).await;
    assert_eq!(
        member_state(&client_as("admin").await, &ns, "cf-1").await,
        MemberState::Conflict
    );
    let vm = vms(&admin, &ns).get("cf-1").await.unwrap();
    // Both sides and both fixes, the one that keeps the label's user first (hostile M4: a
    // hint naming only `unassign --force` had the administrator evict the label's user).
    let reason = vm
        .annotations()
        .get(BROKER_REASON_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let keep = format!(
        "to keep it bob's, delete the Lease (`kubectl delete lease corral-vdi-cf-1 -n {ns}`)"
    );
    let free = format!("to free the member, `corral-vdi unassign cf-1 -n {ns} --force`");
    assert!(
        reason.contains("labelled for bob") && reason.contains("held by alice"),
        "{reason}"
    );
    assert!(
        reason
            .find(&keep)
            .is_some_and(|k| reason.find(&free).is_some_and(|f| k < f)),
        "the conflicting member's reason lacks both fixes: {reason}"
    );
    assert_eq!(
        vm.labels().get(ASSIGNED_TO_LABEL).map(String::as_str),
        Some("bob"),
        "the broker rewrote a label it did not write"
    );
    wait_event(&ns, "cf-1", "Conflict", "alice", FOLLOW).await;
    // Both refused (RBAC follows the deleted binding a moment later), and nothing moved.
    let vm_before = vm_version(&admin, &ns, "cf-1").await;
    corral_tests::eventually("alice refused on the conflict", FOLLOW, || async {
        (stream_code("alice", &ns, "cf-1", VNC).await == 403).then_some(())
    })
    .await;
    assert_eq!(stream_code("bob", &ns, "cf-1", VNC).await, 403);
    for who in ["alice", "bob"] {
        assert_eq!(
            power_code(who, &ns, "cf-1", "stop", false).await,
            403,
            "{who}'s stop"
        );
    }
    assert_eq!(
        vm_version(&admin, &ns, "cf-1").await,
        vm_before,
        "a refusal moved the VM"
    );
    // Not the broker's to settle: alice's Lease stays as it was.
    let lease_after = leases(&admin, &ns)
        .get(&lease_name("cf-1"))
        .await
        .unwrap()
        .resource_version();
    assert_eq!(lease_after, lease_before, "the broker moved alice's Lease");
}
