//! End to end: the built desktop app in a real window under Xvfb, driven through WebDriver
//! (tauri-driver in front of WebKitWebDriver), against the sandbox.
//!
//! Needs the app built (`make app`), `tauri-driver` (on PATH or `$TAURI_DRIVER`), `Xvfb` and
//! `WebKitWebDriver`; `make test` provides all of them. Runs only with the `gui` feature.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use corral_tests::gui::{Guard, free_port, tauri_driver, webdriver, xvfb};
use corral_tests::{NamedSandbox, client_as, sandbox, target_dir};
use fantoccini::{Client, Locator};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use vdi_core::labels::POOL_LABEL;
use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};

/// The text content of the first element matching `css`, once it exists (WebKitWebDriver's
/// "visible text" leaves out inline-block badges, so read the DOM's textContent instead).
async fn text_of(client: &Client, css: &str) -> String {
    element(client, css).await;
    let value = client
        .execute(
            "return document.querySelector(arguments[0]).textContent",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap();
    value.as_str().unwrap_or_default().to_owned()
}

/// Whether an element matching `css` is in the DOM now (a script, because WebKitWebDriver's
/// element search can block until its timeout when nothing matches).
async fn exists(client: &Client, css: &str) -> bool {
    client
        .execute(
            "return document.querySelector(arguments[0]) !== null",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap()
        .as_bool()
        .unwrap_or(false)
}

/// The app to drive: `$CORRAL_APP` (the installed one, in the install test), else the build's.
fn app_binary() -> PathBuf {
    std::env::var_os("CORRAL_APP")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("corral-vdi-console"))
}

/// GUI tests take turns: each runs its own Xvfb, tauri-driver and app.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A running app under Xvfb with a WebDriver session on it. Dropping it stops everything.
struct Gui {
    client: Client,
    display: String,
    data_home: PathBuf,
    _driver: Guard,
    _xvfb: Guard,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Gui {
    /// Starts the built app against the test binary's sandbox (current context `admin`).
    async fn launch() -> Gui {
        Self::launch_with(&[]).await
    }

    /// Like [`Gui::launch`], with more environment for the app.
    async fn launch_with(env: &[(&str, String)]) -> Gui {
        Self::launch_on(&sandbox().kubeconfig, env).await
    }

    /// Like [`Gui::launch_with`], against the cluster of `kubeconfig`.
    async fn launch_on(kubeconfig: &std::path::Path, env: &[(&str, String)]) -> Gui {
        let turn = ONE_AT_A_TIME.lock().await;
        let app = app_binary();
        assert!(
            app.exists(),
            "{} is missing: build the app first (make app)",
            app.display()
        );
        let (display, xvfb) = xvfb();
        let data_home = tempdir();
        let (port, native_port) = (free_port(), free_port());
        let mut envs: Vec<(&str, String)> = vec![
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("XDG_DATA_HOME", data_home.display().to_string()),
            ("WEBKIT_DISABLE_COMPOSITING_MODE", "1".into()),
        ];
        envs.extend(env.iter().cloned());
        let driver = tauri_driver(port, native_port, &display, &envs);
        let client = webdriver(port, &app).await;
        Gui {
            client,
            display,
            data_home,
            _driver: driver,
            _xvfb: xvfb,
            _turn: turn,
        }
    }

    /// Saves a screenshot of the X display next to the test binaries and says where (taken by
    /// ImageMagick's `import` from the X server, not through WebDriver, which may never answer
    /// one in some states). A by-product for people to look at; returns the file.
    fn screenshot(&self, name: &str) -> PathBuf {
        let path = target_dir().join(name);
        let status = Command::new("import")
            .args(["-display", &self.display, "-window", "root"])
            .arg(&path)
            .status()
            .expect("run import (apt-get install imagemagick)");
        assert!(status.success(), "import {name}: {status}");
        eprintln!("screenshot: {}", path.display());
        path
    }

    async fn close(self) {
        // Closing the session closes the app's window; if WebDriver does not answer, dropping
        // the guards stops the driver and the display anyway.
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
        let _ = std::fs::remove_dir_all(&self.data_home);
    }
}

#[tokio::test]
async fn the_app_shows_the_legacy_pool_and_follows_the_cluster_live() {
    let gui = Gui::launch().await;
    let client = &gui.client;

    let pool = text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    assert!(
        pool.contains("legacy-2") && pool.contains("alice"),
        "{pool}"
    );
    assert!(pool.contains("assigned (legacy, label-only)"), "{pool}");
    let badge = text_of(client, "[data-testid='identity-badge']").await;
    assert!(badge.contains("admin"), "identity badge says {badge:?}");

    // A labelled VM created through the API appears within 2 s, with no refresh.
    let admin = client_as("admin").await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), "corral-vms");
    let mut vm = VirtualMachine::new("e2e-1", VirtualMachineSpec::default());
    vm.metadata.labels = Some([(POOL_LABEL.to_owned(), "e2e".to_owned())].into());
    let created = Instant::now();
    vms.create(&PostParams::default(), &vm).await.unwrap();
    let appeared = loop {
        if exists(client, "[data-testid='member-e2e-1']").await {
            break created.elapsed();
        }
        assert!(
            created.elapsed() < Duration::from_secs(2),
            "e2e-1 did not appear within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("a new member appeared in the window {appeared:?} after its creation");

    gui.screenshot("e2e-pools.png");

    vms.delete("e2e-1", &DeleteParams::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while exists(client, "[data-testid='member-e2e-1']").await {
        assert!(Instant::now() < deadline, "e2e-1 stayed after deletion");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gui.close().await;
}

/// A fresh directory for the app's data and logs.
fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "corral-e2e-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits until the element matching `css` contains `needle`; returns its text.
async fn wait_text(client: &Client, css: &str, needle: &str) -> String {
    wait_text_within(client, css, needle, Duration::from_secs(20)).await
}

/// Like [`wait_text`], waiting at most `within`.
async fn wait_text_within(client: &Client, css: &str, needle: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if exists(client, css).await {
            let text = text_of(client, css).await;
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{css} says {text:?}, never {needle:?}"
            );
        } else {
            assert!(Instant::now() < deadline, "{css} never appeared");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Clicks the element matching `css` once it exists (a script click: WebKitWebDriver's
/// element commands can block in a modal dialog).
async fn click(client: &Client, css: &str) {
    element(client, css).await;
    client
        .execute(
            "document.querySelector(arguments[0]).click()",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

async fn choose(client: &Client, css: &str, value: &str) {
    element(client, css)
        .await
        .select_by_value(value)
        .await
        .unwrap_or_else(|e| panic!("choose {value} in {css}: {e}"));
}

/// Picks the pool `key` (`<namespace>/<pool>`) in "Get a desktop" as a user does: types the
/// pool's name into the box, then clicks it in the list that opens; panics unless the box then
/// shows it.
async fn pick_pool(client: &Client, key: &str) {
    let (namespace, pool) = key
        .split_once('/')
        .expect("a pool key is <namespace>/<pool>");
    type_into(client, "[data-testid='get-desktop-pool']", pool).await;
    click(client, &format!("[data-testid='get-desktop-option-{key}']")).await;
    let shown = picked_pool(client).await;
    assert!(
        shown.starts_with(&format!("{pool} ({namespace},")),
        "picked {key}, the box shows {shown:?}"
    );
}

/// What "Get a desktop"'s pool box shows.
async fn picked_pool(client: &Client) -> String {
    let shown = js(
        client,
        "return document.querySelector(\"[data-testid='get-desktop-pool']\").value",
    )
    .await;
    shown.as_str().unwrap_or_default().to_owned()
}

/// The `data-testid`s of the options in "Get a desktop"'s open list, in order.
async fn pool_options(client: &Client) -> serde_json::Value {
    js(
        client,
        "return [...document.querySelectorAll('.pool-picker-popup [role=option]')].map(o => o.dataset.testid)",
    )
    .await
}

#[tokio::test]
async fn alice_gets_a_desktop_and_bob_may_not_release_it() {
    let admin = client_as("admin").await;
    corral_tests::pool_vms(&admin, "corral-vms", "desk", 2)
        .await
        .unwrap();
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-desk']").await;

    // alice: "Get a desktop" on pool desk, then it shows under My desktops.
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;
    wait_text(client, "[data-testid='pool-corral-vms-desk']", "2 free").await;
    pick_pool(client, "corral-vms/desk").await;
    click(client, "[data-testid='get-desktop-submit']").await;
    let result = wait_text(client, "[data-testid='action-result']", "you got desk-").await;
    eprintln!("alice's claim: {result}");
    let mine = wait_text(client, "[data-testid='my-desktops']", "desk-").await;
    let member = ["desk-1", "desk-2"]
        .into_iter()
        .find(|m| mine.contains(m))
        .expect("alice's desktop is listed")
        .to_owned();
    assert!(exists(client, &format!("[data-testid='my-desktop-{member}']")).await);
    gui.screenshot("e2e-my-desktops.png");

    // bob: sees it assigned to alice; taking it back is an administrator's force release,
    // offered to him disabled, with the reason.
    choose(client, "[data-testid='context-select']", "bob").await;
    wait_text(client, "[data-testid='identity-badge']", "bob").await;
    wait_text(client, &format!("[data-testid='member-{member}']"), "alice").await;
    let button = format!("[data-testid='unassign-{member}']");
    let reason = wait_attr(client, &button, "data-reason", "only alice can release it").await;
    assert!(is_disabled(client, &button).await, "{reason}");
    eprintln!("bob's release is disabled: {reason}");
    gui.screenshot("e2e-bob-refused.png");

    // Nothing moved on the cluster.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), "corral-vms");
    let lease = leases
        .get(&vdi_core::labels::lease_name(&member))
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("alice")
    );
    gui.close().await;
}

/// Waits until attribute `name` of the element matching `css` contains `needle`; returns it.
async fn wait_attr(client: &Client, css: &str, name: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let value = client
            .execute(
                "const e = document.querySelector(arguments[0]); return e === null ? null : e.getAttribute(arguments[1])",
                vec![serde_json::json!(css), serde_json::json!(name)],
            )
            .await
            .unwrap();
        let value = value.as_str().unwrap_or_default().to_owned();
        if value.contains(needle) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{css} [{name}] is {value:?}, never {needle:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the element matching `css` is disabled.
async fn is_disabled(client: &Client, css: &str) -> bool {
    client
        .execute(
            "return document.querySelector(arguments[0]).disabled === true",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap()
        .as_bool()
        .unwrap_or(false)
}

async fn type_into(client: &Client, css: &str, text: &str) {
    element(client, css)
        .await
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
}

/// The element matching `css`, once it exists (polled with a script: a WebDriver search for an
/// absent element can block).
async fn element(client: &Client, css: &str) -> fantoccini::elements::Element {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !exists(client, css).await {
        assert!(Instant::now() < deadline, "{css} never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("find {css}: {e}"))
}

/// Types `keys` over the whole of Get a desktop's pool box ("zzz", or "zzz" then Tab), a name
/// that matches no pool: the note says so and Get a desktop is disabled.
async fn type_unmatched_pool(client: &Client, keys: &str) {
    js(
        client,
        "document.querySelector(\"[data-testid='get-desktop-pool']\").select(); return null",
    )
    .await;
    type_into(client, "[data-testid='get-desktop-pool']", keys).await;
    let why = wait_text(
        client,
        "[data-testid='get-desktop-blocked']",
        "matches “zzz”",
    )
    .await;
    assert!(
        is_disabled(client, "[data-testid='get-desktop-submit']").await,
        "Get a desktop enabled with {keys:?} typed, which matches no pool: {why}"
    );
}

/// Opens New pool, picks `golden` once the list offers it, and types `name`.
async fn open_new_pool(client: &Client, golden: &str, name: &str) {
    click(client, "[data-testid='new-pool']").await;
    wait_text(client, "[data-testid='golden-select']", golden).await;
    choose(client, "[data-testid='golden-select']", golden).await;
    type_into(client, "[data-testid='pool-name']", name).await;
}

#[tokio::test]
async fn a_pool_of_three_is_created_and_deleted_through_the_dialogs() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    // Get a desktop's pool, shown by default: a new pool sorted before every other one
    // ("a-guipool") does not replace it.
    let picked = picked_pool(client).await;
    assert!(!picked.is_empty(), "no pool shown under Get a desktop");

    open_new_pool(client, "golden-desktop", "a-guipool").await;
    wait_text(client, "[data-testid='new-pool-dialog']", "a-guipool-3").await;
    click(client, "[data-testid='create-submit']").await;
    wait_text(client, "[data-testid='create-progress']", "a-guipool-1").await;
    let result = wait_text(client, "[data-testid='create-result']", "3 members").await;
    eprintln!("create result: {result}");
    for i in 1..=3 {
        assert!(exists(client, &format!("[data-testid='progress-a-guipool-{i}']")).await);
    }
    click(client, "[data-testid='create-close']").await;
    for i in 1..=3 {
        wait_text(
            client,
            "[data-testid='pool-corral-vms-a-guipool']",
            &format!("a-guipool-{i}"),
        )
        .await;
    }

    assert_eq!(picked_pool(client).await, picked);
    gui.screenshot("e2e-pool-created.png");
    click(client, "[data-testid='delete-corral-vms-a-guipool']").await;
    let listed = wait_text(client, "[data-testid='delete-dialog']", "a-guipool-3").await;
    assert!(listed.contains("a-guipool-1"), "{listed}");
    type_into(client, "[data-testid='delete-confirm-name']", "a-guipool").await;
    click(client, "[data-testid='delete-submit']").await;
    wait_text(client, "[data-testid='action-result']", "a-guipool").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while exists(client, "[data-testid='pool-corral-vms-a-guipool']").await {
        assert!(
            Instant::now() < deadline,
            "the deleted pool stayed on screen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let vms: Api<VirtualMachine> = Api::namespaced(client_as("admin").await, "corral-vms");
    let left = vms
        .list(&kube::api::ListParams::default().labels(&format!("{POOL_LABEL}=a-guipool")))
        .await
        .unwrap();
    assert!(
        left.items
            .iter()
            .all(|vm| vm.metadata.deletion_timestamp.is_some())
    );
    gui.close().await;
}

#[tokio::test]
async fn alice_sees_administrator_actions_disabled_with_the_reason_and_admin_does_not() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let guard = wait_text(client, "[data-testid='guard-badge']", "guard").await;
    assert_eq!(guard.trim(), "guard on", "the sandbox has the guard");

    // admin: New pool, Assign… and Delete… are enabled.
    wait_text(client, "[data-testid='identity-badge']", "admin").await;
    let (new_pool, assign, delete) = (
        "[data-testid='new-pool']",
        "[data-testid='assign-corral-vms-legacy']",
        "[data-testid='delete-corral-vms-legacy']",
    );
    // Permissions arrive after the session opens: give them a moment, then they must hold.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for css in [new_pool, assign, delete] {
        assert!(!is_disabled(client, css).await, "admin: {css} is disabled");
    }

    // alice: all three disabled, each with the cluster's reason.
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;
    let blocked = wait_text(
        client,
        "[data-testid='new-pool-blocked']",
        "RBAC does not let you create virtualmachineclones.clone.kubevirt.io",
    )
    .await;
    assert!(is_disabled(client, new_pool).await, "{blocked}");
    let reason = wait_attr(
        client,
        delete,
        "data-reason",
        "RBAC does not let you delete virtualmachines",
    )
    .await;
    assert!(is_disabled(client, delete).await, "{reason}");
    let reason = wait_attr(
        client,
        assign,
        "data-reason",
        "only members of corral-vdi:admins may assign",
    )
    .await;
    assert!(is_disabled(client, assign).await, "{reason}");
    let note = wait_text(client, "[data-testid='denied-note']", "Delete… is off").await;
    assert!(
        note.contains("Assign… is off: only members of corral-vdi:admins"),
        "{note}"
    );
    // What she may do stays offered.
    assert!(!is_disabled(client, "[data-testid='get-desktop-submit']").await);
    gui.screenshot("e2e-alice-permissions.png");
    gui.close().await;
}

/// Runs `script` (a function body) in the page and returns its value.
async fn js(client: &Client, script: &str) -> serde_json::Value {
    client
        .execute(script, vec![])
        .await
        .unwrap_or_else(|e| panic!("script failed: {e}"))
}

/// alice's running desktop from pool `pool` (golden spec members) in `corral-vms`, claimed
/// through the app's "Get a desktop"; returns its name.
async fn alices_running_desktop(client: &Client, pool: &str) -> String {
    for i in 1..=2 {
        corral_tests::desktop_member("corral-vms", pool, &format!("{pool}-{i}"), true).await;
    }
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;
    wait_text(
        client,
        &format!("[data-testid='pool-corral-vms-{pool}']"),
        "2 free",
    )
    .await;
    pick_pool(client, &format!("corral-vms/{pool}")).await;
    click(client, "[data-testid='get-desktop-submit']").await;
    let mine = wait_text(client, "[data-testid='my-desktops']", &format!("{pool}-")).await;
    let member = [format!("{pool}-1"), format!("{pool}-2")]
        .into_iter()
        .find(|m| mine.contains(m.as_str()))
        .expect("alice's desktop is listed");
    corral_tests::wait_power("corral-vms", &member, "Running").await;
    member
}

/// How many distinct colours a grid of the console's canvas shows (a blank screen shows one).
async fn canvas_colours(client: &Client) -> u64 {
    js(
        client,
        r#"const c = document.querySelector("[data-testid='console-screen'] canvas");
           if (!c || c.width === 0) return 0;
           const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
           const seen = new Set();
           for (let y = 0; y < c.height; y += 16)
             for (let x = 0; x < c.width; x += 16) {
               const i = (y * c.width + x) * 4;
               seen.add(d[i] + "," + d[i + 1] + "," + d[i + 2]);
             }
           return seen.size;"#,
    )
    .await
    .as_u64()
    .unwrap_or(0)
}

#[tokio::test]
async fn alice_opens_her_desktops_console_in_the_app_and_stops_it_in_sessions() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let member = alices_running_desktop(client, "cons").await;

    let began = Instant::now();
    click(client, &format!("[data-testid='connect-{member}']")).await;
    wait_attr(client, "[data-testid='path-vnc']", "data-available", "true").await;
    click(client, "[data-testid='open-console']").await;
    wait_attr(
        client,
        "[data-testid='console-status']",
        "data-state",
        "connected",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let colours = loop {
        let n = canvas_colours(client).await;
        if n > 1 {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "the console's canvas stays blank"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "console showed the desktop ({colours} colours) {:?} after Connect",
        began.elapsed()
    );
    let status = text_of(client, "[data-testid='console-status']").await;
    assert!(status.contains("1024×768"), "{status}");
    gui.screenshot("e2e-console.png");

    // Closing the console ends its session; an SSH forward from the same dialog stays
    // until it is stopped in Sessions, which frees its port.
    click(client, "[data-testid='console-close']").await;
    click(client, &format!("[data-testid='connect-{member}']")).await;
    wait_attr(client, "[data-testid='path-ssh']", "data-available", "true").await;
    click(client, "[data-testid='open-ssh']").await;
    let line = wait_text(client, "[data-testid='ssh-command']", "ssh -p ").await;
    let port: u16 = line
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a port in {line:?}"));
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", port)).is_err(),
        "the forward listens on {port}"
    );
    click(client, "[data-testid='connect-close']").await;
    click(client, "[data-testid='sessions-button']").await;
    let view = wait_text(client, "[data-testid='sessions-view']", "port 22").await;
    assert!(view.contains(&member) && view.contains("vnc"), "{view}");
    let rows = js(
        client,
        r#"return [...document.querySelectorAll("[data-testid^='session-']")]
                  .filter(e => /^session-[0-9]+$/.test(e.dataset.testid))
                  .map(e => [e.dataset.testid.slice(8), e.dataset.state, e.textContent]);"#,
    )
    .await;
    let rows = rows.as_array().cloned().unwrap_or_default();
    let state_of = |needle: &str| {
        rows.iter()
            .find(|r| r[2].as_str().is_some_and(|t| t.contains(needle)))
            .map(|r| {
                (
                    r[0].as_str().unwrap().to_owned(),
                    r[1].as_str().unwrap().to_owned(),
                )
            })
            .unwrap_or_else(|| panic!("a session with {needle} in {rows:?}"))
    };
    let (_, console_state) = state_of("vnc");
    assert_eq!(
        console_state, "ended",
        "closing the console ended its session"
    );
    let (ssh_id, ssh_state) = state_of("port 22");
    assert_eq!(ssh_state, "active");
    click(client, &format!("[data-testid='stop-session-{ssh_id}']")).await;
    wait_attr(
        client,
        &format!("[data-testid='session-{ssh_id}']"),
        "data-state",
        "ended",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "port {port} is still taken after Stop"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gui.screenshot("e2e-sessions.png");
    gui.close().await;
}

/// Asks the window titled `title` on `display` to close, as a window manager does
/// (a WM_PROTOCOLS ClientMessage with WM_DELETE_WINDOW).
fn close_window(display: &str, title: &str) {
    use x11rb::connection::Connection;
    use x11rb::protocol::xproto::{AtomEnum, ClientMessageEvent, ConnectionExt, EventMask, Window};
    let (conn, screen) = x11rb::connect(Some(display)).expect("connect to the X display");
    let root = conn.setup().roots[screen].root;
    let atom = |name: &str| {
        conn.intern_atom(false, name.as_bytes())
            .unwrap()
            .reply()
            .unwrap()
            .atom
    };
    let (protocols, delete) = (atom("WM_PROTOCOLS"), atom("WM_DELETE_WINDOW"));
    let mut stack: Vec<Window> = vec![root];
    let mut found = None;
    while let Some(window) = stack.pop() {
        let name = conn
            .get_property(false, window, AtomEnum::WM_NAME, AtomEnum::ANY, 0, 256)
            .ok()
            .and_then(|c| c.reply().ok())
            .map(|r| String::from_utf8_lossy(&r.value).into_owned())
            .unwrap_or_default();
        if name == title {
            found = Some(window);
            break;
        }
        if let Ok(tree) = conn.query_tree(window).unwrap().reply() {
            stack.extend(tree.children);
        }
    }
    let window = found.unwrap_or_else(|| panic!("no window titled {title:?} on {display}"));
    let event = ClientMessageEvent::new(32, window, protocols, [delete, 0, 0, 0, 0]);
    conn.send_event(false, window, EventMask::NO_EVENT, event)
        .unwrap();
    conn.flush().unwrap();
}

/// Process ids of the running processes named `name` on X display `display` (zombies
/// excluded).
fn processes(name: &str, display: &str) -> Vec<u32> {
    let on_display = format!("DISPLAY={display}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
                // Only this test's display: other test runs on the machine have their own.
                && std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|b| *b == 0).any(|v| v == on_display.as_bytes())
                })
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
        })
        .collect()
}

/// Opens the native viewer and an SSH forward on `member` through the Connect dialog; returns
/// the forward's local port.
async fn open_viewer_and_ssh(client: &Client, member: &str) -> u16 {
    click(client, &format!("[data-testid='connect-{member}']")).await;
    wait_attr(client, "[data-testid='path-vnc']", "data-available", "true").await;
    click(client, "[data-testid='open-viewer']").await;
    wait_text(client, "[data-testid='path-result-vnc']", "").await;
    wait_attr(client, "[data-testid='path-ssh']", "data-available", "true").await;
    click(client, "[data-testid='open-ssh']").await;
    let line = wait_text(client, "[data-testid='ssh-command']", "ssh -p ").await;
    click(client, "[data-testid='connect-close']").await;
    line.split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a port in {line:?}"))
}

async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[tokio::test]
async fn helpers_stop_one_by_one_and_all_end_with_the_app() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let member = alices_running_desktop(client, "exitp").await;
    let viewers_before = processes("remote-viewer", &gui.display);

    // One by one: stopping the viewer's session ends remote-viewer; the forward stays.
    let ssh_port = open_viewer_and_ssh(client, &member).await;
    wait_until("remote-viewer started", || {
        processes("remote-viewer", &gui.display).len() > viewers_before.len()
    })
    .await;
    click(client, "[data-testid='sessions-button']").await;
    let id = js(
        client,
        r#"const row = [...document.querySelectorAll("[data-testid^='session-']")]
             .find(e => /^session-[0-9]+$/.test(e.dataset.testid)
                        && e.dataset.state === "active" && e.textContent.includes("remote-viewer"));
           return row ? row.dataset.testid.slice(8) : null;"#,
    )
    .await;
    let id = id
        .as_str()
        .expect("the viewer's session is listed")
        .to_owned();
    click(client, &format!("[data-testid='stop-session-{id}']")).await;
    wait_until("remote-viewer gone after Stop", || {
        processes("remote-viewer", &gui.display).len() == viewers_before.len()
    })
    .await;
    assert!(!port_free(ssh_port), "the SSH forward still listens");
    click(client, "[data-testid='sessions-close']").await;

    // The window closed (as a window manager closes it): every session ends with the app.
    let ssh_port_2 = open_viewer_and_ssh(client, &member).await;
    wait_until("a second remote-viewer", || {
        processes("remote-viewer", &gui.display).len() > viewers_before.len()
    })
    .await;
    let app = processes("corral-vdi-cons", &gui.display);
    assert_eq!(app.len(), 1, "one app runs: {app:?}");
    // As a user clicks the close button again when nothing happens: a WM_DELETE_WINDOW sent
    // while the busy app's event loop has not yet taken the window's protocols can be lost.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !processes("corral-vdi-cons", &gui.display).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the app still runs 30 s after its window was closed"
        );
        close_window(&gui.display, "Corral VDI Console");
        let closed = Instant::now();
        while closed.elapsed() < Duration::from_secs(5)
            && !processes("corral-vdi-cons", &gui.display).is_empty()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    wait_until("helpers gone with the app", || {
        processes("remote-viewer", &gui.display).len() == viewers_before.len()
    })
    .await;
    wait_until("forwards' ports freed", || {
        port_free(ssh_port) && port_free(ssh_port_2)
    })
    .await;
    drop(gui);

    // SIGTERM: the same.
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;
    wait_text(client, "[data-testid='my-desktops']", &member).await;
    let ssh_port_3 = open_viewer_and_ssh(client, &member).await;
    wait_until("a third remote-viewer", || {
        processes("remote-viewer", &gui.display).len() > viewers_before.len()
    })
    .await;
    let app = processes("corral-vdi-cons", &gui.display);
    assert_eq!(app.len(), 1, "{app:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &app[0].to_string()])
        .status();
    wait_until("the app gone after SIGTERM", || {
        processes("corral-vdi-cons", &gui.display).is_empty()
    })
    .await;
    wait_until("helpers gone after SIGTERM", || {
        processes("remote-viewer", &gui.display).len() == viewers_before.len()
    })
    .await;
    wait_until("the forward's port freed", || port_free(ssh_port_3)).await;
    drop(gui);
}

#[tokio::test]
async fn alice_redirects_a_recorded_security_key_into_her_desktop_and_detaches_it() {
    // The app reads a recorded device list (usb-fixture build) and runs the stand-in
    // usbredirect: this machine has no USB bus.
    let path = format!(
        "{}:{}",
        corral_tests::stand_in_usbredirect_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let gui = Gui::launch_with(&[
        (
            "CORRAL_USB_FIXTURE",
            corral_tests::usb_fixture().display().to_string(),
        ),
        ("CORRAL_STAND_IN_DEVICES", "1050:0407,1-7,1-9".to_owned()),
        ("PATH", path),
    ])
    .await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let member = alices_running_desktop(client, "usbp").await;

    click(client, "[data-testid='usb-button']").await;
    let row = wait_text(client, "[data-testid='usb-device-1050-0407']", "YubiKey").await;
    assert!(
        exists(
            client,
            "[data-testid='usb-device-1050-0407'] [data-testid='usb-mark-securityKey']"
        )
        .await,
        "{row}"
    );
    let stick = text_of(client, "[data-testid='usb-access-0781-5567']").await;
    assert!(
        stick.contains("/dev/bus/usb/002/002") && stick.contains("uaccess"),
        "{stick}"
    );
    click(client, "[data-testid='usb-redirect-1050-0407']").await;
    click(client, &format!("[data-testid='usb-target-{member}']")).await;
    let notice = wait_text(client, "[data-testid='usb-notice']", "Live migration").await;
    assert!(notice.contains("full control"), "{notice}");
    gui.screenshot("e2e-usb-confirm.png");
    click(client, "[data-testid='usb-attach']").await;
    let attached = wait_text(client, "[data-testid='usb-attached-1050-0407']", &member).await;
    eprintln!("{attached}");
    let shown = js(
        client,
        r#"return document.querySelectorAll("[data-testid='usb-attached-1050-0407']").length;"#,
    )
    .await;
    assert_eq!(
        shown, 1,
        "only the YubiKey at 1-7 is attached, not its twin at 1-9"
    );
    let vmis = corral_tests::vmis(&client_as("admin").await, "corral-vms");
    let count = |vmi: kube::api::DynamicObject| {
        vmi.metadata
            .annotations
            .and_then(|a| a.get("sandbox.corral.dev/usbredir-attached").cloned())
            .unwrap_or_default()
    };
    wait_until_async("the device attached to the VMI", || async {
        count(vmis.get(&member).await.unwrap()) == "1"
    })
    .await;
    gui.screenshot("e2e-usb-attached.png");
    click(client, "[data-testid='usb-detach-1050-0407']").await;
    wait_until_async("the device detached from the VMI", || async {
        count(vmis.get(&member).await.unwrap()) == "0"
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while exists(client, "[data-testid='usb-attached-1050-0407']").await {
        assert!(Instant::now() < deadline, "still shown as attached");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gui.close().await;
}

async fn wait_until_async<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_installed_app_and_cli_show_the_pools() {
    // scripts/test-install.sh runs this with CORRAL_APP and CORRAL_CLI naming the installed
    // binaries; otherwise it checks the build's own the same way.
    let gui = Gui::launch().await;
    let client = &gui.client;
    let pool = wait_text(client, "[data-testid='pool-corral-vms-legacy']", "legacy-2").await;
    assert!(pool.contains("alice"), "{pool}");
    let shot = gui.screenshot("e2e-installed.png");
    let colours = Command::new("convert")
        .arg(&shot)
        .args(["-format", "%k", "info:"])
        .output()
        .expect("ImageMagick's convert");
    let colours: u32 = String::from_utf8_lossy(&colours.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(
        colours > 50,
        "the window is not one flat colour ({colours} colours)"
    );
    let cli = std::env::var_os("CORRAL_CLI")
        .map(PathBuf::from)
        .unwrap_or_else(corral_tests::cli_binary);
    let out = Command::new(&cli)
        .args(["pool", "list", "-n", "corral-vms"])
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .output()
        .expect("run the CLI");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("legacy (ns/corral-vms"),
        "{}: {stdout}{}",
        cli.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    gui.close().await;
}

/// Sets the `gpus[]` of a VM object's template: one entry per resource.
fn gpus(vm: &mut serde_json::Value, resources: &[&str]) {
    let entries: Vec<serde_json::Value> = resources
        .iter()
        .enumerate()
        .map(|(i, r)| serde_json::json!({ "name": format!("gpu{i}"), "deviceName": r }))
        .collect();
    vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"] = serde_json::json!(entries);
}

#[tokio::test]
async fn the_new_pool_dialog_refuses_a_pool_the_gpus_cannot_hold_and_capacity_follows_live() {
    use sandbox::devices::{DeviceNode, PermitKind};
    const GPU: &str = "nvidia.com/GUI_A10";
    corral_tests::permit_device(PermitKind::Pci, GPU, false).await;
    corral_tests::add_node(DeviceNode::new("gui-gpu-a").devices(GPU, 6, 4)).await;
    corral_tests::add_node(DeviceNode::new("gui-gpu-b").devices(GPU, 0, 0)).await;
    corral_tests::golden_vm("corral-vms", "golden-gpu", "Halted", |vm| gpus(vm, &[GPU])).await;

    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;

    // New pool: five members need five GPUs, one node has four free.
    open_new_pool(client, "golden-gpu", "gpupool").await;
    // Select all (Control+A), then type over it, as a user would.
    let size = "[data-testid='pool-size']";
    type_into(client, size, "\u{e009}a\u{e009}5").await;
    let verdict = wait_text(client, "[data-testid='capacity-verdict']", "Fits 4 of").await;
    assert_eq!(verdict, "Fits 4 of the 5 you ask for.");
    let table = text_of(client, "[data-testid='capacity-table']").await;
    assert!(table.contains("gui-gpu-a"), "{table}");
    assert!(table.contains("gui-gpu-b"), "{table}");
    assert!(is_disabled(client, "[data-testid='create-submit']").await);
    let blocked = text_of(client, "[data-testid='create-blocked']").await;
    assert!(blocked.contains("hold 4 of the 5 members"), "{blocked}");
    // The member preview does not contradict the disabled Create.
    assert_eq!(
        text_of(client, "[data-testid='new-pool-preview']").await,
        "Would create gpupool-1 … gpupool-5"
    );
    gui.screenshot("e2e-capacity-refused.png");

    // Four fit: Create is enabled again.
    type_into(client, size, "\u{e009}a\u{e009}4").await;
    wait_text(client, "[data-testid='capacity-verdict']", "Fits all 4").await;
    wait_attr(
        client,
        "[data-testid='capacity-preview']",
        "data-admitted",
        "true",
    )
    .await;
    assert!(!is_disabled(client, "[data-testid='create-submit']").await);
    assert_eq!(
        text_of(client, "[data-testid='new-pool-preview']").await,
        "Will create gpupool-1 … gpupool-4"
    );
    client
        .find(Locator::Css("[data-testid='new-pool-dialog']"))
        .await
        .unwrap()
        .send_keys("\u{e00c}")
        .await
        .unwrap();

    // The Capacity view: node a hands out 4 of its 6; a VM that starts takes one, live.
    click(client, "[data-testid='capacity-button']").await;
    let row = "[data-testid='cluster-capacity-row'][data-node='gui-gpu-a']";
    let text = wait_text(client, row, GPU).await;
    assert!(text.contains("4 of 6"), "{text}");
    assert_eq!(
        text_of(
            client,
            &format!("{row} [data-testid='cluster-capacity-free']")
        )
        .await,
        "4"
    );
    corral_tests::running_vm("corral-vms", "gpu-user", |vm| gpus(vm, &[GPU])).await;
    wait_text(
        client,
        &format!("{row} [data-testid='cluster-capacity-holders']"),
        "corral-vms/gpu-user",
    )
    .await;
    assert_eq!(
        text_of(
            client,
            &format!("{row} [data-testid='cluster-capacity-free']")
        )
        .await,
        "3"
    );
    gui.screenshot("e2e-capacity-view.png");
    let vms: Api<VirtualMachine> = Api::namespaced(client_as("admin").await, "corral-vms");
    for name in ["gpu-user", "golden-gpu"] {
        vms.delete(name, &DeleteParams::default()).await.unwrap();
    }
    gui.close().await;
}

#[tokio::test]
async fn a_credential_plugin_that_starts_failing_shows_one_banner_while_the_pools_stay() {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    // User gina reads the pools of corral-vms; her kubeconfig runs the test plugin, which
    // issues 30-second client certificates signed by the sandbox's CA.
    let bindings: Api<RoleBinding> = Api::namespaced(client_as("admin").await, "corral-vms");
    let binding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "desktop-gina" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "corral-vdi:desktop-user" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "gina" }]
    }))
    .unwrap();
    let _ = bindings.create(&PostParams::default(), &binding).await;
    let dir = tempdir();
    let plugin = dir.join("gina-login");
    std::fs::copy(target_dir().join("corral-test-cert-plugin"), &plugin)
        .expect("the test plugin (cargo build -p corral-tests)");
    let (log, fail) = (dir.join("runs.log"), dir.join("fail"));
    let sandbox_config = kube::config::Kubeconfig::read_from(&sandbox().kubeconfig).unwrap();
    let cluster = sandbox_config.clusters[0].clone();
    let pki = sandbox().kubeconfig.parent().unwrap().join("pki");
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{ "name": cluster.name, "cluster": serde_json::to_value(cluster.cluster).unwrap() }],
        "users": [{ "name": "gina", "user": { "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": plugin, "interactiveMode": "Never",
            "args": ["--pki", pki, "--user", "gina", "--seconds", "30", "--log", log, "--fail-if", fail],
        } } }],
        "contexts": [{ "name": "gina", "context": { "cluster": cluster.name, "user": "gina" } }],
        "current-context": "gina",
    });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, serde_yaml::to_string(&config).unwrap()).unwrap();

    let gui = Gui::launch_with(&[("KUBECONFIG", kubeconfig.display().to_string())]).await;
    let client = &gui.client;
    wait_text(client, "[data-testid='pool-corral-vms-legacy']", "legacy-1").await;
    // The plugin is renewed at 24 s of the certificate's 30: make that run fail.
    std::fs::write(&fail, "").unwrap();
    let banner = wait_text_within(
        client,
        "[data-testid='banner']",
        "credential plugin failed",
        Duration::from_secs(45),
    )
    .await;
    assert!(
        banner.contains("the refresh token was revoked (refresh_token=[redacted])")
            && !banner.contains("RevokedT0ken"),
        "the plugin's stderr: {banner}"
    );
    gui.screenshot("e2e-credentials-failing.png");
    // Retries follow the backoff (5 s, 10 s, …): after two of them there is still one banner.
    let before = std::fs::read_to_string(&log).unwrap().lines().count();
    tokio::time::sleep(Duration::from_secs(16)).await;
    let tries = std::fs::read_to_string(&log).unwrap().lines().count() - before;
    assert!((1..=3).contains(&tries), "{tries} plugin runs in 16 s");
    let banners = js(
        client,
        "return [...document.querySelectorAll(\"[data-testid='banner']\")]\
         .filter(b => b.textContent.includes('credential plugin failed')).length",
    )
    .await;
    assert_eq!(banners, serde_json::json!(1));
    // The plugin works again: the banner goes.
    std::fs::remove_file(&fail).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while text_of(client, "body")
        .await
        .contains("credential plugin failed")
    {
        assert!(
            Instant::now() < deadline,
            "the banner stayed after the plugin recovered"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    gui.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_theme_switch_turns_the_console_dark_and_is_remembered() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let background = "return getComputedStyle(document.documentElement).backgroundColor";
    // Xvfb's WebKit reports no dark preference: the system theme is light.
    assert_eq!(
        js(client, background).await,
        serde_json::json!("rgb(244, 245, 247)")
    );
    choose(client, "[data-testid='theme-select']", "dark").await;
    assert_eq!(
        js(client, background).await,
        serde_json::json!("rgb(21, 24, 29)")
    );
    gui.screenshot("e2e-dark.png");
    click(client, "[data-testid='capacity-button']").await;
    element(
        client,
        "[data-testid='capacity-empty'], [data-testid='cluster-capacity-table']",
    )
    .await;
    gui.screenshot("e2e-dark-capacity.png");
    click(client, "[data-testid='capacity-close']").await;
    // Remembered across a reload of the page.
    js(
        client,
        "window.beforeReload = true; location.reload(); return null",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A script may fail while the page is between documents: try again.
        let ready = client
            .execute(
                "return window.beforeReload === undefined && \
                 document.querySelector(\"[data-testid='pool-corral-vms-legacy']\") !== null",
                vec![],
            )
            .await;
        if matches!(ready, Ok(serde_json::Value::Bool(true))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reloaded page never showed the pools"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        js(client, background).await,
        serde_json::json!("rgb(21, 24, 29)")
    );
    assert_eq!(
        js(client, "return document.documentElement.dataset.theme").await,
        serde_json::json!("dark")
    );
    choose(client, "[data-testid='theme-select']", "system").await;
    assert_eq!(
        js(client, background).await,
        serde_json::json!("rgb(244, 245, 247)")
    );
    gui.close().await;
}

#[tokio::test]
async fn slash_focuses_the_filter_which_finds_members_by_name_or_holder() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    // "/" from anywhere outside a field focuses the filter.
    client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys("/")
        .await
        .unwrap();
    assert_eq!(
        js(client, "return document.activeElement.dataset.testid").await,
        serde_json::json!("pool-filter")
    );
    // From a list too (the theme's), which keeps its choice.
    let theme = js(
        client,
        "return document.querySelector('[data-testid=theme-select]').value",
    )
    .await;
    js(
        client,
        "document.querySelector('[data-testid=theme-select]').focus(); return null",
    )
    .await;
    // Typed at the keyboard while the list has focus.
    use fantoccini::actions::InputSource;
    client
        .perform_actions(
            fantoccini::actions::KeyActions::new("keyboard".into())
                .then(fantoccini::actions::KeyAction::Down { value: '/' })
                .then(fantoccini::actions::KeyAction::Up { value: '/' }),
        )
        .await
        .unwrap();
    assert_eq!(
        js(client, "return document.activeElement.dataset.testid").await,
        serde_json::json!("pool-filter")
    );
    assert_eq!(
        js(
            client,
            "return document.querySelector('[data-testid=theme-select]').value"
        )
        .await,
        theme
    );
    // (Other tests share the sandbox: count only what is this test's own.)
    type_into(client, "[data-testid='pool-filter']", "legacy-2").await;
    let result = wait_text(client, "[data-testid='pool-filter-result']", "match").await;
    assert!(
        result.starts_with("1 of ") && result.ends_with(", 1 member match \"legacy-2\""),
        "{result}"
    );
    // By holder: alice holds legacy-2 of the legacy pool.
    type_into(
        client,
        "[data-testid='pool-filter']",
        "\u{e009}a\u{e009}alice",
    )
    .await;
    wait_text(client, "[data-testid='pool-filter-result']", "\"alice\"").await;
    let pool = text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    assert!(
        pool.contains("legacy-2") && !pool.contains("legacy-1"),
        "{pool}"
    );
    gui.screenshot("e2e-filter.png");
    type_into(
        client,
        "[data-testid='pool-filter']",
        "\u{e009}a\u{e009}nobody",
    )
    .await;
    wait_text(client, "[data-testid='pool-filter-empty']", "nobody").await;
    // Escape clears it: every member is back.
    type_into(client, "[data-testid='pool-filter']", "\u{e00c}").await;
    let pool = wait_text(client, "[data-testid='pool-corral-vms-legacy']", "legacy-1").await;
    assert!(pool.contains("legacy-3"), "{pool}");
    gui.close().await;
}

#[test]
fn a_dead_wayland_socket_without_an_x_display_ends_with_the_reason_and_the_fix() {
    let runtime = tempdir();
    let out = Command::new(app_binary())
        .env_remove("DISPLAY")
        .env("WAYLAND_DISPLAY", "corral-no-such-socket")
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .output()
        .expect("run the app");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("corral-no-such-socket, which does not exist, and there is no X display")
            && stderr.contains("fix: start it from your desktop session"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&runtime);
}

#[tokio::test]
async fn a_dead_wayland_socket_falls_back_to_the_x_display() {
    let gui = Gui::launch_with(&[("WAYLAND_DISPLAY", "corral-no-such-socket".into())]).await;
    let pool = wait_text(
        &gui.client,
        "[data-testid='pool-corral-vms-legacy']",
        "legacy-2",
    )
    .await;
    assert!(pool.contains("alice"), "{pool}");
    gui.close().await;
}

/// A site's scale: 10,000 VMs in 1,000 pools on a sandbox of their own (made through the API,
/// as the list benchmark does). The pools come up, only what is on screen is in the page, the
/// filter finds one member, End reaches the last pool, and a change to one member shows within
/// a second.
#[tokio::test]
async fn ten_thousand_members_in_a_thousand_pools_stay_usable() {
    let big = corral_tests::start(|o| {
        o.emulate = false;
        o.seed = false;
    })
    .expect("a sandbox of its own");
    let admin = sandbox::kubeconfig::client(&big.kubeconfig, "admin")
        .await
        .unwrap();
    // The sandbox makes the namespace even unseeded (its users' grants live there).
    let started = Instant::now();
    let created = corral_tests::many_pools(&admin, "corral-vms", 0..1_000, 10)
        .await
        .unwrap();
    eprintln!("created {created} VMs in {:.1?}", started.elapsed());

    let gui = Gui::launch_on(&big.kubeconfig, &[]).await;
    let client = &gui.client;
    let launched = Instant::now();
    wait_attr(
        client,
        "[data-testid='pool-list']",
        "data-pool-count",
        "1000",
    )
    .await;
    wait_text(client, "[data-testid='pool-totals']", "10,000 members").await;
    eprintln!(
        "1,000 pools on screen {:.1?} after the WebDriver session",
        launched.elapsed()
    );
    // Only the pools on screen (and a few around them) are in the page.
    let sections = js(
        client,
        "return document.querySelectorAll('section.pool').length",
    )
    .await;
    let sections = sections.as_u64().unwrap();
    assert!(
        (1..=30).contains(&sections),
        "{sections} pool sections in the page"
    );
    gui.screenshot("e2e-scale.png");

    // The filter finds one member among 10,000, and Escape brings everything back.
    type_into(client, "[data-testid='pool-filter']", "pool0567-3").await;
    let result = wait_text(client, "[data-testid='pool-filter-result']", "match").await;
    assert_eq!(result, "1 of 1,000 pools, 1 member match \"pool0567-3\"");
    assert!(exists(client, "[data-testid='member-pool0567-3']").await);
    type_into(client, "[data-testid='pool-filter']", "\u{e00c}").await;
    wait_attr(
        client,
        "[data-testid='pool-list']",
        "data-pool-count",
        "1000",
    )
    .await;

    // "Get a desktop" lists 12 of the 1,000 pools and says how many more; typing narrows the
    // list, and the keyboard takes a pool from it without claiming anything.
    click(client, "[data-testid='get-desktop-pool']").await;
    let note = wait_text(client, ".pool-picker-note", "more").await;
    assert_eq!(note, "988 more: type to narrow them down.");
    assert_eq!(
        pool_options(client).await.as_array().map(Vec::len),
        Some(12)
    );
    accessibility_check(client, "Get a desktop's list open, 1,000 pools").await;
    gui.screenshot("e2e-scale-get-desktop.png");
    type_into(client, "[data-testid='get-desktop-pool']", "pool0567").await;
    wait_attr(
        client,
        "[data-testid='get-desktop-pool']",
        "aria-activedescendant",
        "-0",
    )
    .await;
    assert_eq!(
        pool_options(client).await,
        serde_json::json!(["get-desktop-option-corral-vms/pool0567"])
    );
    type_into(client, "[data-testid='get-desktop-pool']", "\u{e007}").await;
    wait_attr(
        client,
        "[data-testid='get-desktop-pool']",
        "aria-expanded",
        "false",
    )
    .await;
    assert_eq!(picked_pool(client).await, "pool0567 (corral-vms, 10 free)");
    // A claim would show at once as a busy "Get a desktop" (and then a notice).
    assert_eq!(
        js(
            client,
            "return [document.querySelector(\"[data-testid='get-desktop-submit']\").getAttribute('aria-busy'), document.querySelector(\"[data-testid='action-result']\")]"
        )
        .await,
        serde_json::json!([null, null]),
        "Enter in the open list claimed"
    );
    // While typing, the line under the head and the button follow what is typed (no need to
    // leave the box): a name that matches nothing leaves nothing to claim and says why, without
    // moving the page; one that matches offers that pool; Escape goes back to the pick.
    let list_top = "return Math.round(document.querySelector(\"[data-testid='pool-list']\").getBoundingClientRect().top)";
    let top_before = js(client, list_top).await;
    type_unmatched_pool(client, "zzz").await;
    assert_eq!(
        js(client, list_top).await,
        top_before,
        "the note moved the pools"
    );
    type_into(
        client,
        "[data-testid='get-desktop-pool']",
        "\u{e003}\u{e003}\u{e003}pool0568",
    )
    .await;
    wait_text(client, "[data-testid='get-desktop-line']", "pool0568").await;
    assert!(!is_disabled(client, "[data-testid='get-desktop-submit']").await);
    type_into(client, "[data-testid='get-desktop-pool']", "\u{e00c}").await;
    wait_text(client, "[data-testid='get-desktop-line']", "pool0567").await;
    assert_eq!(picked_pool(client).await, "pool0567 (corral-vms, 10 free)");
    // What was typed and matched nothing is not covering the earlier pick: leaving the box
    // leaves nothing to claim, and says why.
    type_unmatched_pool(client, "zzz\u{e004}").await;
    assert_eq!(
        js(
            client,
            "return document.querySelector(\"[data-testid='get-desktop-pool']\").placeholder"
        )
        .await,
        "Type to find a pool",
        "the empty box says there is no pool while 1,000 are offered"
    );

    // End (outside a field) goes to the last pool; Home back to the first.
    js(client, "document.activeElement.blur(); return null").await;
    client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys("\u{e010}")
        .await
        .unwrap();
    let last = wait_text(
        client,
        "[data-testid='pool-corral-vms-pool0999']",
        "pool0999-10",
    )
    .await;
    assert!(last.contains("pool0999-1"), "{last}");
    assert_eq!(
        js(client, ROWS_WHERE_LAID_OUT).await,
        serde_json::json!([]),
        "rows at the end of 10,000 drawn elsewhere than laid out"
    );
    gui.screenshot("e2e-scale-end.png");

    // A change to one member on screen shows within a second.
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), "corral-vms");
    let changed = Instant::now();
    vms.patch_status(
        "pool0999-10",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "status": { "printableStatus": "Running" } })),
    )
    .await
    .unwrap();
    wait_text_within(
        client,
        "[data-testid='member-pool0999-10']",
        "Running",
        Duration::from_secs(1),
    )
    .await;
    eprintln!(
        "the change showed {:.0?} after the patch",
        changed.elapsed()
    );

    client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys("\u{e011}")
        .await
        .unwrap();
    wait_text(
        client,
        "[data-testid='pool-corral-vms-pool0000']",
        "pool0000-1",
    )
    .await;
    gui.close().await;
}

