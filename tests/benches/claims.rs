//! Benchmark (prints figures; asserts only correctness): claim latency (p50/p95) and throughput
//! with 1, 16 and 64 concurrent claimants on the sandbox, and the number of API requests per
//! uncontended claim before the VM start (target: at most 4), and the CPU time each part of
//! the run (API server, etcd, the KubeVirt emulation, the claimants) spent per claim.
//!
//! Each claimant has its own client (its own connection) and identity; each round uses a
//! fresh pool with as many members as claimants, so every claim succeeds.
//! Run: `make bench` (or `cargo bench -p corral-tests --bench claims`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower::ServiceBuilder;
use vdi_core::claim::{ClaimOptions, assign};
use vdi_core::identity::Actor;

use corral_tests::measure::{cpu_between, cpu_time, percentile};

const NAMESPACE: &str = "bench";

/// A client whose requests are counted, except the start/stop subresource calls.
async fn counting_client(
    kubeconfig: &std::path::Path,
    counter: Arc<AtomicUsize>,
) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: Some("admin".into()),
        ..Default::default()
    };
    let config =
        Config::from_custom_kubeconfig(Kubeconfig::read_from(kubeconfig)?, &options).await?;
    let layer =
        ServiceBuilder::new().map_request(move |request: http::Request<kube::client::Body>| {
            if !request.uri().path().contains("subresources.kubevirt.io") {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            request
        });
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

/// `used` per claim, in milliseconds.
fn per_claim(used: Duration, claims: usize) -> f64 {
    used.as_secs_f64() * 1000.0 / claims as f64
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shared = corral_tests::start(|_| {})?;
    let admin = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;

    // Requests per uncontended claim.
    corral_tests::stopped_pool(&admin, NAMESPACE, "solo", 1).await?;
    let counter = Arc::new(AtomicUsize::new(0));
    let client = counting_client(&shared.kubeconfig, counter.clone()).await?;
    let actor = Actor::connect(client).await?;
    // Who acts and the server's clock are read once per session, not per claim.
    counter.store(0, Ordering::Relaxed);
    assign(
        &actor,
        NAMESPACE,
        "solo",
        "solo-user",
        &ClaimOptions::default(),
    )
    .await?;
    println!(
        "API requests per uncontended claim before the VM start: {} (target ≤ 4)",
        counter.load(Ordering::Relaxed)
    );

    for claimants in [1usize, 16, 64] {
        let pool = format!("c{claimants}");
        corral_tests::stopped_pool(&admin, NAMESPACE, &pool, claimants).await?;
        let mut actors = Vec::new();
        for _ in 0..claimants {
            let client = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
            actors.push(Actor::connect(client).await?);
        }
        let cpu_before = cpu_time();
        let started = Instant::now();
        let tasks: Vec<_> = actors
            .into_iter()
            .enumerate()
            .map(|(k, actor)| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let t = Instant::now();
                    let who = format!("user-{k}");
                    let result =
                        assign(&actor, NAMESPACE, &pool, &who, &ClaimOptions::default()).await;
                    (t.elapsed(), result.map(|c| c.races_lost))
                })
            })
            .collect();
        let mut latencies = Vec::new();
        let mut races = 0;
        for task in tasks {
            let (latency, result) = task.await?;
            races += result?;
            latencies.push(latency);
        }
        let wall = started.elapsed();
        let cpu = cpu_between(&cpu_before, &cpu_time());
        latencies.sort();
        println!(
            "{claimants:>2} concurrent claimants: p50 {:.1?}, p95 {:.1?}, throughput {:.1} claims/s, races lost {races}",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.95),
            claimants as f64 / wall.as_secs_f64()
        );
        // Where the CPU went while the claims ran (everything shares this machine's cores).
        let total: Duration = cpu.values().sum();
        let parts: Vec<String> = cpu
            .iter()
            .filter(|(_, used)| !used.is_zero())
            .map(|(name, used)| format!("{name} {:.1} ms", per_claim(*used, claimants)))
            .collect();
        let all_ms = per_claim(total, claimants);
        println!(
            "   CPU per claim: {} — {all_ms:.1} ms in all; {} cores busy {:.0} % of the time, \
             so they could serve at most {:.0} claims/s",
            parts.join(", "),
            cores(),
            100.0 * total.as_secs_f64() / (wall.as_secs_f64() * cores() as f64),
            cores() as f64 * 1000.0 / all_ms.max(f64::EPSILON)
        );
        if claimants == 64 {
            println!(
                "   goal at 64: ≥ 200 claims/s with p95 < 500 ms (44 claims/s before claims spread)"
            );
        }
    }
    Ok(())
}
