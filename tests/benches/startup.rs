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
//! `cargo build --release -p corral-vdi-console -p corral-blank-app` with the UI built).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_tests::gui::{free_port, tauri_driver, webdriver, xvfb};
use corral_tests::sandbox;

/// What one start measured.
struct Start {
    first_paint: Duration,
    pools: Option<Duration>,
    rss: Vec<(String, u64)>,
}

/// The release build of `name` in the shared target directory.
fn release_binary(name: &str) -> PathBuf {
    corral_tests::target_dir()
        .parent()
        .expect("the target directory")
        .join("release")
        .join(name)
}

/// Every process as (pid, parent pid, command name, resident bytes).
fn processes() -> Vec<(u32, u32, String, u64)> {
    let mut all = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_owned())
        };
        let name = field("Name:").unwrap_or_default();
        let ppid = field("PPid:").and_then(|v| v.parse().ok()).unwrap_or(0);
        let rss_kib: u64 = field("VmRSS:")
            .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        all.push((pid, ppid, name, rss_kib * 1024));
    }
    all
}

/// RSS of the process running `binary` and of all its descendants, by command name.
fn app_rss(binary: &Path) -> Vec<(String, u64)> {
    let all = processes();
    let root = all.iter().find(|(pid, ..)| {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == binary)
    });
    let Some(&(root, ..)) = root else {
        return Vec::new();
    };
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|p| p.1 == parent).map(|p| p.0));
        i += 1;
    }
    let mut by_name: HashMap<String, u64> = HashMap::new();
    for (pid, _, name, rss) in &all {
        if tree.contains(pid) {
            *by_name.entry(name.clone()).or_default() += rss;
        }
    }
    let mut out: Vec<_> = by_name.into_iter().collect();
    out.sort();
    out
}

fn epoch_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or_default()
}

/// Starts `binary` once, measures, and closes it.
async fn start_once(binary: &Path, pools_css: Option<&str>) -> anyhow::Result<Start> {
    let (display, _xvfb) = xvfb();
    let data_home = std::env::temp_dir().join(format!("corral-startup-{}", free_port()));
    let (port, native_port) = (free_port(), free_port());
    let _driver = tauri_driver(
        port,
        native_port,
        &display,
        &[
            ("KUBECONFIG", sandbox().kubeconfig.display().to_string()),
            ("XDG_DATA_HOME", data_home.display().to_string()),
        ],
    );
    // tauri-driver takes a moment to listen; its readiness is not part of the app's start.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "tauri-driver did not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let requested = epoch_ms();
    let client = webdriver(port, binary).await;
    let paint_deadline = Instant::now() + Duration::from_secs(20);
    let first_paint = loop {
        let value = client
            .execute(
                "const p = performance.getEntriesByType('paint');\
                 const e = p.find(x => x.name === 'first-contentful-paint') || p[0];\
                 return e ? performance.timeOrigin + e.startTime : null",
                vec![],
            )
            .await?;
        if let Some(at) = value.as_f64() {
            break Duration::from_secs_f64(((at - requested) / 1000.0).max(0.0));
        }
        anyhow::ensure!(Instant::now() < paint_deadline, "no paint entry");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut pools = None;
    if let Some(css) = pools_css {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = client
                .execute(
                    "return document.querySelector(arguments[0]) ? Date.now() : null",
                    vec![serde_json::json!(css)],
                )
                .await?;
            if let Some(at) = seen.as_f64() {
                pools = Some(Duration::from_secs_f64(
                    ((at - requested) / 1000.0).max(0.0),
                ));
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the pools never showed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = app_rss(binary);
    let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
    let _ = std::fs::remove_dir_all(&data_home);
    Ok(Start {
        first_paint,
        pools,
        rss,
    })
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let blank = release_binary("corral-blank-app");
    let console = release_binary("corral-vdi-console");
    for binary in [&blank, &console] {
        anyhow::ensure!(
            binary.exists(),
            "{} is missing: cargo build --release -p corral-vdi-console -p corral-blank-app",
            binary.display()
        );
    }
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
