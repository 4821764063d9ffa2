//! Hostile data: Leases written by someone else, with times at and beyond the end of the
//! calendar (tests/hostile_data.rs, the GUI test).

use kube::Client;
use kube::api::{DynamicObject, PostParams};
use serde_json::Value;
use serde_json::json;

use crate::{actor_as, client_as, desktop_member, leases, namespace, pool_vms};

/// A renewTime jiff can hold, but not plus a Lease's duration.
pub const END_OF_CALENDAR: &str = "9999-12-30T22:00:00.000000Z";

/// A renewTime the API server stores (Go reads years up to 9999) and jiff cannot hold.
pub const BEYOND_CALENDAR: &str = "9999-12-31T23:59:59.000000Z";

/// A MicroTime of now, as the API server stores one.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Creates (as admin, whom the guard lets write anything) a Lease `name` in `ns`, untyped (its
/// times may be beyond what the typed Lease decodes).
pub async fn plant_lease(admin: &Client, ns: &str, name: &str, labels: Value, spec: Value) {
    let lease: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": name, "labels": labels }, "spec": spec,
    }))
    .unwrap();
    leases(admin, ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

/// Replaces `name`'s spec fields with `fields` (as admin), keeping its resourceVersion.
pub async fn set_lease_spec(admin: &Client, ns: &str, name: &str, fields: Value) {
    let api = leases(admin, ns);
    let mut lease = api.get(name).await.unwrap();
    for (key, value) in fields.as_object().unwrap() {
        lease.data["spec"][key] = value.clone();
    }
    api.replace(name, &PostParams::default(), &lease)
        .await
        .unwrap();
}

/// A namespace with pool `dev` (3 desktops), bob holding one of them, its Lease renewed at the
/// end of the calendar; and pool `legacy` (2 members) beside a Lease `zz-poison` labelled for it
/// with a time beyond the calendar. Returns the namespace and bob's member.
pub async fn poisoned(prefix: &str) -> (String, String) {
    let admin = client_as("admin").await;
    let ns = namespace(prefix).await;
    for i in 1..=3 {
        desktop_member(&ns, "dev", &format!("dev-{i}"), true).await;
    }
    pool_vms(&admin, &ns, "legacy", 2).await.unwrap();
    let bob = actor_as("bob").await;
    let bobs = vdi_core::claim::assign(&bob, &ns, "dev", "bob", &Default::default())
        .await
        .unwrap()
        .member;
    set_lease_spec(
        &admin,
        &ns,
        &vdi_core::names::lease_name(&bobs),
        json!({ "renewTime": END_OF_CALENDAR }),
    )
    .await;
    plant_lease(
        &admin,
        &ns,
        "zz-poison",
        json!({ vdi_core::names::POOL_LABEL: "legacy" }),
        json!({ "holderIdentity": "bob", "renewTime": BEYOND_CALENDAR,
                "leaseDurationSeconds": 3600 }),
    )
    .await;
    (ns, bobs)
}