/// The API server freezes and thaws with the app open; then the cluster goes away and comes
/// back on a new address with a new kubeconfig, twice: the app follows the sandbox's own kubeconfig, which `sandbox down` removes
/// with its folder and `sandbox up` writes again. Each time the app says it is reconnecting,
/// then reconnects by itself within 5 s of the new kubeconfig being written, with no banner
/// left over.
#[tokio::test]
async fn the_app_reconnects_by_itself_when_its_cluster_comes_back_on_a_new_address() {
    let cluster = NamedSandbox::new(&format!("recover{}", std::process::id()));
    let kubeconfig = cluster.up();
    let gui = Gui::launch_on(&kubeconfig, &[]).await;
    let client = &gui.client;
    wait_text(client, "[data-testid='pool-corral-vms-legacy']", "legacy-2").await;
    wait_text(client, "[data-testid='feed-status']", "live").await;

    // Frozen (stopped with its connections open): the app says it is reconnecting and dates the
    // pools it keeps by when it was last in sync, not by a time that keeps moving.
    cluster.signal_apiserver("-STOP");
    wait_text(client, "[data-testid='feed-status']", "reconnecting").await;
    wait_text(client, "[data-testid='summary-judged']", "last in sync at").await;
    cluster.signal_apiserver("-CONT");
    wait_text(client, "[data-testid='feed-status']", "live").await;
    wait_text(client, "[data-testid='summary-judged']", "judged at").await;

    for round in 1..=2 {
        cluster.down();
        assert!(
            !kubeconfig.parent().unwrap().exists(),
            "down left the folder"
        );
        // With its kubeconfig gone the app has no cluster to reconnect to.
        wait_text(client, "[data-testid='feed-status']", "offline").await;
        wait_text(
            client,
            ".banners",
            "none of the files KUBECONFIG names exists",
        )
        .await;
        // Nothing of the lost session is offered: one banner, no identity, no actions.
        let offered = js(
            client,
            "return ['[data-testid=banner]', '[data-testid=identity-badge]', \
             '[data-testid=my-desktops]', '[data-testid=new-pool]', \
             '[data-testid=pool-list]'].map((css) => document.querySelectorAll(css).length)",
        )
        .await;
        assert_eq!(offered, serde_json::json!([1, 0, 0, 0, 0]), "round {round}");
        if round == 1 {
            gui.screenshot("e2e-recovery-down.png");
        }

        assert_eq!(cluster.up(), kubeconfig);
        let written = Instant::now();
        wait_text_within(
            client,
            "[data-testid='feed-status']",
            "live",
            Duration::from_secs(5),
        )
        .await;
        wait_text_within(
            client,
            "[data-testid='pool-corral-vms-legacy']",
            "legacy-2",
            Duration::from_secs(5).saturating_sub(written.elapsed()),
        )
        .await;
        eprintln!(
            "round {round}: reconnected {:.1?} after the new kubeconfig was written",
            written.elapsed()
        );
        let banners = js(
            client,
            "return document.querySelector('.banners').textContent",
        )
        .await;
        assert_eq!(
            banners,
            serde_json::json!(""),
            "round {round}: a banner stayed"
        );
        // The kubeconfig appears once the sandbox is whole, so the session it reconnects to
        // finds the guard installed (it used to find it not yet installed, and kept "guard off").
        assert_eq!(
            text_of(client, "[data-testid='guard-badge']").await,
            "guard on",
            "round {round}"
        );
    }
    gui.screenshot("e2e-recovery-back.png");
    gui.close().await;
}

