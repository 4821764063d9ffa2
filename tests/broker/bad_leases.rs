//! Claim Leases that would defeat the broker (hostile findings H2, M3, L5), planted as an
//! administrator (the guard refuses them from ordinary users): a held Lease without renewTime,
//! or with a renewTime far ahead of the API server's clock, is reclaimed at once, never granted;
//! a Lease a finalizer keeps deleting is reclaimed once, with one Event, and the member names
//! the finalizer; a granted claim edited unreadable loses its grant with one `UnreadableClaim`
//! Event and never a `Released` that did not happen.

use std::time::Duration;

use corral_tests::{
    client_as, desktop_member, eventually, leases, namespace, plant_lease, set_lease_spec, vms,
    wait_power,
};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use vdi_core::names::{
    BROKER_NAME, BROKER_REASON_ANNOTATION, GRANTED_TO_ANNOTATION, MEMBER_LABEL, POOL_LABEL,
    lease_name,
};

use crate::{CONVERGE, claim, grant, replicas_steady, wait_event, wait_granted, wait_no_grant};

/// The broker's Events with `reason` on `member` in `ns`.
async fn events(ns: &str, member: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client_as("admin").await, ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(member)
                && e.reporting_controller.as_deref() == Some(BROKER_NAME)
        })
        .collect()
}

/// `member`'s broker-reason annotation in `ns`.
async fn reason(ns: &str, member: &str) -> Option<String> {
    let vm = vms(&client_as("admin").await, ns)
        .get(member)
        .await
        .unwrap();
    vm.annotations().get(BROKER_REASON_ANNOTATION).cloned()
}

/// The labels the claim flow puts on `member`'s Lease.
fn claim_labels(pool: &str, member: &str) -> serde_json::Value {
    json!({ POOL_LABEL: pool, MEMBER_LABEL: member })
}

/// Waits until `member`'s Lease is gone and its Event `Reclaimed` names bob and `why`.
async fn assert_reclaimed_because(ns: &str, member: &str, why: &str) {
    let admin = client_as("admin").await;
    eventually(&format!("{member}'s Lease reclaimed"), CONVERGE, || async {
        let lease = leases(&admin, ns).get_opt(&lease_name(member)).await;
        lease.unwrap().is_none().then_some(())
    })
    .await;
    let event = wait_event(ns, member, "Reclaimed", "bob", CONVERGE).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(why),
        "{member}'s Reclaimed note lacks {why:?}: {note}"
    );
}

#[tokio::test]
async fn a_held_lease_that_never_expires_or_is_ahead_of_the_clock_is_reclaimed_not_granted() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("neverends").await;
    desktop_member(&ns, "ne", "ne-1", true).await;
    desktop_member(&ns, "ne", "ne-2", true).await;
    plant_lease(
        &admin,
        &ns,
        &lease_name("ne-1"),
        claim_labels("ne", "ne-1"),
        json!({ "holderIdentity": "bob", "leaseDurationSeconds": 1 }),
    )
    .await;
    let far = "8999-12-31T23:59:59.999999Z";
    plant_lease(
        &admin,
        &ns,
        &lease_name("ne-2"),
        claim_labels("ne", "ne-2"),
        json!({ "holderIdentity": "bob", "acquireTime": far, "renewTime": far,
                "leaseDurationSeconds": 604800 }),
    )
    .await;
    assert_reclaimed_because(&ns, "ne-1", "renewTime missing").await;
    assert_reclaimed_because(
        &ns,
        "ne-2",
        "renewTime 8999-12-31T23:59:59.999999Z is ahead of the API server's clock",
    )
    .await;
    for member in ["ne-1", "ne-2"] {
        assert_eq!(grant(&ns, member).await, (None, None), "{member} granted");
        assert!(
            events(&ns, member, "Claimed").await.is_empty(),
            "{member} reported Claimed"
        );
        wait_power(&ns, member, "Stopped").await;
    }
    // The member is free: an ordinary user's claim gets it.
    claim("alice", &ns, "ne").await;
}

