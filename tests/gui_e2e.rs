//! End to end: the built desktop app in a real window under Xvfb, driven through WebDriver
//! (tauri-driver in front of WebKitWebDriver), against the sandbox.
//!
//! Needs the app built (`make app`), `tauri-driver` (on PATH or `$TAURI_DRIVER`), `Xvfb` and
//! `WebKitWebDriver`; `make test` provides all of them. Runs only with the `gui` feature.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corral_tests::{client_as, sandbox, target_dir};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use kube::api::{Api, DeleteParams, PostParams};
use vdi_core::labels::POOL_LABEL;
use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};

/// Kills a child process when dropped (SIGTERM first: tauri-driver must stop its
/// WebKitWebDriver, which a SIGKILL would leave holding its port).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts Xvfb on the first free display number from 90; returns it and its guard.
fn xvfb() -> (String, Guard) {
    for n in 90..140 {
        if std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() {
            continue;
        }
        let display = format!(":{n}");
        let child = Command::new("Xvfb")
            .args([
                display.as_str(),
                "-screen",
                "0",
                "1440x900x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start Xvfb (apt-get install xvfb)");
        let guard = Guard(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() {
                return (display, guard);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("Xvfb {display} did not start");
    }
    panic!("no free X display between :90 and :139");
}

async fn connect(port: u16, app: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "tauri:options".into(),
        serde_json::json!({ "application": app }),
    );
    caps.insert("browserName".into(), serde_json::json!("wry"));
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // tauri-driver speaks plain HTTP on loopback: no TLS stack needed.
        let attempt = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await;
        match attempt {
            Ok(client) => return client,
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for tauri-driver: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("could not start a WebDriver session: {e}"),
        }
    }
}

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
        let turn = ONE_AT_A_TIME.lock().await;
        let app = target_dir().join("corral-vdi-console");
        assert!(
            app.exists(),
            "{} is missing: build the app first (make app)",
            app.display()
        );
        let kubeconfig = sandbox().kubeconfig.clone();
        let (display, xvfb) = xvfb();
        let data_home = tempdir();
        let (port, native_port) = (free_port(), free_port());
        let driver = std::env::var("TAURI_DRIVER").unwrap_or_else(|_| "tauri-driver".into());
        let driver = Guard(
            Command::new(&driver)
                .args([
                    "--port",
                    &port.to_string(),
                    "--native-port",
                    &native_port.to_string(),
                ])
                .env("DISPLAY", &display)
                .env("KUBECONFIG", &kubeconfig)
                .env("XDG_DATA_HOME", &data_home)
                .env("WEBKIT_DISABLE_COMPOSITING_MODE", "1")
                .stdout(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {driver} (cargo install tauri-driver): {e}")),
        );
        let client = connect(port, &app).await;
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
    let deadline = Instant::now() + Duration::from_secs(20);
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
    choose(
        client,
        "[data-testid='get-desktop-pool']",
        "corral-vms/desk",
    )
    .await;
    click(client, "[data-testid='get-desktop-submit']").await;
    let result = wait_text(client, "[data-testid='action-result']", "alice").await;
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

#[tokio::test]
async fn a_pool_of_three_is_created_and_deleted_through_the_dialogs() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;

    click(client, "[data-testid='new-pool']").await;
    wait_text(client, "[data-testid='golden-select']", "golden-desktop").await;
    choose(client, "[data-testid='golden-select']", "golden-desktop").await;
    type_into(client, "[data-testid='pool-name']", "guipool").await;
    wait_text(client, "[data-testid='new-pool-dialog']", "guipool-3").await;
    click(client, "[data-testid='create-submit']").await;
    wait_text(client, "[data-testid='create-progress']", "guipool-1").await;
    let result = wait_text(client, "[data-testid='create-result']", "3 members").await;
    eprintln!("create result: {result}");
    for i in 1..=3 {
        assert!(exists(client, &format!("[data-testid='progress-guipool-{i}']")).await);
    }
    click(client, "[data-testid='create-close']").await;
    for i in 1..=3 {
        wait_text(
            client,
            "[data-testid='pool-corral-vms-guipool']",
            &format!("guipool-{i}"),
        )
        .await;
    }

    gui.screenshot("e2e-pool-created.png");
    click(client, "[data-testid='delete-corral-vms-guipool']").await;
    let listed = wait_text(client, "[data-testid='delete-dialog']", "guipool-3").await;
    assert!(listed.contains("guipool-1"), "{listed}");
    type_into(client, "[data-testid='delete-confirm-name']", "guipool").await;
    click(client, "[data-testid='delete-submit']").await;
    wait_text(client, "[data-testid='action-result']", "guipool").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while exists(client, "[data-testid='pool-corral-vms-guipool']").await {
        assert!(
            Instant::now() < deadline,
            "the deleted pool stayed on screen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let vms: Api<VirtualMachine> = Api::namespaced(client_as("admin").await, "corral-vms");
    let left = vms
        .list(&kube::api::ListParams::default().labels(&format!("{POOL_LABEL}=guipool")))
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
