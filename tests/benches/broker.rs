//! Benchmark (prints figures; asserts only correctness): what the in-cluster broker costs.
//!
//! 1. A claim until the desktop is usable — access granted and the VM running — p50/p95 with
//!    one claimant at a time ([`SEQUENTIAL`] claims) and with [`CONCURRENT`] concurrent
//!    claimants, on a sandbox with the broker and on one without (the client-side flow: the
//!    client labels and starts the VM, and access is the namespace-wide role). With a broker,
//!    "usable" is the broker's mark that the holder's RoleBinding exists (the VM's granted-to
//!    annotation equal to its assigned-to label) on a Running VM; without, the label on a
//!    Running VM. Both are seen by one watch per round (no polling by the claimants), and the
//!    time until `assign` returns (what the CLI waits for) is printed beside, with the time
//!    until access alone is granted: the emulation boots a VM in up to 800 ms (its
//!    `startMillis`, counted from the VMI's creationTimestamp, which has whole seconds), so
//!    "running" adds 0 to 800 ms of emulated boot to either flow at random. Claimants act as
//!    the claims benchmark's do: each an administrator's client of its own (its own
//!    connection) claiming for an identity of its own (one user holds one member per pool), so
//!    the broker binds a distinct user per claim. The CPU each part spent per claim
//!    (API server, etcd, the KubeVirt emulation, the broker's replicas) is printed too.
//! 2. The broker's resident memory (VmRSS and its peak VmHWM, from /proc) at [`POOLS`] pools of
//!    [`PER_POOL`] VMs with one active claim per pool. The VMs are the bare members the list
//!    benchmark makes (a pool label, `runStrategy: Halted`, no template), so they are smaller
//!    than members cloned from a golden VM: the figure is a floor for a real site's. The
//!    emulation runs, as a cluster would: every VM carries a status, and the 1,000 claimed ones
//!    are started by the broker and run (VMI, launcher pod). The claims are written as the
//!    Lease alone (what a claim is with a broker), by the administrator for 1,000 distinct
//!    users. The figure is read once the broker has granted all 1,000 and each VM runs.
//!
//! Needs `corral-vdi-broker` built in the same profile (`cargo build --release -p
//! corral-vdi-broker` for `cargo bench`). Two sandboxes run in this process (the one without a
//! broker idles while the other is measured; its processes' CPU counts in the CPU figures, a
//! little). On 2 cores it runs in about 2.5 minutes, most of it creating and reconciling the
//! 10,000 VMs.
//! Run: `make bench` (or `cargo build --release --locked -p corral-vdi-broker && cargo bench -p
//! corral-tests --bench broker`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;
use vdi_core::claim::{ClaimOptions, assign};
use vdi_core::identity::Actor;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, BROKER_NAME, BROKER_NAMESPACE, GRANTED_TO_ANNOTATION, MANAGED_BY_LABEL,
    MEMBER_LABEL, POOL_LABEL, lease_name,
};
use vdi_core::resources::VirtualMachine;

use corral_tests::Shared;
use corral_tests::measure::{cpu_between, cpu_time, mib, percentile};

const NAMESPACE: &str = "bench";
/// Claims made one after the other (the "1 claimant" figure).
const SEQUENTIAL: usize = 20;
/// Claimants at once.
const CONCURRENT: usize = 64;
/// The memory figure's scale: pools, members per pool (one claim per pool).
const POOLS: usize = 1_000;
const PER_POOL: usize = 10;
const SCALE_NAMESPACE: &str = "scale";

/// Whether the cluster runs the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    ClientSide,
    Broker,
}

/// Whether a claimed VM's access is granted in `flow`: labelled, and with a broker granted to
/// the one its label names (without one, the namespace-wide role was there all along).
fn granted(vm: &VirtualMachine, flow: Flow) -> bool {
    let label = vm.labels().get(ASSIGNED_TO_LABEL);
    label.is_some()
        && match flow {
            Flow::ClientSide => true,
            Flow::Broker => vm.annotations().get(GRANTED_TO_ANNOTATION) == label,
        }
}

/// Whether a claimed VM is usable in `flow`: granted, and Running.
fn usable(vm: &VirtualMachine, flow: Flow) -> bool {
    granted(vm, flow) && vm.printable_status() == "Running"
}

/// When each member of a pool was first seen granted and first seen usable.
#[derive(Default)]
struct Seen {
    granted: HashMap<String, Instant>,
    usable: HashMap<String, Instant>,
}

