//! Benchmark (prints figures beside their goals; asserts nothing about speed): the console's
//! window at 1,000 and at 10,000 VMs (10 per pool, made through the API as the list benchmark
//! does), release builds under Xvfb against a sandbox of its own:
//!
//! - launch → pools on screen: from the WebDriver session request that starts the app to the
//!   list holding every pool (`data-pool-count`), the median of [`LAUNCHES`] launches (each
//!   printed, with where its time went);
//! - RSS of all the app's processes after 3 s idle, against a blank Tauri app measured in the
//!   same run (`tests/blank-app`);
//! - scroll frame time p50 / p95: the main area scrolled from top to bottom at 1,000 px per
//!   animation frame (a new screen every frame) and at 100 px per frame (a mouse wheel's
//!   pace), each frame's time being the gap between two `requestAnimationFrame` callbacks
//!   (WebKit's clock has 1 ms resolution: a frame on every vsync of a 60 Hz display, 16.7 ms,
//!   reads 16 or 17 ms, so a p95 of 17 ms means 95 % of the frames made their vsync); the
//!   wheel's pace is scrolled [`WHEEL_RUNS`] times and the run with the median share of frames
//!   over a vsync (read over 17 ms) counts, each printed; the blank app scrolling
//!   a long plain page of text rows the same ways is the baseline of the same webview on the
//!   same display;
//! - cluster change → row updated: a member's `status.printableStatus` patched, until its row
//!   says so (a MutationObserver in the page; both clocks are this machine's), median of 5.
//!
//! Run: `make bench` (or `cargo bench -p corral-tests --bench ui_scale`, after
//! `cargo build --release --locked -p corral-vdi-console -p corral-vdi -p corral-blank-app` with
//! the UI built).

use std::path::Path;
use std::time::Duration;

use fantoccini::wd::TimeoutConfiguration;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use vdi_core::resources::VirtualMachine;

use corral_tests::measure::{
    Launched, app_rss, between, epoch_ms, launch, median, mib, release_apps,
};

const NAMESPACE: &str = "corral-vms";
const PER_POOL: usize = 10;

/// Scrolls the main area down `arguments[0]` px a frame from the top to the bottom; resolves to
/// the frame times (ms).
const SCROLL: &str = "const [by, done] = arguments;
const main = document.querySelector('main.app-main');
main.scrollTop = 0;
const frames = [];
let last = 0;
const step = (now) => {
  frames.push(now - last);
  last = now;
  if (main.scrollTop + main.clientHeight >= main.scrollHeight - 1) { done(frames); return; }
  main.scrollTop += by;
  requestAnimationFrame(step);
};
requestAnimationFrame((now) => { last = now; main.scrollTop += by; requestAnimationFrame(step); });";

/// A new screen every frame (px per frame).
const SCREENS: u32 = 1_000;
/// A mouse wheel's pace (px per frame).
const WHEEL: u32 = 100;

/// How many times the whole list is scrolled at [`WHEEL`]: one run swings by several
/// milliseconds of p95 when the 2-core machine is busy elsewhere for a moment.
const WHEEL_RUNS: usize = 3;

/// A frame read longer than this (ms) missed its vsync (see the module docs).
const VSYNC_READ_MS: f64 = 17.0;

/// Replaces the page with a plain one of `arguments[0]` text rows, 32 px each, in a scrolling
/// `main.app-main` (what [`SCROLL`] scrolls): the same webview's baseline for scrolling.
const PLAIN_PAGE: &str = "const rows = arguments[0];
document.body.innerHTML = '';
document.body.style.margin = '0';
const main = document.createElement('main');
main.className = 'app-main';
main.style.cssText = 'height: 100vh; overflow: auto; font: 14px sans-serif';
const lines = [];
for (let i = 0; i < rows; i++) lines.push(`<div style=\"height: 32px; border-bottom: 1px solid #ddd\">row ${i}</div>`);
main.innerHTML = lines.join('');
document.body.appendChild(main);
return main.scrollHeight;";

/// Rows of [`PLAIN_PAGE`]: a long page (its height is printed beside its frame times, which
/// are compared per frame, not per page).
const PLAIN_ROWS: u64 = 12_800;

/// Runs [`SCROLL`] in `client`'s page at `by` px per frame; the frame times (ms), sorted.
///
/// Errors: WebDriver failed, or no frame was measured.
async fn scroll_frames(client: &fantoccini::Client, by: u32) -> anyhow::Result<Vec<f64>> {
    client
        .update_timeouts(TimeoutConfiguration::new(
            Some(Duration::from_secs(300)),
            None,
            None,
        ))
        .await?;
    let frames = client.execute_async(SCROLL, vec![json!(by)]).await?;
    let mut frames: Vec<f64> = frames
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
        .unwrap_or_default();
    frames.sort_by(f64::total_cmp);
    anyhow::ensure!(!frames.is_empty(), "no frames measured");
    Ok(frames)
}