#[tokio::test]
async fn a_lease_a_finalizer_keeps_deleting_is_reclaimed_once_and_named_on_its_member() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("finalizer").await;
    desktop_member(&ns, "fz", "fz-1", true).await;
    claim("bob", &ns, "fz").await;
    wait_granted(&ns, "fz-1", "bob", CONVERGE).await;
    // bob's claim held by a finalizer, and stale for an hour.
    let name = lease_name("fz-1");
    leases(&admin, &ns)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": ["hostile.example/keep"] } })),
        )
        .await
        .unwrap();
    let stale = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    let stale = stale.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string();
    set_lease_spec(
        &admin,
        &ns,
        &name,
        json!({ "renewTime": stale, "leaseDurationSeconds": 60 }),
    )
    .await;
    wait_event(&ns, "fz-1", "Reclaimed", "bob", CONVERGE).await;
    wait_no_grant(&ns, "fz-1", CONVERGE).await;
    wait_power(&ns, "fz-1", "Stopped").await;
    let lease = leases(&admin, &ns).get(&name).await.unwrap();
    assert!(
        lease.metadata.deletion_timestamp.is_some(),
        "the Lease is not deleting"
    );
    eventually("fz-1's reason names the finalizer", CONVERGE, || async {
        reason(&ns, "fz-1")
            .await
            .filter(|r| r.contains("stuck deleting with finalizers [hostile.example/keep]"))
    })
    .await;
    // A full pass (15 s) later: still one Event, the Lease never deleted again.
    let version = lease.resource_version();
    tokio::time::sleep(Duration::from_secs(17)).await;
    assert_eq!(events(&ns, "fz-1", "Reclaimed").await.len(), 1);
    assert!(events(&ns, "fz-1", "Released").await.is_empty());
    let lease = leases(&admin, &ns).get(&name).await.unwrap();
    assert_eq!(
        lease.resource_version(),
        version,
        "the Lease was written again"
    );
    // The administrator removes the finalizer: the Lease goes, and so does the reason.
    leases(&admin, &ns)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .unwrap();
    eventually("fz-1's reason removed", CONVERGE, || async {
        reason(&ns, "fz-1").await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_granted_claim_edited_unreadable_loses_its_grant_without_a_false_released() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("unreadable").await;
    desktop_member(&ns, "ur", "ur-1", true).await;
    claim("bob", &ns, "ur").await;
    wait_granted(&ns, "ur-1", "bob", CONVERGE).await;
    wait_power(&ns, "ur-1", "Running").await;
    let name = lease_name("ur-1");
    set_lease_spec(
        &admin,
        &ns,
        &name,
        json!({ "renewTime": "9999-12-31T23:59:59.999999Z" }),
    )
    .await;
    let event = wait_event(&ns, "ur-1", "UnreadableClaim", "bob", CONVERGE).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("renewTime 9999-12-31T23:59:59.999999Z"),
        "{note}"
    );
    eventually("ur-1's grant revoked", CONVERGE, || async {
        (grant(&ns, "ur-1").await == (None, None)).then_some(())
    })
    .await;
    let reason = reason(&ns, "ur-1").await.unwrap_or_default();
    assert!(
        reason.contains("claim Lease corral-vdi-ur-1 is unreadable: renewTime"),
        "{reason}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        events(&ns, "ur-1", "Released").await.is_empty(),
        "a false Released"
    );
    assert_eq!(events(&ns, "ur-1", "UnreadableClaim").await.len(), 1);
    assert!(leases(&admin, &ns).get_opt(&name).await.unwrap().is_some());
    wait_power(&ns, "ur-1", "Running").await;
    // The administrator deletes it: now the claim ends, Released.
    leases(&admin, &ns)
        .delete(&name, &Default::default())
        .await
        .unwrap();
    wait_event(&ns, "ur-1", "Released", "bob", CONVERGE).await;
    wait_no_grant(&ns, "ur-1", CONVERGE).await;
    let vm = vms(&admin, &ns).get("ur-1").await.unwrap();
    assert!(!vm.annotations().contains_key(GRANTED_TO_ANNOTATION));
    wait_power(&ns, "ur-1", "Stopped").await;
}
