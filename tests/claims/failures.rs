//! Partial failures: a refused label patch keeps the Lease until it expires, a refused start
//! keeps the claim for the holder to retry, and an unschedulable desktop keeps its claim and
//! shows why.

use std::time::Duration;

use corral_tests::{actor_as, client_as, eventually, member_state, namespace};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use vdi_core::claim::{PowerAction, assign};
use vdi_core::error::ErrorKind;
use vdi_core::resources::VirtualMachine;
use vdi_core::state::MemberState;

use crate::{claim, holders, lasting, pool, refused, release, wait_power};

#[tokio::test]
async fn a_refused_label_patch_keeps_the_lease_until_expiry() {
    let ns = namespace("partial").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let carol = actor_as("carol").await; // may manage Leases, may not change VMs
    pool(&admin, &ns, "p", 1).await;
    // A 10 s Lease: long enough that it is still active while the checks below run on a loaded
    // machine, short enough to wait out.
    let err = assign(&carol, &ns, "p", "carol", &lasting(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Partial, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("carol holds the Lease on p-1") && text.contains("forbidden"),
        "{text}"
    );
    assert_eq!(
        holders(&admin, &ns, "p").await["p-1"],
        (Some("carol".into()), None)
    );
    assert_eq!(
        member_state(&admin, &ns, "p-1").await,
        MemberState::Claiming
    );
    // The holder's retry resumes the same member (and fails the same way); others cannot take it.
    let err = assign(&carol, &ns, "p", "carol", &lasting(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Partial);
    refused(claim(&actor_as("bob").await, &ns, "p", "bob").await);
    // After expiry an administrator recovers it.
    eventually("p-1's claim expired", Duration::from_secs(30), || async {
        (member_state(&admin, &ns, "p-1").await == MemberState::FreeStaleLease).then_some(())
    })
    .await;
    let r = release(&admin_actor, &ns, "p-1").await.unwrap();
    assert!(r.lease_released);
    assert_eq!(member_state(&admin, &ns, "p-1").await, MemberState::Free);
}

#[tokio::test]
async fn a_refused_start_keeps_the_claim_and_the_holder_can_retry() {
    let ns = namespace("nostart").await;
    let admin = client_as("admin").await;
    let alice = actor_as("alice").await;
    pool(&admin, &ns, "s", 1).await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let refuse = json!({ "metadata": { "annotations": {
        "sandbox.corral.dev/refuse-start": "VM needs manual recovery (emulated)" } } });
    vms.patch("s-1", &PatchParams::default(), &Patch::Merge(refuse))
        .await
        .unwrap();

    let err = claim(&alice, &ns, "s", "alice").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Partial);
    let text = err.to_string();
    assert!(
        text.contains("s-1 is assigned to alice") && text.contains("manual recovery"),
        "{text}"
    );
    // SPEC: a start failure leaves the label on, and the Lease held.
    assert_eq!(
        holders(&admin, &ns, "s").await["s-1"],
        (Some("alice".into()), Some("alice".into()))
    );
    refused(claim(&actor_as("bob").await, &ns, "s", "bob").await);

    let fixed =
        json!({ "metadata": { "annotations": { "sandbox.corral.dev/refuse-start": null } } });
    vms.patch("s-1", &PatchParams::default(), &Patch::Merge(fixed))
        .await
        .unwrap();
    let c = claim(&alice, &ns, "s", "alice").await.unwrap();
    assert!(c.resumed);
    assert_eq!(c.power, PowerAction::Started);
    wait_power(&admin, &ns, "s-1", "Running").await;
}

#[tokio::test]
async fn an_unschedulable_desktop_keeps_its_claim_and_shows_why() {
    let ns = namespace("unsched").await;
    let admin = client_as("admin").await;
    pool(&admin, &ns, "u", 1).await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let big =
        json!({ "metadata": { "annotations": { "sandbox.corral.dev/unschedulable": "true" } } });
    vms.patch("u-1", &PatchParams::default(), &Patch::Merge(big))
        .await
        .unwrap();
    let c = claim(&actor_as("admin").await, &ns, "u", "alice")
        .await
        .unwrap();
    assert_eq!(c.power, PowerAction::Started);
    wait_power(&admin, &ns, "u-1", "ErrorUnschedulable").await;
    assert_eq!(
        member_state(&admin, &ns, "u-1").await,
        MemberState::Assigned
    );
}
