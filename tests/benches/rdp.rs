//! Benchmark (prints figures; asserts nothing about speed): RDP in the app beside FreeRDP
//! (`xfreerdp`) through the same kind of forward, against the sandbox's RDP server (FreeRDP's
//! shadow server on the guest's Xvnc, NLA), release app under Xvfb:
//!
//! - click → first frame: for the app, from the click on Connect in its login form (the
//!   certificate already accepted) to the first animation frame whose canvas shows the guest's
//!   background; for FreeRDP, from starting `xfreerdp` (NLA as part of it) to its window
//!   showing the same;
//! - full-screen update latency p50 / p95 over [`UPDATES`] updates: the guest's whole
//!   background repainted in a new colour (`xsetroot -solid` on its display) until the client
//!   shows it at one point of the background. The app's page checks its canvas every animation
//!   frame (≈16.7 ms resolution); FreeRDP's window is read by ImageMagick's `import` in a loop
//!   (its resolution, one `import`, is printed). Both clocks are this machine's.
//!
//! Run: `make bench` (or `cargo bench -p corral-tests --bench rdp`, after
//! `cargo build --release --locked -p corral-vdi-console` with the UI built).

use std::process::Command;
use std::time::{Duration, Instant};

use corral_tests::gui::xvfb;
use corral_tests::measure::{between, click, epoch_ms, launch, percentile, release_app, type_in};
use corral_tests::{client_as, running_vm, streams_as, vmis};
use sandbox::emulator::knobs::{DEFAULT_RDP_PASSWORD, DEFAULT_RDP_USER, XVNC_DISPLAY_ANNOTATION};
use vdi_core::session::{SessionKind, Supervisor, Target};

/// Full-screen updates measured per client.
const UPDATES: usize = 12;
/// The point of the guest's screen read (its background: the windows are top left and centre).
const POINT: (u32, u32) = (1000, 740);

/// The colours painted in turn.
fn colour(i: usize) -> [u8; 3] {
    [[0x20, 0x80, 0xC0], [0xC0, 0x40, 0x20], [0x30, 0xA0, 0x50]][i % 3]
}

fn paint(guest_display: &str, rgb: [u8; 3]) {
    let status = Command::new("xsetroot")
        .args(["-display", guest_display, "-solid"])
        .arg(format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]))
        .status()
        .expect("run xsetroot");
    assert!(status.success(), "xsetroot: {status}");
}

fn near(a: [u8; 3], b: [u8; 3]) -> bool {
    (0..3).all(|i| a[i].abs_diff(b[i]) <= 24)
}

/// One pixel of X display `display` (ImageMagick's `import`), or None when it cannot be read.
fn pixel(display: &str, (x, y): (u32, u32)) -> Option<[u8; 3]> {
    let out = Command::new("import")
        .args(["-display", display, "-window", "root", "-crop"])
        .arg(format!("1x1+{x}+{y}"))
        .args(["-depth", "8", "rgb:-"])
        .output()
        .ok()?;
    (out.stdout.len() >= 3).then(|| [out.stdout[0], out.stdout[1], out.stdout[2]])
}

/// The page's watcher: resolves `window.__seen` to the time (ms) the canvas first shows a
/// colour near `arguments[0]` at the point (checked every animation frame).
const WATCH: &str = r#"
const [rgb, x, y] = arguments;
window.__seen = null;
const step = () => {
  const c = document.querySelector(".rdp-frame")?.contentDocument
    ?.querySelector("iron-remote-desktop")?.shadowRoot?.querySelector("canvas");
  if (c && c.width > x) {
    const d = c.getContext("2d").getImageData(x, y, 1, 1).data;
    if ([0, 1, 2].every((i) => Math.abs(d[i] - rgb[i]) <= 24)) { window.__seen = Date.now(); return; }
  }
  requestAnimationFrame(step);
};
requestAnimationFrame(step);
return null;"#;