/// alice may not list pools cluster-wide: with All namespaces ticked the app says so (not
/// "offline") and offers namespaces to pick; picking one shows its pools.
#[tokio::test]
async fn all_namespaces_refused_says_so_and_offers_a_namespace() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    choose(client, "[data-testid='context-select']", "alice").await;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    click(client, "[data-testid='all-namespaces']").await;
    let said = wait_text(
        client,
        "[data-testid='all-namespaces-forbidden']",
        "cluster-wide",
    )
    .await;
    assert!(
        said.contains("alice") || said.contains("forbidden"),
        "{said}"
    );
    wait_text(client, "[data-testid='feed-status']", "no access").await;
    // alice holds legacy-2: with nothing readable, My desktops says it cannot tell, never
    // "You have no desktop" or "No pool has a free member".
    wait_text(
        client,
        "[data-testid='my-desktops-unreadable']",
        "cannot be listed",
    )
    .await;
    let card = text_of(client, "[data-testid='my-desktops']").await;
    assert!(
        !card.contains("You have no desktop") && !card.contains("has a free member"),
        "{card}"
    );
    // Said once, where the namespaces are offered: no banner repeats the refusal above it.
    assert_no_banner(client).await;
    gui.screenshot("e2e-all-namespaces-refused.png");
    click(client, "[data-testid='pick-namespace-corral-vms']").await;
    wait_text(client, "[data-testid='pool-corral-vms-legacy']", "legacy-2").await;
    wait_text(client, "[data-testid='feed-status']", "live").await;
    assert_eq!(
        js(
            client,
            "return document.querySelector(\"[data-testid='all-namespaces']\").checked"
        )
        .await,
        serde_json::json!(false)
    );
    gui.close().await;
}

