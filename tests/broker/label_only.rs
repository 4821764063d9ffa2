//! The `corral vdi` Go CLI's label-only writer on a cluster with a broker: it writes the
//! assigned-to label alone (a merge patch, no Lease). On a free member that is a legacy
//! assignment the broker leaves alone; on someone's active member it is a conflict: no grant
//! to either.

use std::time::Duration;

use corral_tests::{client_as, desktop_member, leases, member_state, namespace, vms};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, BROKER_REASON_ANNOTATION, GRANTED_TO_ANNOTATION, lease_name,
};
use vdi_core::state::MemberState;
use vdi_core::stream::Subresource;

use crate::{
    FOLLOW, claim, grant, power_code, replicas_steady, stream_code, vm_version, wait_event,
    wait_granted, wait_no_grant,
};

/// The Go CLI's assign: a merge patch of the assigned-to label alone, as admin.
async fn label_only(ns: &str, member: &str, user: &str) {
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

#[tokio::test]
async fn a_label_on_a_free_member_is_legacy_and_gets_no_grant() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("legacy").await;
    desktop_member(&ns, "lo", "lo-1", true).await;
    desktop_member(&ns, "ctl", "ctl-1", true).await;
    label_only(&ns, "lo-1", "carol").await;
    let after_label = vm_version(&admin, &ns, "lo-1").await;
    // A claim made after the label, in the same namespace, granted: the broker has been
    // through this namespace since the label was written.
    claim("alice", &ns, "ctl").await;
    wait_granted(&ns, "ctl-1", "alice", FOLLOW).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    assert_eq!(
        grant(&ns, "lo-1").await,
        (None, None),
        "a grant for a label"
    );
    assert_eq!(
        vm_version(&admin, &ns, "lo-1").await,
        after_label,
        "the broker wrote to a label-only member"
    );
    let vm = vms(&admin, &ns).get("lo-1").await.unwrap();
    assert!(!vm.annotations().contains_key(GRANTED_TO_ANNOTATION));
    assert_eq!(
        vm.labels().get(ASSIGNED_TO_LABEL).map(String::as_str),
        Some("carol")
    );
    assert_eq!(
        member_state(&client_as("admin").await, &ns, "lo-1").await,
        MemberState::AssignedLegacy
    );
    assert_eq!(stream_code("carol", &ns, "lo-1", VNC).await, 403);
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

    label_only(&ns, "cf-1", "bob").await;
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
