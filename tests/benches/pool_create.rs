//! Benchmark (prints figures; asserts nothing about speed): pool create of N = 1, 10 and 50
//! members on a sandbox whose emulated clones take D ≈ 2 s each (three clone steps of
//! `cloneStepMillis`), against N × D, the time one clone after another would take.
//!
//! Target: N = 50 in under 2 × D, i.e. clones run in parallel and the client's own work (API
//! requests, bounded to 8 in flight; the shared watch; labelling) adds less than one D.
//! Also printed: pool delete of the same pools.
//!
//! Run: `cargo bench -p corral-tests --bench pool_create`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use vdi_core::clock::ServerClock;
use vdi_core::pool::{
    CreateOptions, CreatePool, CreateProgress, CreateStep, DeletePool, create_pool, delete_pool,
};
use vdi_core::resources::VirtualMachine;

const NAMESPACE: &str = "bench-pools";
/// Time in each emulated clone phase; a clone passes three (snapshot, restore, create VM).
const STEP_MILLIS: u64 = 667;
const SIZES: [u32; 3] = [1, 10, 50];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shared = corral_tests::start(|_| {})?;
    let admin = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let knobs: Api<ConfigMap> = Api::namespaced(admin.clone(), "kubevirt");
    knobs
        .patch(
            sandbox::emulator::knobs::CONFIG_MAP,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(ConfigMap {
                metadata: ObjectMeta {
                    name: Some(sandbox::emulator::knobs::CONFIG_MAP.into()),
                    ..Default::default()
                },
                data: Some([("cloneStepMillis".to_owned(), STEP_MILLIS.to_string())].into()),
                ..Default::default()
            }),
        )
        .await?;

    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), NAMESPACE);
    let golden: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": "gold", "namespace": NAMESPACE },
        "spec": sandbox::bootstrap::golden_spec("Halted", "gold"),
    }))?;
    vms.create(&PostParams::default(), &golden).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while vms.get("gold").await?.printable_status() != "Stopped" {
        anyhow::ensure!(Instant::now() < deadline, "the golden VM never stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    println!(
        "pool create, emulated clone step {STEP_MILLIS} ms × 3 phases (API requests ≤ 8 in flight)"
    );
    let mut one_clone = None;
    let mut results = Vec::new();
    for size in SIZES {
        let name = format!("bench{size}");
        let request = CreatePool {
            namespace: NAMESPACE.into(),
            name: name.clone(),
            golden: "gold".into(),
            size,
            options: CreateOptions::default(),
        };
        // When the members' clones reached Succeeded, in ms since the create started.
        let clone_times = std::sync::Mutex::new(Vec::new());
        let started = Instant::now();
        let created = create_pool(&admin, &request, |event| {
            if let CreateProgress::Member(p) = event
                && p.step == CreateStep::Cloning
                && p.phase.as_deref() == Some("Succeeded")
            {
                clone_times.lock().unwrap().push(p.elapsed_ms);
            }
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let total = started.elapsed();
        anyhow::ensure!(created.members.len() == size as usize);
        let d = *one_clone.get_or_insert(total);
        results.push((size, total, d));
        let first = clone_times
            .lock()
            .unwrap()
            .iter()
            .copied()
            .min()
            .unwrap_or(0);
        println!(
            "  N = {size:>2}: {:>6.2} s   N × D = {:>6.1} s   total / D = {:.2}   (first clone done at {:.2} s)",
            total.as_secs_f64(),
            d.as_secs_f64() * f64::from(size),
            total.as_secs_f64() / d.as_secs_f64(),
            f64::from(first) / 1000.0,
        );
    }
    let d = results[0].2;
    let (_, fifty, _) = results[results.len() - 1];
    println!(
        "  D (one clone, measured at N = 1) = {:.2} s; N = 50 took {:.2} × D: target < 2 × D {}",
        d.as_secs_f64(),
        fifty.as_secs_f64() / d.as_secs_f64(),
        if fifty < d * 2 { "met" } else { "MISSED" }
    );

    let clock = ServerClock::measure(&admin).await?;
    for size in SIZES {
        let started = Instant::now();
        let deleted = delete_pool(
            &admin,
            &DeletePool {
                namespace: NAMESPACE.into(),
                name: format!("bench{size}"),
                force: false,
            },
            &clock,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::ensure!(deleted.members.len() == size as usize);
        println!(
            "pool delete, N = {size:>2}: {:.2} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
