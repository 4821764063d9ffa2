//! With the guard, a claim Lease has a bounded duration and times jiff can read.

use corral_tests::{namespace, pool_vms};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vdi_core::labels::{POOL_LABEL, lease_name};

use crate::{client, denied, install_and_wait, serial, uninstall};

#[tokio::test]
async fn with_the_guard_a_claim_lease_has_a_bounded_duration_and_times_jiff_can_read() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let bob = client("bob").await;
    let ns = namespace("guard-leases").await;
    pool_vms(&admin, &ns, "l", 3).await.unwrap();
    install_and_wait(&admin, &ns, "l-3").await;
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);
    let create = |member: &str, spec: Value| {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": { "name": lease_name(member), "labels": { POOL_LABEL: "l", "corral.dev/vdi-member": member } },
            "spec": spec,
        }))
        .unwrap();
        let bob = bob.clone();
        let ns = ns.clone();
        async move {
            Api::<Lease>::namespaced(bob, &ns)
                .create(&PostParams::default(), &lease)
                .await
        }
    };
    denied(
        "bob creates a Lease for 10^9 s",
        create(
            "l-1",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 1_000_000_000 }),
        )
        .await,
        "needs a leaseDurationSeconds of 1 to 604800 (7 days), not 1000000000",
    );
    denied(
        "bob creates a Lease without a duration",
        create("l-1", json!({ "holderIdentity": "bob" })).await,
        "not none",
    );
    denied(
        "bob creates a Lease renewed at the end of the calendar",
        create(
            "l-1",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 3600,
                    "renewTime": "9999-12-30T22:00:00.000000Z" }),
        )
        .await,
        "renewTime 9999-12-30T22:00:00.000000Z is not a micro-time",
    );
    assert!(
        leases_as(&admin)
            .get_opt(&lease_name("l-1"))
            .await
            .unwrap()
            .is_none(),
        "no Lease was created"
    );

    let now = jiff::Timestamp::now();
    // As the product writes them (k8s-openapi's MicroTime: six fractional digits, UTC).
    let micro = |t: jiff::Timestamp| serde_json::to_value(MicroTime(t)).unwrap();
    create(
        "l-1",
        json!({ "holderIdentity": "bob", "leaseDurationSeconds": 3600,
                "acquireTime": micro(now), "renewTime": micro(now) }),
    )
    .await
    .expect("bob claims for an hour");
    let before = leases_as(&admin)
        .get(&lease_name("l-1"))
        .await
        .unwrap()
        .metadata
        .resource_version;
    // An update of bob's Lease as `who` makes it, with `changes` merged into its spec (RBAC
    // gives desktop users update on Leases, not patch).
    let replace_as = |who: &Client, changes: Value| {
        let leases = leases_as(who);
        let admin = leases_as(&admin);
        async move {
            let mut lease =
                serde_json::to_value(admin.get(&lease_name("l-1")).await.unwrap()).unwrap();
            for (field, value) in changes.as_object().unwrap() {
                lease["spec"][field] = value.clone();
            }
            let lease: Lease = serde_json::from_value(lease).unwrap();
            leases
                .replace(&lease_name("l-1"), &PostParams::default(), &lease)
                .await
        }
    };
    for (what, spec, needle) in [
        (
            "renews to the end of the calendar",
            json!({ "renewTime": "9999-12-30T22:00:00.000000Z" }),
            "renewTime 9999-12-30T22:00:00.000000Z is not a micro-time YYYY-MM-DDTHH:MM:SS.ffffffZ before the year 9000",
        ),
        (
            "moves the acquire time past the year 9000",
            json!({ "acquireTime": "9000-01-01T00:00:00.000000Z" }),
            "acquireTime 9000-01-01T00:00:00.000000Z is not a micro-time",
        ),
        (
            "holds for 10^9 s",
            json!({ "leaseDurationSeconds": 1_000_000_000 }),
            "not 1000000000",
        ),
        (
            "holds for a second more than 7 days",
            json!({ "leaseDurationSeconds": 604_801 }),
            "not 604801",
        ),
        (
            "drops the duration",
            json!({ "leaseDurationSeconds": null }),
            "not none",
        ),
    ] {
        denied(&format!("bob {what}"), replace_as(&bob, spec).await, needle);
    }
    assert_eq!(
        leases_as(&admin)
            .get(&lease_name("l-1"))
            .await
            .unwrap()
            .metadata
            .resource_version,
        before,
        "bob's Lease did not move"
    );
    // The holder's normal renewal, up to the product's maximum, passes; an administrator is
    // not bound (and recovers what such a Lease holds).
    replace_as(
        &bob,
        json!({ "renewTime": micro(jiff::Timestamp::now()), "leaseDurationSeconds": 604_800 }),
    )
    .await
    .expect("bob renews his Lease");
    leases_as(&admin)
        .patch(
            &lease_name("l-1"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "leaseDurationSeconds": 1_000_000_000 } })),
        )
        .await
        .expect("an administrator is not bound");
    leases_as(&admin)
        .delete(&lease_name("l-1"), &DeleteParams::default())
        .await
        .unwrap();
    uninstall(&admin).await;
}