/// [`Seen`] kept by one watch of a pool.
struct Progress {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Watches `pool` in [`NAMESPACE`]; returns once the watch has listed it (so no change
    /// after this goes unseen).
    async fn watch(admin: &Client, pool: &str, flow: Flow) -> anyhow::Result<Self> {
        let api: Api<VirtualMachine> = Api::namespaced(admin.clone(), NAMESPACE);
        let config = watcher::Config::default().labels(&format!("{POOL_LABEL}={pool}"));
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut listed_tx = Some(listed_tx);
                let mut events = watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    match event {
                        Ok(watcher::Event::Apply(vm) | watcher::Event::InitApply(vm)) => {
                            let now = Instant::now();
                            let mut seen = seen.lock().unwrap();
                            if granted(&vm, flow) {
                                seen.granted.entry(vm.name_any()).or_insert(now);
                            }
                            if usable(&vm, flow) {
                                seen.usable.entry(vm.name_any()).or_insert(now);
                            }
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = listed_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        _ => {}
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), listed)
            .await
            .context("the pool's watch did not list it within 30 s")??;
        Ok(Progress { seen, task })
    }

    /// When `member` was first seen granted and usable, waiting `timeout` at most.
    async fn at(&self, member: &str, timeout: Duration) -> anyhow::Result<(Instant, Instant)> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let seen = self.seen.lock().unwrap();
                if let (Some(granted), Some(usable)) =
                    (seen.granted.get(member), seen.usable.get(member))
                {
                    return Ok((*granted, *usable));
                }
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{member} not usable (granted and running) within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One claim's times: until `assign` returned, until access was granted, until the desktop
/// was usable (granted and running).
type Times = (Duration, Duration, Duration);

/// Claims a member of `pool` for `who` with its own `actor`, and times it.
async fn timed_claim(
    actor: &Actor,
    progress: &Progress,
    pool: &str,
    who: &str,
) -> anyhow::Result<Times> {
    let started = Instant::now();
    // An administrator's assignment to an identity no RBAC entitles: forced (recorded on the
    // Lease), so that the broker grants it without a SubjectAccessReview, as an administrator
    // would (`assign --force`).
    let options = ClaimOptions {
        force: true,
        ..ClaimOptions::default()
    };
    let claimed = assign(actor, NAMESPACE, pool, who, &options).await?;
    let returned = started.elapsed();
    let (granted, usable) = progress
        .at(&claimed.member, Duration::from_secs(120))
        .await?;
    Ok((
        returned,
        granted.saturating_duration_since(started),
        usable.saturating_duration_since(started),
    ))
}

/// `claimants` administrator's actors, each with a connection of its own.
async fn actors(shared: &Shared, claimants: usize) -> anyhow::Result<Vec<Actor>> {
    let mut actors = Vec::with_capacity(claimants);
    for _ in 0..claimants {
        let client = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
        actors.push(Actor::connect(client).await?);
    }
    Ok(actors)
}

/// "p50 X, p95 Y" of `samples`.
fn p50_p95(mut samples: Vec<Duration>) -> String {
    samples.sort();
    format!(
        "p50 {} ms, p95 {} ms",
        percentile(&samples, 0.5).as_millis(),
        percentile(&samples, 0.95).as_millis()
    )
}

/// Prints a round's figures: the times' p50/p95 and the CPU per claim by part.
fn report(
    flow: Flow,
    what: &str,
    times: Vec<Times>,
    cpu: &BTreeMap<String, Duration>,
    wall: Duration,
) {
    let claims = times.len();
    let returned = times.iter().map(|t| t.0).collect();
    let granted = times.iter().map(|t| t.1).collect();
    let usable = times.iter().map(|t| t.2).collect();
    println!(
        "{flow:?}, {what}: usable (granted and running) {}; granted {}; assign returned {}; \
         {claims} claims in {wall:.1?}",
        p50_p95(usable),
        p50_p95(granted),
        p50_p95(returned)
    );
    let parts: Vec<String> = cpu
        .iter()
        .filter(|(_, used)| !used.is_zero())
        .map(|(name, used)| {
            format!(
                "{name} {:.1} ms",
                used.as_secs_f64() * 1000.0 / claims as f64
            )
        })
        .collect();
    println!("   CPU per claim: {}", parts.join(", "));
}

/// Both rounds (one at a time, then [`CONCURRENT`] at once) on `shared` in `flow`.
async fn claim_rounds(shared: &Shared, flow: Flow) -> anyhow::Result<()> {
    let admin = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    // The broker acts only where it is let (`broker install --namespace`).
    if flow == Flow::Broker {
        vdi_core::broker::namespaces::serve(&admin, NAMESPACE).await?;
    }

    // One claimant at a time: a pool of SEQUENTIAL members, each claim by a user of its own.
    corral_tests::stopped_pool(&admin, NAMESPACE, "one", SEQUENTIAL).await?;
    let progress = Progress::watch(&admin, "one", flow).await?;
    let actor = actors(shared, 1).await?.remove(0);
    let (cpu_before, started) = (cpu_time(), Instant::now());
    let mut times = Vec::with_capacity(SEQUENTIAL);
    for k in 0..SEQUENTIAL {
        times.push(timed_claim(&actor, &progress, "one", &format!("one-user-{k}")).await?);
    }
    let wall = started.elapsed();
    report(
        flow,
        "1 claimant at a time",
        times,
        &cpu_between(&cpu_before, &cpu_time()),
        wall,
    );

    // CONCURRENT claimants at once, each with its own connection and identity.
    corral_tests::stopped_pool(&admin, NAMESPACE, "many", CONCURRENT).await?;
    let progress = Arc::new(Progress::watch(&admin, "many", flow).await?);
    let actors = actors(shared, CONCURRENT).await?;
    let (cpu_before, started) = (cpu_time(), Instant::now());
    let tasks: Vec<_> = actors
        .into_iter()
        .enumerate()
        .map(|(k, actor)| {
            let progress = progress.clone();
            tokio::spawn(async move {
                timed_claim(&actor, &progress, "many", &format!("many-user-{k}")).await
            })
        })
        .collect();
    let mut times = Vec::with_capacity(CONCURRENT);
    for task in tasks {
        times.push(task.await??);
    }
    let wall = started.elapsed();
    report(
        flow,
        &format!("{CONCURRENT} concurrent claimants"),
        times,
        &cpu_between(&cpu_before, &cpu_time()),
        wall,
    );
    Ok(())
}

/// VmRSS and VmHWM of process `pid`, in bytes.
fn memory(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let field = |key: &str| -> anyhow::Result<u64> {
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {key} in /proc/{pid}/status"))?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Prints each replica's memory, the leader's first.
async fn print_memory(shared: &Shared, admin: &Client, when: &str) -> anyhow::Result<()> {
    let brokers = shared
        .brokers
        .clone()
        .context("the sandbox runs no broker")?;
    let leader = Api::<Lease>::namespaced(admin.clone(), BROKER_NAMESPACE)
        .get(BROKER_NAME)
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .context("nobody leads the broker")?;
    let mut replicas = brokers.replicas();
    replicas.sort_by_key(|r| r.identity != leader);
    for replica in replicas {
        let pid = replica
            .pid
            .with_context(|| format!("replica {} does not run", replica.identity))?;
        let (rss, hwm) = memory(pid)?;
        let role = if replica.identity == leader {
            "leader"
        } else {
            "follower"
        };
        println!(
            "broker {role} {} {when}: VmRSS {:.1} MiB (peak VmHWM {:.1} MiB)",
            replica.identity,
            mib(rss),
            mib(hwm)
        );
    }
    Ok(())
}

/// The memory figure: [`POOLS`] × [`PER_POOL`] VMs, one active claim per pool.
async fn memory_at_scale(shared: &Shared) -> anyhow::Result<()> {
    let admin = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
    print_memory(shared, &admin, "after the claim rounds").await?;
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": SCALE_NAMESPACE } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    vdi_core::broker::namespaces::serve(&admin, SCALE_NAMESPACE).await?;
    let started = Instant::now();
    let created = corral_tests::many_pools(&admin, SCALE_NAMESPACE, 0..POOLS, PER_POOL).await?;
    println!(
        "setup: created {created} VMs in {POOLS} pools in {:.1?}",
        started.elapsed()
    );

    // One claim per pool, on its first member, for a user of its own: the Lease alone.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), SCALE_NAMESPACE);
    let started = Instant::now();
    let now = corral_tests::now_micro();
    let results: Vec<kube::Result<Lease>> = futures::stream::iter(0..POOLS)
        .map(|i| {
            let (leases, now) = (leases.clone(), now.clone());
            async move {
                let (pool, member) = (format!("pool{i:04}"), format!("pool{i:04}-1"));
                let lease: Lease = serde_json::from_value(json!({
                    "metadata": { "name": lease_name(&member),
                                  "labels": { POOL_LABEL: pool, MEMBER_LABEL: member } },
                    "spec": { "holderIdentity": format!("scale-user-{i}"), "acquireTime": now,
                              "renewTime": now, "leaseDurationSeconds": 3600 } }))
                .expect("a Lease");
                leases.create(&PostParams::default(), &lease).await
            }
        })
        .buffer_unordered(48)
        .collect()
        .await;
    if let Some(e) = results.into_iter().find_map(Result::err) {
        anyhow::bail!("a claim Lease in {SCALE_NAMESPACE} was refused: {e}");
    }
    println!(
        "setup: wrote {POOLS} claim Leases in {:.1?}",
        started.elapsed()
    );

    // Until the broker has bound all of them and every claimed VM runs.
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), SCALE_NAMESPACE);
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), SCALE_NAMESPACE);
    let managed = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={BROKER_NAME}"));
    let labelled = ListParams::default().labels(ASSIGNED_TO_LABEL);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let bound = bindings.list_metadata(&managed).await?.items.len();
        let running = vms
            .list(&labelled)
            .await?
            .items
            .iter()
            .filter(|vm| usable(vm, Flow::Broker))
            .count();
        if bound == POOLS && running == POOLS {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "10 min after the claims: {bound} of {POOLS} bound, {running} granted and running"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "the broker granted {POOLS} claims (RoleBindings, granted-to) and their VMs run: {:.1?} after the first Lease",
        started.elapsed()
    );
    print_memory(
        shared,
        &admin,
        &format!(
            "at {} VMs in {POOLS} pools, {POOLS} active claims",
            POOLS * PER_POOL
        ),
    )
    .await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let plain = corral_tests::start(|_| {})?;
    claim_rounds(&plain, Flow::ClientSide).await?;
    let brokered = corral_tests::start(|o| o.broker = true)?;
    claim_rounds(&brokered, Flow::Broker).await?;
    memory_at_scale(&brokered).await
}
