//! Unmanaged pools (issue 26: "Unmanaged pools (label-only, the Go CLI's) are untouched by the
//! broker"): a pool of labelled VMs without a DesktopPool, beside a managed pool the broker
//! works on in the same namespace, is never written, started, resized or adopted.

use std::collections::BTreeMap;

use corral_tests::{client_as, leases, managed_pool_in, stopped_pool, vms};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;
use vdi_core::names::{BROKER_NAME, POOL_LABEL};
use vdi_core::policy::DesktopPoolSpec;

use crate::{Member, SETTLE, desktop_pools, spec, wait_members, with_broker};

/// The resourceVersion of every VM of `pool` in `ns`, by name.
async fn versions(ns: &str, pool: &str) -> BTreeMap<String, String> {
    let selector = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
    vms(&client_as("admin").await, ns)
        .list(&selector)
        .await
        .unwrap()
        .into_iter()
        .map(|vm| (vm.name_any(), vm.resource_version().unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_label_only_pool_is_left_alone_beside_a_managed_one() {
    with_broker();
    let admin = client_as("admin").await;
    let ns = corral_tests::namespace("unmanaged").await;
    corral_tests::golden_vm(&ns, "golden", "Halted", |_| {}).await;
    // The Go CLI's pool: three labelled VMs, stopped, no DesktopPool.
    stopped_pool(&admin, &ns, "lo", 3).await.unwrap();
    let before = versions(&ns, "lo").await;

    // A managed pool in the same namespace, which the broker grows, warms and resizes: each
    // settled state is proof the broker went through this namespace after the label-only pool
    // was there.
    let spec = DesktopPoolSpec {
        warm: Some(1),
        ..spec(2)
    };
    managed_pool_in(&ns, "mg", spec, SETTLE).await;
    corral_tests::set_pool_spec(&ns, "mg", json!({ "size": 3 })).await;
    wait_members(&ns, "mg", "3 members, 1 warm", |m| {
        m.len() == 3
            && m.values().all(Member::settled)
            && m.values().filter(|m| m.power == "Running").count() == 1
    })
    .await;

    assert_eq!(
        versions(&ns, "lo").await,
        before,
        "the broker wrote to a label-only pool's members"
    );
    assert!(
        desktop_pools(&admin, &ns)
            .get_opt("lo")
            .await
            .unwrap()
            .is_none(),
        "a DesktopPool was made for the label-only pool"
    );
    let selector = ListParams::default().labels(&format!("{POOL_LABEL}=lo"));
    let lo_leases = leases(&admin, &ns).list(&selector).await.unwrap();
    assert!(lo_leases.items.is_empty(), "{:?}", lo_leases.items);
    let events: Vec<String> = Api::<Event>::namespaced(admin, &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some(BROKER_NAME))
        .filter_map(|e| e.regarding?.name)
        .filter(|name| name.starts_with("lo-"))
        .collect();
    assert!(events.is_empty(), "the broker recorded acts on {events:?}");
}