/// Resolves to `Date.now()` once the row `arguments[0]` contains `arguments[1]`.
const WAIT_ROW: &str = "const [id, text, done] = arguments;
const row = () => document.querySelector(`[data-testid='member-${id}']`);
const check = () => { const r = row(); return r !== null && r.textContent.includes(text); };
if (check()) { done(Date.now()); return; }
const observer = new MutationObserver(() => {
  if (check()) { observer.disconnect(); done(Date.now()); }
});
observer.observe(document.body, { subtree: true, childList: true, characterData: true });";

/// The page's start and the console's start-up marks (`ui/src/lib/timing.ts`), as
/// `[name, epoch ms]` pairs: where the time to pools on screen goes.
const MILESTONES: &str = "return [['page', performance.timeOrigin]].concat(
  performance.getEntriesByType('mark')
    .filter((m) => m.name.startsWith('corral:'))
    .map((m) => [m.name.slice(7), performance.timeOrigin + m.startTime]));";

/// How many times each scale's app is launched for the time to pools on screen. One launch
/// right after the bulk creation of the VMs swings by a second on this 2-core machine, and
/// WebKit's own start by ±0.3 s.
const LAUNCHES: usize = 5;

/// One launch's time to pools on screen, and each start-up milestone's time since the launch
/// request (ms), in the order they happened.
struct Launch {
    pools_on_screen: Duration,
    milestones: Vec<(String, f64)>,
}

/// One scale's figures.
struct Figures {
    vms: usize,
    /// Every launch, fastest first.
    launches: Vec<Launch>,
    rss: u64,
    /// Frame times (ms, sorted) at [`SCREENS`], and of each run at [`WHEEL`] (in the order of
    /// their shares of frames over a vsync).
    frames: Vec<f64>,
    wheel: Vec<Vec<f64>>,
    change: Duration,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// The share (%) of `frames` (ms) that missed their vsync.
fn over_vsync(frames: &[f64]) -> f64 {
    let over = frames.iter().filter(|&&ms| ms > VSYNC_READ_MS).count();
    100.0 * over as f64 / frames.len().max(1) as f64
}

/// ", the median" for item `i` of `len` sorted items when it is the one counted, else "".
fn median_mark(i: usize, len: usize) -> &'static str {
    if i == len / 2 { ", the median" } else { "" }
}

/// "p50 / p95" of sorted frame times (ms).
fn p50_p95(sorted: &[f64]) -> String {
    format!(
        "{:.1} / {:.1}",
        percentile(sorted, 0.5),
        percentile(sorted, 0.95)
    )
}

/// Launches the console and waits for all `pools` on screen.
async fn launch_until_pools(
    console: &Path,
    kubeconfig: &Path,
    pools: usize,
) -> anyhow::Result<(Launched, Launch)> {
    let app = launch(console, kubeconfig).await?;
    let css = format!("[data-testid='pool-list'][data-pool-count='{pools}']");
    let pools_on_screen = between(
        app.requested_ms,
        app.seen(&css, Duration::from_secs(120)).await?,
    );
    let milestones = app
        .client
        .execute(MILESTONES, vec![])
        .await?
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                m.get(0)?.as_str()?.to_owned(),
                m.get(1)?.as_f64()? - app.requested_ms,
            ))
        })
        .collect();
    Ok((
        app,
        Launch {
            pools_on_screen,
            milestones,
        },
    ))
}

