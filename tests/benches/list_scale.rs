//! Benchmark (prints figures; asserts nothing about speed): 10,000 VMs in 1,000 pools on a
//! sandbox, listed and grouped through the live view.
//!
//! Figures: time to create the VMs (setup), the live view's initial sync (spawn → first `Live`
//! snapshot), one-shot `list_pools`, and client-side grouping alone (median of 15 runs).
//! The KubeVirt emulation is off, so the API server serves only this workload.
//!
//! Run: `make bench` (or `cargo bench -p corral-tests --bench list_scale`).

use std::time::Instant;

use corral_tests::measure::median;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use vdi_core::clock::ServerClock;
use vdi_core::names::POOL_LABEL;
use vdi_core::resources::VirtualMachine;
use vdi_core::scope::Scope;
use vdi_core::state::group_pools;
use vdi_core::watch::{FeedStatus, PoolFeed, list_pools};

const POOLS: usize = 1_000;
const PER_POOL: usize = 10;
const NAMESPACE: &str = "bench";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shared = corral_tests::start(|o| o.emulate = false)?;
    let admin = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;

    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), NAMESPACE);
    let started = Instant::now();
    corral_tests::many_pools(&admin, NAMESPACE, 0..POOLS, PER_POOL).await?;
    let total = POOLS * PER_POOL;
    println!(
        "setup: created {total} VMs in {POOLS} pools in {:.1?}",
        started.elapsed()
    );

    let clock = ServerClock::measure(&admin).await?;
    let scope = Scope::Namespace(NAMESPACE.into());
    let mut sync_times = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let feed = PoolFeed::spawn(admin.clone(), scope.clone(), clock);
        let mut rx = feed.subscribe();
        loop {
            let live = {
                let snap = rx.borrow_and_update();
                matches!(snap.status, FeedStatus::Live)
                    .then(|| snap.pools.iter().map(|p| p.members.len()).sum::<usize>())
            };
            if let Some(members) = live {
                anyhow::ensure!(members == total, "live view saw {members} members");
                break;
            }
            rx.changed().await?;
        }
        sync_times.push(started.elapsed());
    }
    println!(
        "live view initial sync (watch list + group, {total} VMs): median {:.1?} of 3 ({sync_times:.1?})",
        median(sync_times.clone())
    );

    let started = Instant::now();
    let pools = list_pools(&admin, &scope, &clock).await?;
    println!(
        "one-shot list_pools: {:.1?} ({} pools)",
        started.elapsed(),
        pools.len()
    );

    let items = vms
        .list(&ListParams::default().labels(POOL_LABEL))
        .await?
        .items;
    let mut grouping = Vec::new();
    for _ in 0..15 {
        let started = Instant::now();
        let pools = group_pools(&items, &[], clock.now());
        grouping.push(started.elapsed());
        anyhow::ensure!(pools.len() == POOLS);
    }
    println!(
        "client-side grouping of {total} VMs into {POOLS} pools: median {:.2?} of 15",
        median(grouping)
    );
    Ok(())
}
