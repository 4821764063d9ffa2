//! Benchmark (prints figures beside their goals): the console's start-up and memory against a
//! blank Tauri app of the same Tauri version (`tests/blank-app`), both release builds, started
//! the same way in one run — under Xvfb through tauri-driver — against the same seeded
//! sandbox: time to first paint (the page's `first-contentful-paint`, else `first-paint`), time
//! to the pools on screen (the console only), and the resident memory (RSS) of every process
//! of the app — its main process and WebKit's web and network processes — after 3 s idle.
//! Times count from the WebDriver session request that starts the app; both apps pay the same
//! driver overhead. Median of 3 starts each.
//!
//! Run: `make bench` (or `cargo bench -p corral-tests --bench startup`, after
//! `cargo build --release --locked -p corral-vdi-console -p corral-vdi -p corral-blank-app` with
//! the UI built).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use corral_tests::measure::{app_rss, between, launch, median, mib, release_apps};
use corral_tests::sandbox;

/// What one start measured.
struct Start {
    first_paint: Duration,
    pools: Option<Duration>,
    rss: Vec<(String, u64)>,
}

/// Starts `binary` once, measures, and closes it.
async fn start_once(binary: &Path, pools_css: Option<&str>) -> anyhow::Result<Start> {
    let app = launch(binary, &sandbox().kubeconfig).await?;
    let paint_deadline = Instant::now() + Duration::from_secs(20);
    let first_paint = loop {
        let value = app
            .client
            .execute(
                "const p = performance.getEntriesByType('paint');\
                 const e = p.find(x => x.name === 'first-contentful-paint') || p[0];\
                 return e ? performance.timeOrigin + e.startTime : null",
                vec![],
            )
            .await?;
        if let Some(at) = value.as_f64() {
            break between(app.requested_ms, at);
        }
        anyhow::ensure!(Instant::now() < paint_deadline, "no paint entry");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let pools = match pools_css {
        Some(css) => Some(between(
            app.requested_ms,
            app.seen(css, Duration::from_secs(30)).await?,
        )),
        None => None,
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = app_rss(binary);
    app.close().await;
    Ok(Start {
        first_paint,
        pools,
        rss,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (blank, console) = release_apps()?;
    // The sandbox starts first, so that neither app pays for it.
    let _ = sandbox();
    let mut results: HashMap<&str, Vec<Start>> = HashMap::new();
    for _ in 0..3 {
        results
            .entry("blank")
            .or_default()
            .push(start_once(&blank, None).await?);
        results
            .entry("console")
            .or_default()
            .push(start_once(&console, Some("[data-testid='pool-corral-vms-legacy']")).await?);
    }
    let paint = |app: &str| median(results[app].iter().map(|s| s.first_paint).collect());
    let total = |s: &Start| s.rss.iter().map(|(_, b)| b).sum::<u64>();
    let rss = |app: &str| {
        let mut all: Vec<u64> = results[app].iter().map(total).collect();
        all.sort_unstable();
        all[all.len() / 2]
    };
    let pools = median(results["console"].iter().filter_map(|s| s.pools).collect());
    let (blank_rss, console_rss) = (rss("blank"), rss("console"));
    println!("{:<30} {:>12} {:>12}   goal", "", "blank", "console");
    println!(
        "{:<30} {:>9} ms {:>9} ms   ≤ 800 ms",
        "first paint",
        paint("blank").as_millis(),
        paint("console").as_millis()
    );
    println!(
        "{:<30} {:>12} {:>9} ms   ≤ 1000 ms",
        "pools on screen",
        "-",
        pools.as_millis()
    );
    println!(
        "{:<30} {:>8.0} MiB {:>8.0} MiB   ≤ 1.15 × blank = {:.0} MiB (now {:.2} ×)",
        "RSS, all processes, idle",
        mib(blank_rss),
        mib(console_rss),
        mib(blank_rss) * 1.15,
        console_rss as f64 / blank_rss.max(1) as f64
    );
    for app in ["blank", "console"] {
        let last = results[app].last().map(|s| &s.rss);
        let parts: Vec<String> = last
            .into_iter()
            .flatten()
            .map(|(name, bytes)| format!("{name} {:.0} MiB", mib(*bytes)))
            .collect();
        println!("  {app}: {}", parts.join(", "));
    }
    Ok(())
}
