//! Benchmark (prints figures; asserts nothing about memory): the console's resident memory
//! (RSS) over a VNC and an RDP session in the app, beside the blank Tauri app of the same
//! Tauri version (`tests/blank-app`) idle. Release builds under Xvfb through tauri-driver,
//! against the sandbox (a guest with Xvnc and FreeRDP's shadow server, NLA).
//!
//! Figures, for every process of the app (its main process and WebKit's web and network
//! processes), in MiB:
//! - the blank app, [`SETTLE`] after its start;
//! - the console, [`SETTLE`] after the pools are on screen (before);
//! - in each of [`ROUNDS`] rounds: with the console in the app (noVNC) connected, after
//!   [`UPDATES`] full-screen updates; [`SETTLE`] after that view closed; with RDP in the app
//!   (IronRDP's web client) connected, after [`UPDATES`] updates; [`SETTLE`] after it closed;
//! - again [`LATER`] after that (after).
//!
//! The first round's growth that the second does not repeat is kept for reuse, not leaked
//! per session: IronRDP's WebAssembly module (6 MB of script, compiled once) and its memory,
//! which a WebAssembly memory never gives back while the page lives.
//!
//! Run: `make bench` (or `cargo bench -p corral-tests --bench memory`, after
//! `cargo build --release --locked -p corral-vdi-console -p corral-vdi -p corral-blank-app` with
//! the UI built).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use corral_tests::measure::{app_rss, click, launch, mib, release_apps, type_in};
use corral_tests::{client_as, running_vm, vmis};
use sandbox::emulator::knobs::{DEFAULT_RDP_PASSWORD, DEFAULT_RDP_USER, XVNC_DISPLAY_ANNOTATION};

/// How long the app is left alone before its memory is read.
const SETTLE: Duration = Duration::from_secs(5);
/// A second reading after the last view closed, for memory given back late.
const LATER: Duration = Duration::from_secs(30);
/// Full-screen updates the guest paints while a view is open (each one seen by the view).
const UPDATES: usize = 6;
/// Rounds of a VNC and an RDP session: the second shows what each session keeps.
const ROUNDS: usize = 2;

/// The colours painted in turn.
fn colour(i: usize) -> String {
    ["#2080c0", "#c04020", "#30a050"][i % 3].to_owned()
}

fn paint(guest_display: &str, i: usize) {
    let status = Command::new("xsetroot")
        .args(["-display", guest_display, "-solid", &colour(i)])
        .status()
        .expect("run xsetroot");
    assert!(status.success(), "xsetroot: {status}");
}

/// One reading: (what, resident bytes by process name).
type Reading = (String, Vec<(String, u64)>);

fn read(binary: &Path, what: &str) -> Reading {
    (what.to_owned(), app_rss(binary))
}

/// The guest's X display, once the emulator has started it (for the first connection).
///
/// Errors: it did not within 60 s; the API's.
async fn guest_display(admin: &kube::Client, ns: &str, member: &str) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let vmi = vmis(admin, ns).get_opt(member).await?;
        if let Some(display) = vmi
            .and_then(|v| v.metadata.annotations)
            .and_then(|a| a.get(XVNC_DISPLAY_ANNOTATION).cloned())
        {
            return Ok(display);
        }
        anyhow::ensure!(Instant::now() < deadline, "{member} has no guest display");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Paints [`UPDATES`] full-screen updates, a second apart, while a view shows the guest.
async fn updates(guest: &str) {
    for i in 0..UPDATES {
        paint(guest, i);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (blank, console) = release_apps()?;
    let shared = corral_tests::sandbox();
    let (ns, pool, member) = ("corral-vms", "membench", "membench-1");
    running_vm(ns, member, |vm| {
        vm["metadata"]["labels"] = serde_json::json!({ vdi_core::names::POOL_LABEL: pool });
    })
    .await;
    let admin = client_as("admin").await;
    let app = launch(&blank, &shared.kubeconfig).await?;
    tokio::time::sleep(SETTLE).await;
    let blank_idle = read(&blank, "blank app, idle");
    app.close().await;

    let mut readings = Vec::new();
    let app = launch(&console, &shared.kubeconfig).await?;
    let connect = format!("[data-testid='connect-{member}']");
    app.seen(&connect, Duration::from_secs(60)).await?;
    tokio::time::sleep(SETTLE).await;
    readings.push(read(&console, "before"));

    let mut guest: Option<String> = None;
    for round in 1..=ROUNDS {
        click(&app.client, &connect).await?;
        click(&app.client, "[data-testid='open-console']").await?;
        app.says("[data-testid='console-status']", "Connected")
            .await?;
        let display = match guest.take() {
            Some(display) => display,
            None => guest_display(&admin, ns, member).await?,
        };
        updates(&display).await;
        readings.push(read(&console, &format!("{round}: console (VNC) open")));
        click(&app.client, "[data-testid='console-close']").await?;
        app.gone("[data-testid='console-view']").await?;
        tokio::time::sleep(SETTLE).await;
        readings.push(read(&console, &format!("{round}: console closed")));

        click(&app.client, &connect).await?;
        click(&app.client, "[data-testid='open-rdp-in-app']").await?;
        if round == 1 {
            // Asked once: the certificate is known from then on.
            click(&app.client, "[data-testid='rdp-trust-accept']").await?;
        }
        app.seen("[data-testid='rdp-login']", Duration::from_secs(30))
            .await?;
        type_in(
            &app.client,
            "[data-testid='rdp-username']",
            DEFAULT_RDP_USER,
        )
        .await?;
        type_in(
            &app.client,
            "[data-testid='rdp-password']",
            DEFAULT_RDP_PASSWORD,
        )
        .await?;
        click(&app.client, "[data-testid='rdp-login-submit']").await?;
        app.says("[data-testid='rdp-status']", "Connected").await?;
        updates(&display).await;
        readings.push(read(&console, &format!("{round}: RDP in the app open")));
        click(&app.client, "[data-testid='rdp-close']").await?;
        app.gone("[data-testid='rdp-view']").await?;
        tokio::time::sleep(SETTLE).await;
        readings.push(read(&console, &format!("{round}: RDP closed")));
        guest = Some(display);
    }
    tokio::time::sleep(LATER).await;
    readings.push(read(&console, "after, 30 s later"));
    app.close().await;

    let total = |r: &Reading| r.1.iter().map(|(_, b)| b).sum::<u64>();
    let part = |r: &Reading, name: &str| {
        r.1.iter()
            .filter(|(n, _)| n.starts_with(name))
            .map(|(_, b)| b)
            .sum::<u64>()
    };
    println!("RSS in MiB, release builds under Xvfb ({member}: 1024×768 guest)");
    println!(
        "{:<26} {:>8} {:>8} {:>8} {:>8}",
        "", "all", "app", "WebKit web", "network"
    );
    let row = |r: &Reading, app_name: &str| {
        println!(
            "{:<26} {:>8.0} {:>8.0} {:>10.0} {:>8.0}",
            r.0,
            mib(total(r)),
            mib(part(r, app_name)),
            mib(part(r, "WebKitWebProces")),
            mib(part(r, "WebKitNetworkPr")),
        );
    };
    // /proc's Name field holds the first 15 bytes of the command name.
    row(&blank_idle, "corral-blank-ap");
    for r in &readings {
        row(r, "corral-vdi-cons");
    }
    let before = total(&readings[0]);
    let after = total(readings.last().expect("readings"));
    println!(
        "kept after both views closed: {:+.0} MiB over before (goal: about 0)",
        mib(after) - mib(before)
    );
    Ok(())
}
