//! The WebDriver side of the GUI tests: [`Gui`] (the built app under Xvfb, one at a time, with a
//! WebDriver session on it) and the steps every feature's tests share: reading, waiting for and
//! clicking elements by CSS selector (through scripts, since WebKitWebDriver's element commands
//! can block), picking a pool, opening New pool, claiming alice a running desktop, the
//! accessibility check and the pools list's layout check.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use corral_tests::gui::{Guard, free_port, tauri_driver, webdriver, xvfb};
use corral_tests::{sandbox, target_dir};
use fantoccini::{Client, Locator};

/// The text content of the first element matching `css`, once it exists (WebKitWebDriver's
/// "visible text" leaves out inline-block badges, so read the DOM's textContent instead).
pub(crate) async fn text_of(client: &Client, css: &str) -> String {
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
pub(crate) async fn exists(client: &Client, css: &str) -> bool {
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
pub(crate) fn app_binary() -> PathBuf {
    std::env::var_os("CORRAL_APP")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("corral-vdi-console"))
}

/// GUI tests take turns: each runs its own Xvfb, tauri-driver and app.
pub(crate) static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A running app under Xvfb with a WebDriver session on it. Dropping it stops everything.
pub(crate) struct Gui {
    pub(crate) client: Client,
    pub(crate) display: String,
    pub(crate) data_home: PathBuf,
    _driver: Guard,
    _xvfb: Guard,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Gui {
    /// Starts the built app against the test binary's sandbox (current context `admin`).
    pub(crate) async fn launch() -> Gui {
        Self::launch_with(&[]).await
    }

    /// Like [`Gui::launch`], with more environment for the app.
    pub(crate) async fn launch_with(env: &[(&str, String)]) -> Gui {
        Self::launch_on(&sandbox().kubeconfig, env).await
    }

    /// Like [`Gui::launch_with`], against the cluster of `kubeconfig`.
    pub(crate) async fn launch_on(kubeconfig: &std::path::Path, env: &[(&str, String)]) -> Gui {
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
    pub(crate) fn screenshot(&self, name: &str) -> PathBuf {
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

    pub(crate) async fn close(self) {
        // Closing the session closes the app's window; if WebDriver does not answer, dropping
        // the guards stops the driver and the display anyway.
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
        let _ = std::fs::remove_dir_all(&self.data_home);
    }
}

/// A fresh directory for the app's data and logs.
pub(crate) fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "corral-e2e-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits until the element matching `css` contains `needle`; returns its text.
pub(crate) async fn wait_text(client: &Client, css: &str, needle: &str) -> String {
    wait_text_within(client, css, needle, Duration::from_secs(20)).await
}

/// Like [`wait_text`], waiting at most `within`.
pub(crate) async fn wait_text_within(
    client: &Client,
    css: &str,
    needle: &str,
    within: Duration,
) -> String {
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
pub(crate) async fn click(client: &Client, css: &str) {
    element(client, css).await;
    client
        .execute(
            "document.querySelector(arguments[0]).click()",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

pub(crate) async fn choose(client: &Client, css: &str, value: &str) {
    element(client, css)
        .await
        .select_by_value(value)
        .await
        .unwrap_or_else(|e| panic!("choose {value} in {css}: {e}"));
}

/// Picks the pool `key` (`<namespace>/<pool>`) in "Get a desktop" as a user does: types the
/// pool's name over what the box shows, then clicks it in the list that opens; panics unless
/// the box then shows it.
pub(crate) async fn pick_pool(client: &Client, key: &str) {
    let (namespace, pool) = key
        .split_once('/')
        .expect("a pool key is <namespace>/<pool>");
    // Whatever the box shows (the pool picked before) is replaced, as a user selects it first.
    replace_text(client, "[data-testid='get-desktop-pool']", pool).await;
    click(client, &format!("[data-testid='get-desktop-option-{key}']")).await;
    let shown = picked_pool(client).await;
    assert!(
        shown.starts_with(&format!("{pool} ({namespace},")),
        "picked {key}, the box shows {shown:?}"
    );
}

/// What "Get a desktop"'s pool box shows.
pub(crate) async fn picked_pool(client: &Client) -> String {
    let shown = js(
        client,
        "return document.querySelector(\"[data-testid='get-desktop-pool']\").value",
    )
    .await;
    shown.as_str().unwrap_or_default().to_owned()
}

/// Waits until attribute `name` of the element matching `css` contains `needle`; returns it.
pub(crate) async fn wait_attr(client: &Client, css: &str, name: &str, needle: &str) -> String {
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
pub(crate) async fn is_disabled(client: &Client, css: &str) -> bool {
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

pub(crate) async fn type_into(client: &Client, css: &str, text: &str) {
    element(client, css)
        .await
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
}

/// Replaces the text of the input matching `css` as a user would: Ctrl+A and Backspace (input
/// events, which React's controlled inputs follow, unlike WebDriver's `clear`, whose emptied
/// value a re-render puts back), waits until the field reads empty, then types `text`.
pub(crate) async fn replace_text(client: &Client, css: &str, text: &str) {
    let input = element(client, css).await;
    // U+E009 holds Control, U+E000 releases every held key, U+E003 is Backspace (WebDriver keys).
    input
        .send_keys("\u{e009}a\u{e000}\u{e003}")
        .await
        .unwrap_or_else(|e| panic!("empty {css}: {e}"));
    let read = format!("return document.querySelector({css:?}).value");
    wait_until_async(&format!("{css} to read empty"), || async {
        js(client, &read).await.as_str() == Some("")
    })
    .await;
    input
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
}

/// The element matching `css`, once it exists (polled with a script: a WebDriver search for an
/// absent element can block).
pub(crate) async fn element(client: &Client, css: &str) -> fantoccini::elements::Element {
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

/// Opens New pool, picks `golden` once the list offers it, and types `name`.
pub(crate) async fn open_new_pool(client: &Client, golden: &str, name: &str) {
    click(client, "[data-testid='new-pool']").await;
    wait_text(client, "[data-testid='golden-select']", golden).await;
    choose(client, "[data-testid='golden-select']", golden).await;
    type_into(client, "[data-testid='pool-name']", name).await;
}

/// Runs `script` (a function body) in the page and returns its value.
pub(crate) async fn js(client: &Client, script: &str) -> serde_json::Value {
    client
        .execute(script, vec![])
        .await
        .unwrap_or_else(|e| panic!("script failed: {e}"))
}

/// Calls the backend's command `command` with `args` from the page, as the UI does (Tauri's
/// `invoke`): its value, or what it rejected with (an `ErrorView`).
pub(crate) async fn invoke(
    client: &Client,
    command: &str,
    args: serde_json::Value,
) -> Result<serde_json::Value, serde_json::Value> {
    let answer = client
        .execute_async(
            r#"const [command, args, done] = arguments;
               window.__TAURI_INTERNALS__.invoke(command, args).then(
                 (value) => done({ value }), (error) => done({ error }));"#,
            vec![command.into(), args],
        )
        .await
        .unwrap_or_else(|e| panic!("invoke {command}: {e}"));
    match answer.get("error") {
        Some(error) => Err(error.clone()),
        None => Ok(answer["value"].clone()),
    }
}

/// alice's running desktop from pool `pool` (golden spec members) in `corral-vms`, claimed
/// through the app's "Get a desktop"; returns its name.
pub(crate) async fn alices_running_desktop(client: &Client, pool: &str) -> String {
    alices_running_desktop_annotated(client, pool, &[]).await
}

/// [`alices_running_desktop`] on members whose VirtualMachines carry `annotations` (the
/// sandbox's guest knobs, read when the VMI starts).
pub(crate) async fn alices_running_desktop_annotated(
    client: &Client,
    pool: &str,
    annotations: &[(&str, &str)],
) -> String {
    let admin = corral_tests::client_as("admin").await;
    for i in 1..=2 {
        let name = format!("{pool}-{i}");
        corral_tests::desktop_member("corral-vms", pool, &name, true).await;
        if !annotations.is_empty() {
            let annotations: serde_json::Map<_, _> = annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
                .collect();
            corral_tests::vms(&admin, "corral-vms")
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(
                        serde_json::json!({ "metadata": { "annotations": annotations } }),
                    ),
                )
                .await
                .unwrap();
        }
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

/// Resizes the window to `width` × `height` and waits until the page is at most `width` wide
/// (the window manager resizes it a moment later).
pub(crate) async fn resize_window(client: &Client, width: u32, height: u32) {
    client.set_window_size(width, height).await.unwrap();
    wait_until_async(&format!("the window resized to {width}"), || async {
        js(client, "return window.innerWidth")
            .await
            .as_u64()
            .is_some_and(|inner| inner <= u64::from(width))
    })
    .await;
}

pub(crate) async fn wait_until_async<F, Fut>(what: &str, mut check: F)
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

/// Runs axe-core (the WCAG 2.0/2.1 A and AA rules) on the page as it is; panics naming every
/// serious or critical finding and where.
pub(crate) async fn accessibility_check(client: &Client, what: &str) {
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
pub(crate) const ROWS_WHERE_LAID_OUT: &str = "const problems = [];
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

/// Asserts that the window shows no banner.
pub(crate) async fn assert_no_banner(client: &Client) {
    assert_eq!(
        js(
            client,
            "return [...document.querySelectorAll(\"[data-testid='banner']\")].map(b => b.textContent)"
        )
        .await,
        serde_json::json!([])
    );
}