async fn page_seen(client: &fantoccini::Client, timeout: Duration) -> anyhow::Result<f64> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(at) = client
            .execute("return window.__seen", vec![])
            .await?
            .as_f64()
        {
            return Ok(at);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the canvas never showed the colour"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn summary(name: &str, first: Duration, mut updates: Vec<Duration>, note: &str) {
    updates.sort();
    println!(
        "{name:<16} {:>8} ms {:>8} ms {:>8} ms   {note}",
        first.as_millis(),
        percentile(&updates, 0.5).as_millis(),
        percentile(&updates, 0.95).as_millis()
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let console = release_app("corral-vdi-console")?;
    let shared = corral_tests::sandbox();
    let (ns, pool, member) = ("corral-vms", "rdpbench", "rdpbench-1");
    running_vm(ns, member, |vm| {
        vm["metadata"]["labels"] = serde_json::json!({ vdi_core::names::POOL_LABEL: pool });
    })
    .await;
    let admin = client_as("admin").await;

    // The app: Connect → RDP in the app → certificate → login, as a user clicks.
    let app = launch(&console, &shared.kubeconfig).await?;
    let client = &app.client;
    app.seen(
        &format!("[data-testid='connect-{member}']"),
        Duration::from_secs(60),
    )
    .await?;
    click(client, &format!("[data-testid='connect-{member}']")).await?;
    let asked = epoch_ms();
    click(client, "[data-testid='open-rdp-in-app']").await?;
    click(client, "[data-testid='rdp-trust-accept']").await?;
    let probed = app
        .seen("[data-testid='rdp-login']", Duration::from_secs(30))
        .await?;
    type_in(client, "[data-testid='rdp-username']", DEFAULT_RDP_USER).await?;
    type_in(client, "[data-testid='rdp-password']", DEFAULT_RDP_PASSWORD).await?;

    let annotations = vmis(&admin, ns)
        .get(member)
        .await?
        .metadata
        .annotations
        .unwrap_or_default();
    let guest = annotations[XVNC_DISPLAY_ANNOTATION].clone();
    paint(&guest, colour(0));
    client
        .execute(
            WATCH,
            vec![serde_json::json!(colour(0)), POINT.0.into(), POINT.1.into()],
        )
        .await?;
    let clicked = epoch_ms();
    click(client, "[data-testid='rdp-login-submit']").await?;
    let app_first = between(clicked, page_seen(client, Duration::from_secs(60)).await?);
    let mut app_updates = Vec::with_capacity(UPDATES);
    for i in 1..=UPDATES {
        client
            .execute(
                WATCH,
                vec![serde_json::json!(colour(i)), POINT.0.into(), POINT.1.into()],
            )
            .await?;
        let at = epoch_ms();
        paint(&guest, colour(i));
        app_updates.push(between(
            at,
            page_seen(client, Duration::from_secs(20)).await?,
        ));
    }
    app.close().await;

    // FreeRDP through a forward of the same kind (127.0.0.1, the portforward stream).
    let supervisor = Supervisor::new();
    let forward = supervisor
        .start_forward(
            streams_as("admin").await,
            ns,
            member,
            SessionKind::Rdp,
            Target::Port(3389),
            None,
        )
        .await?;
    let (display, _xvfb) = xvfb();
    let home = std::env::temp_dir().join(format!("corral-rdp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&home)?;
    paint(&guest, colour(0));
    let started = epoch_ms();
    let mut freerdp = tokio::process::Command::new("xfreerdp")
        .env("DISPLAY", &display)
        .env("HOME", &home)
        .arg(format!("/v:127.0.0.1:{}", forward.local.port()))
        .arg(format!("/u:{DEFAULT_RDP_USER}"))
        .arg(format!("/p:{DEFAULT_RDP_PASSWORD}"))
        .args(["/cert:ignore", "/size:1024x768", "-decorations"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let wait_for = |rgb: [u8; 3], deadline: Duration| {
        let display = display.clone();
        async move {
            let until = Instant::now() + deadline;
            loop {
                if pixel(&display, POINT).is_some_and(|p| near(p, rgb)) {
                    return Ok::<f64, anyhow::Error>(epoch_ms());
                }
                anyhow::ensure!(Instant::now() < until, "xfreerdp never showed the colour");
            }
        }
    };
    let freerdp_first = between(started, wait_for(colour(0), Duration::from_secs(60)).await?);
    let probe = Instant::now();
    let _ = pixel(&display, POINT);
    let resolution = probe.elapsed();
    let mut freerdp_updates = Vec::with_capacity(UPDATES);
    for i in 1..=UPDATES {
        let at = epoch_ms();
        paint(&guest, colour(i));
        freerdp_updates.push(between(
            at,
            wait_for(colour(i), Duration::from_secs(20)).await?,
        ));
    }
    let _ = freerdp.kill().await;
    let _ = std::fs::remove_dir_all(&home);

    println!("RDP to {member} (1024×768, NLA), release app; {UPDATES} full-screen updates each");
    println!(
        "{:<16} {:>11} {:>11} {:>11}",
        "", "1st frame", "update p50", "update p95"
    );
    summary(
        "RDP in the app",
        app_first,
        app_updates,
        &format!(
            "(probe + certificate, before the login: {} ms)",
            between(asked, probed).as_millis()
        ),
    );
    summary(
        "FreeRDP",
        freerdp_first,
        freerdp_updates,
        &format!("(read by import, ±{} ms)", resolution.as_millis()),
    );
    Ok(())
}
