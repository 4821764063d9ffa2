//! Claims against a real API server (the sandbox): the Lease race, every member-state row as a
//! starting point for assign and unassign, partial failures, clock skew and identities that
//! need encoding. Power comes from the sandbox's KubeVirt emulation (start/stop subresources).
//!
//! One test binary (one sandbox), a module per part; the steps they share (a pool, a claim, a
//! release, who holds what) are here.

mod conflicts;
mod failures;
mod identities;
mod lifecycle;
mod races;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use vdi_core::claim::{ClaimOptions, Claimed, Released, UnassignOptions, assign, unassign};
use vdi_core::clock::ServerClock;
use vdi_core::identity::Actor;
use vdi_core::names::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, POOL_LABEL, lease_name};
use vdi_core::resources::VirtualMachine;
use vdi_core::{Error, Result};

/// Creates `<pool>-1..=<size>` as stopped (Halted) VMs labelled with the pool.
async fn pool(admin: &Client, ns: &str, pool: &str, size: usize) {
    corral_tests::pool_vms(admin, ns, pool, size).await.unwrap();
}

async fn clock(client: &Client) -> ServerClock {
    ServerClock::measure(client).await.unwrap()
}

/// `actor` claims a member of `pool` for `who`.
async fn claim(actor: &Actor, ns: &str, pool: &str, who: &str) -> Result<Claimed> {
    assign(actor, ns, pool, who, &ClaimOptions::default()).await
}

/// A claim Lease of `seconds`.
fn lasting(seconds: i64) -> ClaimOptions {
    ClaimOptions {
        lease_seconds: seconds,
        ..ClaimOptions::default()
    }
}

/// `actor` releases `member` (no force).
async fn release(actor: &Actor, ns: &str, member: &str) -> Result<Released> {
    unassign(actor, ns, member, &UnassignOptions::default()).await
}

/// Lease holder and VM label per member of `pool`.
async fn holders(
    admin: &Client,
    ns: &str,
    pool: &str,
) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), ns);
    let mut out = BTreeMap::new();
    let lp = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
    for vm in vms.list(&lp).await.unwrap() {
        let name = vm.metadata.name.clone().unwrap();
        let label = vm
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ASSIGNED_TO_LABEL).cloned());
        let holder = leases
            .get_opt(&lease_name(&name))
            .await
            .unwrap()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity));
        out.insert(name, (holder, label));
    }
    out
}

fn refused(result: Result<Claimed>) -> String {
    match result {
        Err(e @ Error::Refused { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Removes the presentation label (as a failed claim would leave it): the member then shows
/// its Lease alone.
async fn unassign_label_only(admin: &Client, ns: &str, member: &str) {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let patch = json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: null }, "annotations": { CLAIMED_AT_ANNOTATION: null } } });
    vms.patch(member, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

async fn wait_power(admin: &Client, ns: &str, member: &str, want: &str) {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let vm = vms.get(member).await.unwrap();
        if vm.printable_status() == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{member} is {}, not {want}",
            vm.printable_status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `actor` claims a member of `pool` for `who` with a Lease of `seconds`.
async fn claim_lasting(actor: &Actor, ns: &str, pool: &str, who: &str, seconds: i64) -> Claimed {
    assign(actor, ns, pool, who, &lasting(seconds))
        .await
        .unwrap_or_else(|e| panic!("{who} claims in {pool}: {e}"))
}

/// The `corral vdi` Go CLI's way of assigning: a merge patch of the label (and annotation),
/// with no precondition, as an administrator runs it.
async fn go_cli_assign(admin: &Client, ns: &str, member: &str, user: &str) {
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    let patch = json!({ "metadata": {
        "labels": { ASSIGNED_TO_LABEL: user },
        "annotations": { CLAIMED_AT_ANNOTATION: Timestamp::now().round(jiff::Unit::Second).unwrap().to_string() } } });
    vms.patch(member, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}