/// A kubeconfig that names no current context: the session the page asks for as it starts
/// (the current context's) is refused, and the window asks to choose a context instead of
/// showing that refusal; choosing one connects.
#[tokio::test]
async fn without_a_current_context_the_app_asks_for_one_and_shows_no_error() {
    let dir = tempdir();
    let kubeconfig = dir.join("config");
    let text = std::fs::read_to_string(&sandbox().kubeconfig).unwrap();
    let without: String = text
        .lines()
        .filter(|line| !line.starts_with("current-context:"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(
        without, text,
        "the sandbox's kubeconfig names a current context"
    );
    std::fs::write(&kubeconfig, without).unwrap();
    let gui = Gui::launch_on(&kubeconfig, &[]).await;
    let client = &gui.client;
    wait_text(client, ".placeholder-title", "Choose a context").await;
    // The early session's refusal has come back (its answer is marked, refused or not), and
    // nothing on screen says it failed.
    wait_until_async("the early session's answer", || async {
        js(
            client,
            "return performance.getEntriesByName('corral:session-opened').length > 0",
        )
        .await
            == serde_json::json!(true)
    })
    .await;
    assert!(!exists(client, "[data-testid='banner']").await);
    assert!(!exists(client, "[data-testid='pool-list']").await);
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='pool-corral-vms-legacy']", "legacy-2").await;
    wait_text(client, "[data-testid='feed-status']", "live").await;
    assert!(!exists(client, "[data-testid='banner']").await);
    gui.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs axe-core (the WCAG 2.0/2.1 A and AA rules) on the page as it is; panics naming every
/// serious or critical finding and where.
async fn accessibility_check(client: &Client, what: &str) {
    let axe = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ui/node_modules/axe-core/axe.min.js");
    let source = std::fs::read_to_string(&axe)
        .unwrap_or_else(|e| panic!("read {} (npm ci in ui/): {e}", axe.display()));
    client
        .execute(&format!("{source}\nreturn null;"), vec![])
        .await
        .expect("load axe-core into the page");
    let found = client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } })
               .then(r => done({ passed: r.passes.length, found: r.violations
                 .filter(v => v.impact === 'serious' || v.impact === 'critical')
                 .map(v => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.slice(0, 4).map(n => n.target.join(' ')).join(' | ')}`) }))
               .catch(e => done({ passed: 0, found: [`axe failed: ${e}`] }));",
            vec![],
        )
        .await
        .expect("run axe-core");
    let passed = found["passed"].as_u64().unwrap_or(0);
    let found: Vec<String> = serde_json::from_value(found["found"].clone())
        .unwrap_or_else(|e| panic!("{what}: axe-core answered {found}: {e}"));
    // Rules that passed prove the check ran on a real page, not on nothing.
    assert!(passed > 10, "{what}: axe-core checked only {passed} rules");
    eprintln!("{what}: {passed} accessibility rules pass");
    assert!(
        found.is_empty(),
        "{what}: {} serious or critical accessibility findings:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// What differs between where the pools list placed its rows (heights from `ui/src/lib/
/// poolRows.ts`) and where the page drew them: each pool's header, column header and member
/// rows stacked without gap or overlap, its box ending where its last row does (plus its
/// border), and no cell's content taller than its row. An empty list means they agree; no pool
/// on screen is a problem too (nothing would have been checked).
const ROWS_WHERE_LAID_OUT: &str = "const problems = [];
const pools = document.querySelectorAll('section.pool');
if (pools.length === 0) problems.push('no pool on screen');
for (const pool of pools) {
  const name = pool.dataset.testid;
  const box = pool.getBoundingClientRect();
  const parts = [pool.querySelector('.pool-head'), pool.querySelector('.member-columns')]
    .filter((e) => e !== null);
  let y = box.top + 1;
  for (const part of parts) {
    const r = part.getBoundingClientRect();
    if (Math.abs(r.top - y) > 0.5) problems.push(`${name}: ${part.className} at ${r.top - box.top}, not ${y - box.top}`);
    y = r.bottom;
  }
  const rows = [...pool.querySelectorAll('.member-row')];
  if (rows.length > 0 && rows[0].getAttribute('aria-rowindex') === '2' && Math.abs(rows[0].getBoundingClientRect().top - y) > 0.5) {
    problems.push(`${name}: its first row at ${rows[0].getBoundingClientRect().top - box.top}, not ${y - box.top}`);
  }
  for (const row of rows) {
    for (const cell of row.children) {
      if (cell.scrollHeight > row.clientHeight + 1) problems.push(`${name}: a cell of ${row.dataset.testid} is ${cell.scrollHeight} px in a ${row.clientHeight} px row`);
    }
  }
  for (let i = 1; i < rows.length; i++) {
    const above = rows[i - 1].getBoundingClientRect();
    const r = rows[i].getBoundingClientRect();
    if (Math.abs(r.top - above.bottom) > 0.5) problems.push(`${name}: ${rows[i].dataset.testid} at ${r.top - box.top}, the row above ends at ${above.bottom - box.top}`);
  }
  const last = rows.at(-1);
  if (last !== undefined && last.classList.contains('member-row-last')) {
    const r = last.getBoundingClientRect();
    if (Math.abs(box.bottom - 1 - r.bottom) > 0.5) problems.push(`${name}: the last row ends at ${r.bottom - box.top}, the box at ${box.height - 1}`);
  }
}
return problems;";

/// Actions cells whose buttons do not fit inside the cell's padding (a cell that does not wrap
/// shows an ellipsis for a button that overflows it): "button texts in row", each.
const CLIPPED_ACTIONS: &str = "return [...document.querySelectorAll('.cell-actions')]
  .filter((cell) => cell.scrollWidth > cell.clientWidth)
  .map((cell) => `${[...cell.querySelectorAll('button')].map((b) => b.textContent.trim()).join(' + ')} in ${cell.parentElement.dataset.testid}`);";

/// The window at its minimum width (900 × 600) and at 1280 × 820, light and dark: no table
/// scrolls sideways and no action button is cut off (every action reachable), and the pools
/// view and the New pool, Capacity, Sessions and USB views pass the accessibility check.
/// Screens saved.
#[tokio::test]
async fn screens_at_900_and_1280_light_and_dark_pass_the_accessibility_check() {
    // The widest actions cell there is: admin's Connect… and Force release… on a running
    // member alice holds (a pool of its own made here through the API, removed at the end).
    corral_tests::desktop_member("corral-vms", "wide", "wide-1", true).await;
    let admin = corral_tests::actor_as("admin").await;
    let held = vdi_core::claim::assign(
        &admin,
        "corral-vms",
        "wide",
        "alice",
        &vdi_core::claim::ClaimOptions::default(),
    )
    .await
    .unwrap();
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    wait_text(
        client,
        &format!("[data-testid='unassign-{}']", held.member),
        "Force release",
    )
    .await;
    element(client, &format!("[data-testid='connect-{}']", held.member)).await;
    for (width, height) in [(900, 600), (1280, 820)] {
        client.set_window_size(width, height).await.unwrap();
        let inner = js(client, "return window.innerWidth").await;
        assert!(
            inner.as_u64().unwrap_or(0) <= u64::from(width),
            "the window did not resize to {width}: {inner}"
        );
        for theme in ["light", "dark"] {
            choose(client, "[data-testid='theme-select']", theme).await;
            let sideways = js(
                client,
                "return [...document.querySelectorAll('.table-wrap')].filter(e => e.scrollWidth > e.clientWidth + 1).length",
            )
            .await;
            assert_eq!(
                sideways,
                serde_json::json!(0),
                "{width}×{height} {theme}: a members table scrolls sideways"
            );
            let clipped = js(client, CLIPPED_ACTIONS).await;
            assert_eq!(
                clipped,
                serde_json::json!([]),
                "{width}×{height} {theme}: action buttons cut off by their cell"
            );
            let misplaced = js(client, ROWS_WHERE_LAID_OUT).await;
            assert_eq!(
                misplaced,
                serde_json::json!([]),
                "{width}×{height} {theme}: rows drawn elsewhere than the list laid them out"
            );
            accessibility_check(client, &format!("pools view, {width}×{height}, {theme}")).await;
            gui.screenshot(&format!("e2e-screen-{width}x{height}-{theme}.png"));
            // "Get a desktop"'s list, open over the pools; Escape closes it.
            click(client, "[data-testid='get-desktop-pool']").await;
            wait_attr(
                client,
                "[data-testid='get-desktop-pool']",
                "aria-expanded",
                "true",
            )
            .await;
            accessibility_check(
                client,
                &format!("Get a desktop's list, {width}×{height}, {theme}"),
            )
            .await;
            gui.screenshot(&format!(
                "e2e-screen-{width}x{height}-{theme}-get-desktop.png"
            ));
            type_into(client, "[data-testid='get-desktop-pool']", "\u{e00c}").await;
            wait_attr(
                client,
                "[data-testid='get-desktop-pool']",
                "aria-expanded",
                "false",
            )
            .await;
            for (button, view) in [
                ("new-pool", "new-pool-dialog"),
                ("capacity-button", "capacity-view"),
                ("sessions-button", "sessions-view"),
                ("usb-button", "usb-view"),
            ] {
                click(client, &format!("[data-testid='{button}']")).await;
                element(client, &format!("[data-testid='{view}']")).await;
                accessibility_check(client, &format!("{view}, {width}×{height}, {theme}")).await;
                client
                    .active_element()
                    .await
                    .unwrap()
                    .send_keys("\u{e00c}")
                    .await
                    .unwrap();
                let deadline = Instant::now() + Duration::from_secs(5);
                while exists(client, &format!("[data-testid='{view}']")).await {
                    assert!(Instant::now() < deadline, "{view} did not close on Escape");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    gui.close().await;
    vdi_core::claim::unassign(
        &admin,
        "corral-vms",
        &held.member,
        &vdi_core::claim::UnassignOptions { force: true },
    )
    .await
    .unwrap();
    Api::<VirtualMachine>::namespaced(admin.client().clone(), "corral-vms")
        .delete(&held.member, &DeleteParams::default())
        .await
        .unwrap();
}

/// Assign, as an administrator: a name with a space around it is refused in the dialog, with the
/// CLI's reason, and nothing is claimed (it is not quietly trimmed into another name); the name
/// as the cluster knows it gets the member.
#[tokio::test]
async fn assign_refuses_a_name_with_a_space_and_takes_the_exact_name() {
    corral_tests::desktop_member("corral-vms", "asg", "asg-1", false).await;
    let admin = client_as("admin").await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "corral-vms");
    let gui = Gui::launch().await;
    let client = &gui.client;
    click(client, "[data-testid='assign-corral-vms-asg']").await;
    type_into(client, "[data-testid='assign-user']", " alice").await;
    click(client, "[data-testid='assign-submit']").await;
    let said = wait_text(
        client,
        "[data-testid='action-error']",
        "starts or ends with a space",
    )
    .await;
    assert!(said.contains("user \" alice\""), "{said}");
    assert!(
        leases.get_opt("corral-vdi-asg-1").await.unwrap().is_none(),
        "a refused assign wrote a Lease"
    );
    js(
        client,
        "document.querySelector(\"[data-testid='assign-user']\").select(); return null",
    )
    .await;
    type_into(client, "[data-testid='assign-user']", "alice").await;
    click(client, "[data-testid='assign-submit']").await;
    wait_text(client, "[data-testid='member-asg-1']", "alice").await;
    let lease = leases.get("corral-vdi-asg-1").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("alice")
    );
    gui.close().await;
    let actor = corral_tests::actor_as("admin").await;
    vdi_core::claim::unassign(
        &actor,
        "corral-vms",
        "asg-1",
        &vdi_core::claim::UnassignOptions { force: true },
    )
    .await
    .unwrap();
    Api::<VirtualMachine>::namespaced(admin, "corral-vms")
        .delete("asg-1", &DeleteParams::default())
        .await
        .unwrap();
}

/// A name the list shows taken is refused in the dialog (Create disabled, with the reason). A
/// create the server refuses before it made anything (a member's name is another pool's VM)
/// offers no Clean up or Retry, which would delete that VM: it says nothing was made, and the
/// VM stays.
#[tokio::test]
async fn a_create_refused_up_front_offers_no_clean_up() {
    let vms: Api<VirtualMachine> = Api::namespaced(client_as("admin").await, "corral-vms");
    corral_tests::desktop_member("corral-vms", "upfront", "taken-1", false).await;
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-upfront']").await;
    open_new_pool(client, "golden-desktop", "legacy").await;
    wait_text(client, "[data-testid='new-pool-exists']", "already exists").await;
    wait_text(client, "[data-testid='create-blocked']", "Choose a name").await;
    assert!(is_disabled(client, "[data-testid='create-submit']").await);
    let preview = text_of(client, "[data-testid='new-pool-preview']").await;
    assert!(preview.starts_with("Would create"), "{preview}");

    // "taken" is no pool's name, but its first member's name is upfront's VM.
    for _ in 0.."legacy".len() {
        type_into(client, "[data-testid='pool-name']", "\u{e003}").await;
    }
    type_into(client, "[data-testid='pool-name']", "taken").await;
    wait_text(
        client,
        "[data-testid='new-pool-preview']",
        "Will create taken-1",
    )
    .await;
    click(client, "[data-testid='create-submit']").await;
    wait_text(client, "[data-testid='create-error']", "taken-1").await;
    wait_text(
        client,
        "[data-testid='create-nothing-made']",
        "nothing to clean up",
    )
    .await;
    assert!(
        !exists(client, "[data-testid='create-clean-up']").await,
        "Clean up offered"
    );
    assert!(
        !exists(client, "[data-testid='create-retry']").await,
        "Retry offered"
    );
    click(client, "[data-testid='create-close']").await;
    let vm = vms.get("taken-1").await.expect("taken-1 is still there");
    assert_eq!(
        vm.labels().get(POOL_LABEL).map(String::as_str),
        Some("upfront")
    );
    gui.close().await;
    vms.delete("taken-1", &DeleteParams::default())
        .await
        .unwrap();
}

/// A create that fails part-way says so in the app's words (no CLI commands), shows the failed
/// member in its own colour, and Clean up removes what it made.
#[tokio::test]
async fn a_failed_create_offers_clean_up_in_the_dialog() {
    corral_tests::add_knob("failClones", "guifail-2").await;
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    open_new_pool(client, "golden-desktop", "guifail").await;
    wait_text(client, "[data-testid='new-pool-dialog']", "guifail-3").await;
    click(client, "[data-testid='create-submit']").await;
    let error = wait_text(client, "[data-testid='create-error']", "guifail-2").await;
    assert!(
        !error.contains("corral-vdi ") && !error.contains("--timeout"),
        "CLI advice in the app: {error}"
    );
    let choices = wait_text(client, "[data-testid='create-choices']", "Clean up").await;
    assert!(choices.contains("2 of 3 members were made"), "{choices}");
    let failed_width = js(
        client,
        "return document.querySelector(\"[data-testid='create-bar-failed']\").getBoundingClientRect().width",
    )
    .await;
    assert!(
        failed_width.as_f64().unwrap_or(0.0) > 0.0,
        "no failed segment"
    );
    gui.screenshot("e2e-create-failed.png");
    click(client, "[data-testid='create-clean-up']").await;
    wait_text(client, "[data-testid='create-cleaned-up']", "guifail").await;
    click(client, "[data-testid='create-close']").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while exists(client, "[data-testid='pool-corral-vms-guifail']").await {
        assert!(Instant::now() < deadline, "the cleaned-up pool stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gui.close().await;
}

/// Asserts that the window shows no banner.
async fn assert_no_banner(client: &Client) {
    assert_eq!(
        js(
            client,
            "return [...document.querySelectorAll(\"[data-testid='banner']\")].map(b => b.textContent)"
        )
        .await,
        serde_json::json!([])
    );
}

/// A claim Lease whose times run off the end of the calendar, and a stray Lease labelled for
/// another pool (tests/lib.rs `poisoned`): the member shows its own problem, the stray Lease is
/// named in its pool's head, and the view stays live with no banner.
#[tokio::test]
async fn a_poisoned_lease_is_shown_as_its_members_problem_while_the_view_stays_live() {
    let (ns, bobs) = corral_tests::poisoned("guipoison").await;
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let input = element(client, "[data-testid='namespace-input']").await;
    input.clear().await.unwrap();
    input.send_keys(&format!("{ns}\u{e007}")).await.unwrap();
    let row = wait_text(
        client,
        &format!("[data-testid='member-{bobs}']"),
        "unreadable claim",
    )
    .await;
    assert!(
        row.contains("bob") && row.contains("cannot be read"),
        "{row}"
    );
    let why = js(
        client,
        &format!(
            "return document.querySelector(\"[data-testid='member-{bobs}'] .lease-problem\").title"
        ),
    )
    .await;
    assert!(
        why.as_str()
            .is_some_and(|t| t.contains("renewTime plus leaseDurationSeconds 3600 is beyond")),
        "{why}"
    );
    let dev = text_of(client, &format!("[data-testid='pool-{ns}-dev']")).await;
    assert!(dev.contains("2 free"), "{dev}");
    assert_eq!(
        text_of(client, &format!("[data-testid='stray-{ns}-legacy']")).await,
        "1 stray Lease"
    );
    wait_text(client, "[data-testid='feed-status']", "live").await;
    assert_no_banner(client).await;
    gui.screenshot("e2e-poisoned-lease.png");
    gui.close().await;
}
