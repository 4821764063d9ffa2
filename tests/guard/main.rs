//! The server-side guard against the sandbox's real API server: absent until installed, then
//! the API server itself refuses every raw request that would take a desktop from its holder or
//! change it behind the claim flow's back, with the policy's message, and lets the holder,
//! administrators and KubeVirt (the emulated virt-api acts as KubeVirt's service account) through;
//! and the broker's part (its identity, impersonated, and the policy installed with it).
//! This binary's sandbox starts without the guard and without a broker, so that "not installed"
//! can be seen; each test installs what it needs and leaves it uninstalled, one test at a time.
//!
//! One test binary (one sandbox, its tests one at a time), a module per part; installing,
//! uninstalling and the refusal check they share are here.

mod broker;
mod broker_manifests;
mod chart;
mod claim_rules;
mod leases;
mod members;
mod status;

use std::time::Duration;

use corral_tests::{client_as, eventually, sandbox_with};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{Mutex, MutexGuard};
use vdi_core::guard::{self, GuardState};
use vdi_core::names::{ASSIGNED_TO_LABEL, POOL_LABEL, lease_name};
use vdi_core::resources::VirtualMachine;

async fn client(user: &str) -> Client {
    sandbox_with(|o| o.guard = false);
    client_as(user).await
}

/// The guard is cluster-wide: the tests of this binary install and remove it one at a time.
async fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::const_new(());
    SERIAL.lock().await
}

/// Installs the guard as `admin` and waits until the API server enforces it
/// ([`wait_guard_enforced`]).
async fn install_and_wait(admin: &Client, ns: &str, member: &str) {
    let status = guard::install(admin).await.unwrap();
    assert_eq!(status.state, GuardState::Installed, "{status:?}");
    wait_guard_enforced(ns, member).await;
}

/// Waits (10 s at most) until the API server enforces both claim policies of the guard just
/// installed (its policy cache follows the objects within a moment): until a dry run of bob's
/// that each policy refuses (a Lease naming alice for `member`, and its label for alice) is
/// refused.
async fn wait_guard_enforced(ns: &str, member: &str) {
    let bob = client("bob").await;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lease = Api::<Lease>::namespaced(bob.clone(), ns)
            .create(&dry, &lease_for(member, "alice"))
            .await;
        let label = Api::<VirtualMachine>::namespaced(bob.clone(), ns)
            .patch(
                member,
                &PatchParams {
                    dry_run: true,
                    ..Default::default()
                },
                &label_patch(Some("alice")),
            )
            .await;
        if matches!(&lease, Err(e) if vdi_core::error::is_guard_denial(e))
            && matches!(&label, Err(e) if vdi_core::error::is_guard_denial(e))
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the guard is not enforced 10 s after install: {lease:?} {label:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (10 s at most) until alice's dry-run label of `member` for herself is `refused` by the
/// broker's members policy, or (`refused` false) passes: the API server's policy cache follows
/// the objects within a moment.
async fn wait_enforced(alice: &Client, ns: &str, member: &str, refused: bool) {
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let what = if refused {
        "the broker's members policy enforced"
    } else {
        "the broker's members policy gone"
    };
    eventually(what, Duration::from_secs(10), || async {
        let labelled = Api::<VirtualMachine>::namespaced(alice.clone(), ns)
            .patch(member, &dry, &label_patch(Some("alice")))
            .await;
        let settled = match &labelled {
            Err(kube::Error::Api(s)) => refused && s.message.contains(broker::BROKER_DENIAL),
            other => !refused && other.is_ok(),
        };
        settled.then_some(())
    })
    .await;
}

/// Waits until the API server no longer enforces the guard's or the broker's policies on a
/// pool member's claim label, once both are uninstalled: it drops a deleted policy a moment
/// later, and the tests after this one in the series make client-side claims.
async fn wait_none_enforced() {
    let ns = corral_tests::namespace("unenforced").await;
    corral_tests::pool_vms(&client("admin").await, &ns, "u", 1)
        .await
        .unwrap();
    wait_enforced(&client("alice").await, &ns, "u-1", false).await;
}

/// The resourceVersion of VM `name` in `ns`, read as admin.
async fn vm_version(ns: &str, name: &str) -> Option<String> {
    Api::<VirtualMachine>::namespaced(client("admin").await, ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .resource_version
}

async fn uninstall(admin: &Client) {
    guard::uninstall(admin).await.unwrap();
    assert_eq!(
        guard::status(admin).await.unwrap().state,
        GuardState::Absent
    );
}

/// Asserts the API server refused `result` with the guard's message containing `needle`.
fn denied<T: std::fmt::Debug>(what: &str, result: kube::Result<T>, needle: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{what}: {status:?}");
            assert!(
                status.message.contains(vdi_core::names::DENIAL_PREFIX)
                    && status.message.contains(needle),
                "{what}: {}",
                status.message
            );
        }
        other => panic!("{what}: expected the guard's denial, got {other:?}"),
    }
}

fn label_patch(value: Option<&str>) -> Patch<serde_json::Value> {
    Patch::Merge(json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: value } } }))
}

/// A claim Lease on `member` held by `holder` for an hour from now, as the claim flow writes one
/// (both times: the guard refuses a held claim without them).
fn lease_for(member: &str, holder: &str) -> Lease {
    let now = MicroTime(jiff::Timestamp::now());
    serde_json::from_value(json!({
        "metadata": { "name": lease_name(member), "labels": { POOL_LABEL: "g", "corral.dev/vdi-member": member } },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 3600,
                  "acquireTime": now, "renewTime": now }
    }))
    .unwrap()
}