async fn measure(
    console: &Path,
    kubeconfig: &Path,
    api: &Api<VirtualMachine>,
    pools: usize,
) -> anyhow::Result<Figures> {
    let mut launches = Vec::new();
    for _ in 1..LAUNCHES {
        let (app, launched) = launch_until_pools(console, kubeconfig, pools).await?;
        launches.push(launched);
        app.close().await;
    }
    // The last launch stays open for the other figures.
    let (app, launched) = launch_until_pools(console, kubeconfig, pools).await?;
    launches.push(launched);
    launches.sort_by_key(|l| l.pools_on_screen);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = app_rss(console).iter().map(|(_, b)| b).sum();

    let frames = scroll_frames(&app.client, SCREENS).await?;
    let mut wheel = Vec::new();
    for _ in 0..WHEEL_RUNS {
        wheel.push(scroll_frames(&app.client, WHEEL).await?);
    }
    wheel.sort_by(|a, b| over_vsync(a).total_cmp(&over_vsync(b)));

    // Back to the top, where the members changed below are on screen.
    app.client
        .execute(
            "document.querySelector('main.app-main').scrollTop = 0; return null",
            vec![],
        )
        .await?;
    let mut changes = Vec::new();
    for i in 1..=5 {
        let member = format!("pool0000-{i}");
        let (seen, sent) = tokio::join!(
            app.client
                .execute_async(WAIT_ROW, vec![json!(member), json!("Running")]),
            async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let sent = epoch_ms();
                api.patch_status(
                    &member,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": { "printableStatus": "Running" } })),
                )
                .await
                .map(|_| sent)
            }
        );
        let (seen, sent) = (seen?, sent?);
        let seen = seen
            .as_f64()
            .ok_or_else(|| anyhow::anyhow!("no time from the page"))?;
        changes.push(between(sent, seen));
    }
    app.close().await;
    Ok(Figures {
        vms: pools * PER_POOL,
        launches,
        rss,
        frames,
        wheel,
        change: median(changes),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (blank, console) = release_apps()?;
    let shared = corral_tests::start(|o| {
        o.emulate = false;
        o.seed = false;
    })?;
    let admin = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
    // The sandbox makes the namespace even unseeded (its users' grants live there).
    let api: Api<VirtualMachine> = Api::namespaced(admin.clone(), NAMESPACE);

    let app = launch(&blank, &shared.kubeconfig).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let blank_rss: u64 = app_rss(&blank).iter().map(|(_, b)| b).sum();
    let height = app
        .client
        .execute(PLAIN_PAGE, vec![json!(PLAIN_ROWS)])
        .await?;
    let plain = scroll_frames(&app.client, SCREENS).await?;
    let plain_wheel = scroll_frames(&app.client, WHEEL).await?;
    app.close().await;

    let mut results = Vec::new();
    let mut made = 0;
    for (pools, rss_goal) in [(100, 1.15), (1_000, 1.5)] {
        corral_tests::many_pools(&admin, NAMESPACE, made..pools, PER_POOL).await?;
        made = pools;
        // Members changed by the previous scale's run go back to no status.
        for i in 1..=5 {
            api.patch_status(
                &format!("pool0000-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": null })),
            )
            .await?;
        }
        results.push((
            measure(&console, &shared.kubeconfig, &api, pools).await?,
            rss_goal,
        ));
    }

    println!(
        "blank Tauri app, all processes idle: {:.0} MiB",
        mib(blank_rss)
    );
    println!(
        "blank Tauri app, a plain page of {PLAIN_ROWS} text rows ({} px) scrolled the same ways: \
         frame p50 / p95 {} ms a screen a frame, {} ms at a wheel's pace ({:.1} % of its frames \
         over a vsync)",
        height,
        p50_p95(&plain),
        p50_p95(&plain_wheel),
        over_vsync(&plain_wheel),
    );
    println!(
        "{:>7} {:>16} {:>14} {:>10} {:>18} {:>18} {:>14}",
        "VMs", "pools on screen", "RSS", "× blank", "screen/frame", "wheel", "change → row"
    );
    println!(
        "{:>7} {:>16} {:>14} {:>10} {:>18} {:>18}",
        "", "", "", "", "p50 / p95", "p50 / p95"
    );
    for (f, rss_goal) in &results {
        let median = &f.launches[f.launches.len() / 2];
        println!(
            "{:>7} {:>13} ms {:>10.0} MiB {:>6.2} × {:>15} ms {:>15} ms {:>11} ms",
            f.vms,
            median.pools_on_screen.as_millis(),
            mib(f.rss),
            f.rss as f64 / blank_rss.max(1) as f64,
            p50_p95(&f.frames),
            p50_p95(&f.wheel[f.wheel.len() / 2]),
            f.change.as_millis(),
        );
        for (i, launch) in f.launches.iter().enumerate() {
            let steps: Vec<String> = launch
                .milestones
                .iter()
                .map(|(name, ms)| format!("{name} {ms:.0}"))
                .collect();
            println!(
                "{:>7} a launch (of {LAUNCHES}, fastest first){}: pools on screen {} ms; since \
                 launch (ms): {}",
                "",
                median_mark(i, f.launches.len()),
                launch.pools_on_screen.as_millis(),
                steps.join(", ")
            );
        }
        for (i, run) in f.wheel.iter().enumerate() {
            println!(
                "{:>7} a wheel run (of {WHEEL_RUNS}, fewest missed vsyncs first){}: p50 / p95 {} ms, {:.1} % of {} \
                 frames over a vsync",
                "",
                median_mark(i, f.wheel.len()),
                p50_p95(run),
                over_vsync(run),
                run.len()
            );
        }
        println!(
            "{:>7} goals: pools ≤ 1500 ms at 10,000; RSS ≤ {rss_goal} × blank; frame p95 ≤ 16.7 ms \
             (a p95 read as 17 ms is on vsync; {} frames a screen a frame)",
            "",
            f.frames.len(),
        );
    }
    Ok(())
}
