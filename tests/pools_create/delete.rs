//! Pool delete: refuses assigned members unless forced, and is idempotent.

use std::collections::BTreeMap;

use corral_tests::{client_as, golden_vm, namespace};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use vdi_core::clock::ServerClock;
use vdi_core::error::ErrorKind;
use vdi_core::names::{ASSIGNED_TO_LABEL, MEMBER_LABEL, POOL_LABEL, lease_name};
use vdi_core::pool::{DeletePool, create_pool, delete_pool};
use vdi_core::resources::VirtualMachine;

use crate::{request, world};

#[tokio::test]
async fn delete_refuses_assigned_members_unless_forced_and_is_idempotent() {
    let admin = client_as("admin").await;
    let ns = namespace("delete").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    create_pool(&admin, &request(&ns, "gone", "gold", 3), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // gone-2 assigned (label); gone-3 being claimed by bob (active Lease, no label).
    let vms = Api::<VirtualMachine>::namespaced(admin.clone(), &ns);
    vms.patch(
        "gone-2",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: "alice" } } })),
    )
    .await
    .unwrap();
    let now = Timestamp::now();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(lease_name("gone-3")),
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_owned(), "gone".to_owned()),
                (MEMBER_LABEL.to_owned(), "gone-3".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("bob".into()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(3600),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let before = world(&ns).await;
    let clock = ServerClock::measure(&admin).await.unwrap();
    let mut req = DeletePool {
        namespace: ns.clone(),
        name: "gone".into(),
        force: false,
    };

    let err = delete_pool(&admin, &req, &clock).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        err.to_string(),
        format!(
            "pool \"gone\" in namespace \"{ns}\" has assigned members: gone-2 (assigned to alice, \
             label only), gone-3 (claim in progress or stuck, Lease held by bob)"
        )
    );
    assert!(err.suggestion().unwrap().contains("--force"));
    assert_eq!(world(&ns).await, before, "a refused delete deletes nothing");

    req.force = true;
    let deleted = delete_pool(&admin, &req, &clock).await.unwrap();
    assert_eq!(deleted.members, ["gone-1", "gone-2", "gone-3"]);
    assert_eq!(deleted.leases, [lease_name("gone-3")]);
    assert!(deleted.clones.is_empty());
    assert_eq!(deleted.forced, ["gone-2 (alice)", "gone-3 (bob)"]);
    let after = world(&ns).await;
    assert_eq!(after.vms.keys().collect::<Vec<_>>(), ["gold"]);
    assert!(after.leases.is_empty());

    // Twice: nothing to delete, and that is a success.
    let again = delete_pool(&admin, &req, &clock).await.unwrap();
    assert!(again.is_empty(), "{again:?}");
    req.force = false;
    assert!(delete_pool(&admin, &req, &clock).await.unwrap().is_empty());
}
