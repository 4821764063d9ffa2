//! Benchmark (prints figures; asserts only that each round got a desktop and a frame): "Get a
//! desktop" to the first console frame, from a managed pool with a warm buffer and from one
//! without (issue 26; the goal: warm ≤ 2 s at p95).
//!
//! Each round, alice claims a member as the app's "Get a desktop" does (vdi-core's
//! `assign_with_progress` for herself, which with a broker returns once the broker has bound her
//! access and the member runs), then opens its console as Connect does (a VNC forward) and reads
//! the first framebuffer update (tests/support `first_frame`, as the connect benchmark
//! measures it); the round's time runs from the claim to that frame. She then releases the
//! member, and the next round starts once the pool is back where it was: the warm pool with
//! [`WARM`] free members running, the cold one with every member stopped.
//!
//! From the emulator: a member "boots" in its `startMillis` (800 ms from its VMI's creation,
//! which has whole seconds); a running member's display (an Xvnc) starts on its first console,
//! for warm and cold members alike, so the warm figure still includes starting the display.
//! Run: `make bench` (or `cargo bench -p corral-tests --bench warm`).

use std::time::{Duration, Instant};

use corral_tests::measure::percentile;
use corral_tests::{
    PoolMember, actor_as, first_frame, golden_vm, managed_pool_in, namespace, wait_pool_members,
};
use vdi_core::claim::{ClaimOptions, UnassignOptions, assign_with_progress, unassign};
use vdi_core::policy::DesktopPoolSpec;
use vdi_core::session::Supervisor;

/// Rounds per pool.
const ROUNDS: usize = 10;
/// The warm pool's buffer.
const WARM: i32 = 2;
/// How long a pool may take to be back before a round.
const READY: Duration = Duration::from_secs(60);

/// Runs [`ROUNDS`] rounds on `pool` in `ns`, each once `ready` holds; returns their times,
/// sorted.
async fn rounds(
    ns: &str,
    pool: &str,
    ready: impl Fn(&std::collections::BTreeMap<String, PoolMember>) -> bool + Copy,
) -> anyhow::Result<Vec<Duration>> {
    let alice = actor_as("alice").await;
    let supervisor = Supervisor::new();
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        wait_pool_members(ns, pool, "the pool back", READY, ready).await;
        let began = Instant::now();
        let claimed =
            assign_with_progress(&alice, ns, pool, "alice", &ClaimOptions::default(), |_| {})
                .await?;
        // A console refused (the grant not yet in force) is opened again, as a user would:
        // the round's time counts until a frame comes.
        while let Err(e) = first_frame(&supervisor, "alice", ns, &claimed.member).await {
            anyhow::ensure!(
                began.elapsed() < READY,
                "no console frame within {READY:?}: {e}"
            );
            eprintln!("{pool}: {e}; opening it again");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        times.push(began.elapsed());
        unassign(&alice, ns, &claimed.member, &UnassignOptions::default()).await?;
    }
    times.sort();
    Ok(times)
}

fn print(what: &str, times: &[Duration]) {
    println!(
        "Get a desktop → first console frame, {what}: p50 {:.2} s, p95 {:.2} s (of {})",
        percentile(times, 0.5).as_secs_f64(),
        percentile(times, 0.95).as_secs_f64(),
        times.len()
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    corral_tests::sandbox_with(|o| o.broker = true);
    let ns = namespace("bench-warm").await;
    golden_vm(&ns, "golden", "Halted", |_| {}).await;
    let spec = |size, warm| DesktopPoolSpec {
        golden: "golden".into(),
        size,
        warm: Some(warm),
        ..Default::default()
    };
    managed_pool_in(&ns, "warm", spec(WARM + 1, WARM), READY).await;
    managed_pool_in(&ns, "cold", spec(2, 0), READY).await;

    let warm = rounds(&ns, "warm", |m| {
        m.values().all(PoolMember::settled)
            && m.values()
                .filter(|m| m.free() && m.power == "Running")
                .count()
                == WARM as usize
    })
    .await?;
    let cold = rounds(&ns, "cold", |m| {
        m.values().all(|m| m.free() && m.power == "Stopped")
    })
    .await?;
    print(&format!("warm pool ({WARM} running)"), &warm);
    print("cold pool (members stopped)", &cold);
    println!("goal: warm ≤ 2 s at p95");
    Ok(())
}
