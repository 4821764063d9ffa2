//! RDP in the app: Connect → RDP in the app against the sandbox's real RDP server (FreeRDP's
//! shadow server, NLA only): the certificate asked about once, a wrong password refused once
//! with nothing left running, then the guest's desktop on the canvas (compared with the
//! guest's own screen), a second Unix user shut out of the proxy's port, text typed in the
//! app arriving in the guest, the stream dropped and Reconnect showing the desktop again; the
//! login remembered
//! in the OS keyring (a GNOME Keyring on a private session bus) and in no file of the app.
//! Against the sandbox's xrdp guest (clipboard and display control, TLS without NLA): clipboard
//! text both ways, the window refused the OS clipboard before and after the session, the
//! guest's screen following the window's size, and a certificate other than the one accepted
//! shown beside it and asked about again.

use std::process::Command;
use std::time::{Duration, Instant};

use fantoccini::Client;
use sandbox::emulator::knobs::{
    DEFAULT_RDP_PASSWORD, DEFAULT_RDP_USER, RDP_SERVER_ANNOTATION, TYPED_TEXT_ANNOTATION, XRDP,
    XVNC_DISPLAY_ANNOTATION,
};
use sandbox::emulator::xrdp::{clipboard_text, screen_size, set_clipboard_text};

use crate::driver::{
    Gui, alices_running_desktop, alices_running_desktop_annotated, click, exists, invoke, js,
    replace_text, tempdir, text_of, type_into, wait_attr, wait_text,
};

/// The RDP canvas, inside the web component's shadow root, inside the frame the view runs the
/// client in (ui/src/rdpFrame.ts).
const CANVAS: &str = r#"document.querySelector(".rdp-frame")?.contentDocument
    ?.querySelector("iron-remote-desktop")?.shadowRoot?.querySelector("canvas")"#;

/// Gives the canvas the keyboard focus, as a click into the picture does (the frame, then the
/// canvas in it), and presses `keys` there as key actions, one after another: they go to the
/// focused element, which WebDriver cannot name inside the frame's shadow root. A left-hand
/// modifier (`\u{E008}` Shift, `\u{E009}` Ctrl, `\u{E00A}` Alt, `\u{E03D}` Meta) is held until
/// `\u{E000}` or the end; nothing else of element send keys is copied (no Shift is added for
/// capitals): the callers send lower-case text, digits, Ctrl+C and Enter.
async fn keys_to_canvas(client: &Client, keys: &str) {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    js(
        client,
        &format!(
            r#"document.querySelector(".rdp-frame").contentWindow.focus(); {CANVAS}.focus();
               return null;"#
        ),
    )
    .await;
    const MODIFIERS: [char; 4] = ['\u{E008}', '\u{E009}', '\u{E00A}', '\u{E03D}'];
    let mut held = Vec::new();
    let mut actions = KeyActions::new("keyboard".into());
    for key in keys.chars() {
        if MODIFIERS.contains(&key) {
            held.push(key);
            actions = actions.then(KeyAction::Down { value: key });
        } else if key == '\u{E000}' {
            for value in held.drain(..).rev() {
                actions = actions.then(KeyAction::Up { value });
            }
        } else {
            actions = actions
                .then(KeyAction::Down { value: key })
                .then(KeyAction::Up { value: key });
        }
    }
    for value in held.drain(..).rev() {
        actions = actions.then(KeyAction::Up { value });
    }
    client.perform_actions(actions).await.unwrap();
}

/// The canvas's size and its colours at every 32nd pixel of every 32nd row (RGB triples), or
/// null before it has a size.
async fn canvas_grid(client: &Client) -> Option<(u64, u64, Vec<[u8; 3]>)> {
    let value = js(
        client,
        &format!(
            r#"const c = {CANVAS};
               if (!c || c.width === 0) return null;
               const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
               const out = [];
               for (let y = 16; y < c.height; y += 32)
                 for (let x = 16; x < c.width; x += 32) {{
                   const i = (y * c.width + x) * 4;
                   out.push([d[i], d[i + 1], d[i + 2]]);
                 }}
               return [c.width, c.height, out];"#
        ),
    )
    .await;
    let array = value.as_array()?;
    let grid = array[2]
        .as_array()?
        .iter()
        .map(|p| {
            let p = p.as_array().expect("a pixel");
            [0, 1, 2].map(|i| p[i].as_u64().expect("a channel") as u8)
        })
        .collect();
    Some((array[0].as_u64()?, array[1].as_u64()?, grid))
}

/// The guest's own screen (its Xvnc display, read by ImageMagick) at the same points.
fn guest_grid(display: &str, width: u64, height: u64) -> Vec<[u8; 3]> {
    let out = Command::new("import")
        .args([
            "-display", display, "-window", "root", "-depth", "8", "rgb:-",
        ])
        .output()
        .expect("run import");
    assert!(
        out.status.success(),
        "import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.stdout.len() as u64,
        width * height * 3,
        "the guest's screen is {width}×{height}"
    );
    let mut grid = Vec::new();
    for y in (16..height).step_by(32) {
        for x in (16..width).step_by(32) {
            let i = ((y * width + x) * 3) as usize;
            grid.push([out.stdout[i], out.stdout[i + 1], out.stdout[i + 2]]);
        }
    }
    grid
}

/// The share of points whose colours differ by at most 24 in every channel (RDP's codecs may
/// round).
fn agreement(a: &[[u8; 3]], b: &[[u8; 3]]) -> f64 {
    let same = a
        .iter()
        .zip(b)
        .filter(|(p, q)| (0..3).all(|i| p[i].abs_diff(q[i]) <= 24))
        .count();
    same as f64 / a.len().max(1) as f64
}

/// Waits up to 30 s for the canvas to show the guest's screen on `display` (90% of the sample
/// points alike) and returns its size and the share alike; panics saying `when` and the share.
async fn wait_canvas_shows_guest(client: &Client, display: &str, when: &str) -> (u64, u64, f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let share = match canvas_grid(client).await {
            Some((w, h, grid)) => {
                let share = agreement(&grid, &guest_grid(display, w, h));
                if share >= 0.9 {
                    return (w, h, share);
                }
                Some(share)
            }
            None => None,
        };
        assert!(
            Instant::now() < deadline,
            "{when} the canvas shows {} of the guest's screen; the web client logged:\n{}",
            share.map_or("nothing (no size)".to_owned(), |s| format!(
                "{:.0}%",
                s * 100.0
            )),
            console_lines(client).await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The key presses the guest's focused window (the typing sink) gets, as `xev` prints them:
/// xev runs on the guest's display until dropped.
struct GuestKeys {
    log: std::path::PathBuf,
    xev: std::process::Child,
}

impl GuestKeys {
    fn watch(display: &str) -> GuestKeys {
        let focus = Command::new("xdotool")
            .arg("getwindowfocus")
            .env("DISPLAY", display)
            .output()
            .expect("xdotool (Debian's xdotool)");
        let window = String::from_utf8_lossy(&focus.stdout).trim().to_owned();
        assert!(!window.is_empty(), "no focused window on {display}");
        let log = tempdir().join("xev.log");
        let xev = Command::new("xev")
            .args(["-display", display, "-id", &window, "-event", "keyboard"])
            .stdout(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("xev (Debian's x11-utils)");
        GuestKeys { log, xev }
    }

    /// The keysyms of the key presses so far, in order (`Super_L`, `Delete`).
    fn pressed(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.split("KeyPress event")
            .skip(1)
            .filter_map(|event| {
                // "… keycode 133 (keysym 0xffeb, Super_L), same_screen YES, …"
                let (_, rest) = event.split_once("(keysym ")?;
                let (keysym, _) = rest.split_once(')')?;
                Some(keysym.split_once(", ")?.1.to_owned())
            })
            .collect()
    }

    /// Clicks the toolbar's `button` (once a second: xev may still be starting) until the
    /// guest got a key press of each keysym in `names`, for up to 30 s.
    async fn press_until(&self, client: &Client, button: &str, names: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            click(client, &format!("[data-testid='{button}']")).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let pressed = self.pressed();
            if names.iter().all(|name| pressed.iter().any(|p| p == name)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "after {button} the guest got key presses {pressed:?}, not all of {names:?}"
            );
        }
    }
}

impl Drop for GuestKeys {
    fn drop(&mut self) {
        let _ = self.xev.kill();
        let _ = self.xev.wait();
    }
}

/// Waits for the RDP view's status to say connected.
async fn wait_connected(client: &Client) {
    wait_attr(
        client,
        "[data-testid='rdp-status']",
        "data-state",
        "connected",
    )
    .await;
}

/// The annotations of `member`'s VMI in `corral-vms` (the sandbox's guest facts), read as admin.
async fn vmi_annotations(member: &str) -> std::collections::BTreeMap<String, String> {
    let admin = corral_tests::client_as("admin").await;
    let vmi = corral_tests::vmis(&admin, "corral-vms")
        .get(member)
        .await
        .unwrap();
    vmi.metadata.annotations.unwrap_or_default()
}

/// The sessions the Sessions view lists with `needle`, as (state, text).
async fn sessions_with(client: &Client, needle: &str) -> Vec<(String, String)> {
    click(client, "[data-testid='sessions-button']").await;
    text_of(client, "[data-testid='sessions-view']").await;
    let rows = js(
        client,
        r#"return [...document.querySelectorAll("[data-testid^='session-']")]
                  .filter(e => /^session-[0-9]+$/.test(e.dataset.testid))
                  .map(e => [e.dataset.state, e.textContent]);"#,
    )
    .await;
    click(client, "[data-testid='sessions-close']").await;
    rows.as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|r| {
            let text = r[1].as_str()?.to_owned();
            text.contains(needle)
                .then(|| (r[0].as_str().unwrap_or_default().to_owned(), text))
        })
        .collect()
}

/// A Secret Service of the test's own: a D-Bus session bus and GNOME Keyring on it (its login
/// keyring unlocked, in a folder of its own); both end when dropped.
struct Keyring {
    address: String,
    dir: std::path::PathBuf,
    _bus: tokio::process::Child,
    _daemon: tokio::process::Child,
}

impl Drop for Keyring {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn private_keyring() -> Keyring {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let dir = tempdir();
    let mut bus = tokio::process::Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address=1"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start dbus-daemon");
    let mut lines = tokio::io::BufReader::new(bus.stdout.take().unwrap()).lines();
    let address = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the bus names its address")
        .unwrap()
        .expect("an address");
    let mut daemon = tokio::process::Command::new("gnome-keyring-daemon")
        .args(["--foreground", "--unlock", "--components=secrets"])
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("HOME", &dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start gnome-keyring-daemon (apt-get install gnome-keyring)");
    let mut stdin = daemon.stdin.take().unwrap();
    stdin.write_all(b"keyring-password").await.unwrap();
    drop(stdin);
    // The login keyring exists once the daemon has unlocked it.
    let login = dir.join("data/keyrings/login.keyring");
    corral_tests::eventually("the unlocked keyring", Duration::from_secs(15), || async {
        login.exists().then_some(())
    })
    .await;
    Keyring {
        address,
        dir,
        _bus: bus,
        _daemon: daemon,
    }
}

/// The TCP addresses the app's own process listens on (`ss`): while RDP is open, its proxy.
fn app_listeners() -> Vec<std::net::SocketAddr> {
    let out = Command::new("ss")
        .args(["-ltnpH"])
        .output()
        .expect("run ss (iproute2)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"corral-vdi-cons\""))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse().ok())
        .collect()
}

/// Whether any file under `dir` holds `needle`.
fn any_file_holds(dir: &std::path::Path, needle: &[u8]) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = any_file_holds(&path, needle) {
                return Some(found);
            }
        } else if std::fs::read(&path)
            .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        {
            return Some(path);
        }
    }
    None
}

async fn open_rdp_in_app(client: &Client, member: &str) {
    click(client, &format!("[data-testid='connect-{member}']")).await;
    wait_attr(client, "[data-testid='path-rdp']", "data-available", "true").await;
    // A guest that answers on 3389 lists RDP first.
    let first = js(
        client,
        r#"return document.querySelector("[data-testid^='path-']")?.dataset.testid;"#,
    )
    .await;
    assert_eq!(first.as_str(), Some("path-rdp"), "RDP is the first path");
    click(client, "[data-testid='open-rdp-in-app']").await;
}

async fn log_in(client: &Client, user: &str, password: &str) {
    text_of(client, "[data-testid='rdp-login']").await;
    // The name starts as the user's own (as SSH's does): typed over.
    replace_text(client, "[data-testid='rdp-username']", user).await;
    type_into(client, "[data-testid='rdp-password']", password).await;
    click(client, "[data-testid='rdp-login-submit']").await;
}

/// Waits up to 10 s for the canvas's box on screen to have the guest picture's aspect (within a
/// pixel) and to lie inside the view's stage (not under the hint line below it): letterboxed,
/// never stretched. The shadow server keeps its 1024×768 whatever the client asks, so a view
/// that sized the box to the stage stretches it.
async fn wait_aspect_kept(client: &Client, when: &str) {
    let what = format!("{when}: the canvas's box at the picture's aspect, inside the stage");
    corral_tests::eventually(&what, Duration::from_secs(10), || async {
        let value = js(
            client,
            &format!(
                r#"const c = {CANVAS}; const r = c.getBoundingClientRect();
                   const f = document.querySelector(".rdp-frame").getBoundingClientRect();
                   const s = document.querySelector("[data-testid='rdp-screen']")
                     .getBoundingClientRect();
                   return [c.width, c.height, f.left + r.left, f.top + r.top, f.left + r.right,
                           f.top + r.bottom, s.left, s.top, s.right, s.bottom];"#
            ),
        )
        .await;
        let n: Vec<f64> = value
            .as_array()?
            .iter()
            .filter_map(|v| v.as_f64())
            .collect();
        let [
            width,
            height,
            left,
            top,
            right,
            bottom,
            s_left,
            s_top,
            s_right,
            s_bottom,
        ] = n[..]
        else {
            return None;
        };
        let at_aspect = ((bottom - top) - (right - left) * height / width).abs() <= 1.0;
        let inside = left >= s_left - 0.5
            && top >= s_top - 0.5
            && right <= s_right + 0.5
            && bottom <= s_bottom + 0.5;
        (width > 0.0 && at_aspect && inside).then_some(())
    })
    .await;
}

#[tokio::test]
async fn alice_sees_and_types_into_her_desktop_over_rdp_in_the_app() {
    let keyring = private_keyring().await;
    let gui = Gui::launch_with(&[("DBUS_SESSION_BUS_ADDRESS", keyring.address.clone())]).await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let member = alices_running_desktop(client, "rdpapp").await;

    // First connection: the certificate is shown and accepted; a wrong password is refused
    // once, in words, and nothing is left running.
    open_rdp_in_app(client, &member).await;
    let fingerprint = text_of(client, "[data-testid='rdp-fingerprint']").await;
    assert_eq!(
        fingerprint.len(),
        95,
        "a SHA-256 fingerprint: {fingerprint}"
    );
    click(client, "[data-testid='rdp-trust-accept']").await;
    text_of(client, "[data-testid='rdp-login']").await;
    let prefilled = js(
        client,
        "return document.querySelector(\"[data-testid='rdp-username']\").value",
    )
    .await;
    assert_eq!(
        prefilled.as_str(),
        Some("alice"),
        "the login starts with her name"
    );
    log_in(client, DEFAULT_RDP_USER, "not-the-password").await;
    let refused = text_of(client, "[data-testid='rdp-login-refused']").await;
    assert!(
        refused.contains(&member) && refused.contains("user name or password"),
        "{refused}"
    );
    gui.screenshot("e2e-rdp-refused.png");
    click(client, "[data-testid='rdp-login-cancel']").await;
    // The session ends a moment after the cancel.
    let what = "the refused session listed, and nothing left running after the refusal";
    corral_tests::eventually(what, Duration::from_secs(10), || async {
        let rdp_sessions = sessions_with(client, "RDP in the app").await;
        let ended = rdp_sessions.iter().all(|(state, _)| state == "ended");
        (!rdp_sessions.is_empty() && ended).then_some(())
    })
    .await;

    // Second connection: the certificate is known now; the right login, remembered, shows the
    // desktop.
    let began = Instant::now();
    open_rdp_in_app(client, &member).await;
    text_of(client, "[data-testid='rdp-login']").await;
    click(client, "[data-testid='rdp-remember']").await;
    log_in(client, DEFAULT_RDP_USER, DEFAULT_RDP_PASSWORD).await;
    wait_connected(client).await;
    assert!(
        !exists(client, "[data-testid='rdp-trust']").await,
        "no second certificate question"
    );
    let annotations = vmi_annotations(&member).await;
    let display = annotations[XVNC_DISPLAY_ANNOTATION].clone();
    let (width, height, share) = wait_canvas_shows_guest(client, &display, "after Connect").await;
    eprintln!(
        "RDP in the app showed the guest's desktop ({width}×{height}, {:.0}% of points alike) {:?} after Connect",
        share * 100.0,
        began.elapsed()
    );
    wait_aspect_kept(client, "after Connect").await;
    let status = text_of(client, "[data-testid='rdp-status']").await;
    assert!(
        status.contains(&format!("{width}×{height}")) && status.contains(DEFAULT_RDP_USER),
        "{status}"
    );
    gui.screenshot("e2e-rdp.png");

    // A second Unix user gets nothing from the proxy's port: closed at once, no handshake.
    corral_tests::other_user();
    let listeners = app_listeners();
    assert!(!listeners.is_empty(), "the proxy listens");
    for addr in listeners {
        let upgrade = format!(
            "GET /x HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        corral_tests::assert_other_gets_nothing("the RDP proxy", addr, upgrade.as_bytes()).await;
    }

    // Text typed in the app arrives in the guest's typing sink.
    let typed = std::path::PathBuf::from(&annotations[TYPED_TEXT_ANNOTATION]);
    let text = "typed in the app 42";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        keys_to_canvas(client, text).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let got = std::fs::read_to_string(&typed).unwrap_or_default();
        if got.contains(text) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the guest got {got:?}, not {text:?}"
        );
    }

    // The toolbar's Windows key and Ctrl+Alt+Del reach the guest as key presses.
    let keys = GuestKeys::watch(&display);
    keys.press_until(client, "rdp-windows-key", &["Super_L"])
        .await;
    keys.press_until(
        client,
        "rdp-ctrl-alt-del",
        &["Control_L", "Alt_L", "Delete"],
    )
    .await;
    drop(keys);
    // Seconds after Connect (the view has asked the guest for the window's size, refused): the
    // picture still keeps its aspect.
    wait_aspect_kept(client, "after typing").await;

    // The stream drops (the session is stopped under the view, as the Sessions view's Stop
    // does): the view says the session ended and Reconnect, with the login of this view, shows
    // the desktop again.
    let sessions = invoke(client, "list_sessions", serde_json::json!({}))
        .await
        .expect("the session list");
    let rdp = sessions
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["kind"] == "rdpInApp" && s["state"]["kind"] == "active")
        .unwrap_or_else(|| panic!("no active RDP session in the app: {sessions}"));
    let stopped = invoke(
        client,
        "stop_session",
        serde_json::json!({ "id": rdp["id"] }),
    )
    .await;
    assert_eq!(
        stopped,
        Ok(serde_json::json!(true)),
        "the RDP session was stopped"
    );
    let ended = text_of(client, "[data-testid='rdp-disconnected']").await;
    assert!(ended.contains(&member), "{ended}");
    click(client, "[data-testid='rdp-reconnect']").await;
    wait_connected(client).await;
    assert!(
        !exists(client, "[data-testid='rdp-login']").await,
        "Reconnect used this view's login"
    );
    wait_canvas_shows_guest(client, &display, "after Reconnect").await;

    // Close ends the session.
    click(client, "[data-testid='rdp-close']").await;
    wait_text(client, "[data-testid='my-desktops']", &member).await;
    // The session ends a moment after the Close.
    let what = "Close to end the RDP session";
    corral_tests::eventually(what, Duration::from_secs(10), || async {
        let rdp_sessions = sessions_with(client, "RDP in the app").await;
        let ended = rdp_sessions.iter().all(|(state, _)| state == "ended");
        (!rdp_sessions.is_empty() && ended).then_some(())
    })
    .await;

    // The remembered login comes from the keyring: no question the third time. The password
    // is in the keyring's file (encrypted) and in none of the app's files (data, logs).
    open_rdp_in_app(client, &member).await;
    wait_connected(client).await;
    assert!(
        !exists(client, "[data-testid='rdp-login']").await,
        "no login asked"
    );
    click(client, "[data-testid='rdp-close']").await;
    let leak = any_file_holds(&gui.data_home, DEFAULT_RDP_PASSWORD.as_bytes());
    assert_eq!(leak, None, "the password is in a file of the app");
    gui.close().await;
    drop(keyring);
}

/// Keeps what the page writes to its console in `window.__console` (IronRDP's web client logs
/// there), so that a failure can say what the web client saw.
const KEEP_CONSOLE: &str = r#"
  if (!window.__console) {
    window.__console = [];
    for (const level of ["log", "debug", "info", "warn", "error"]) {
      const write = console[level].bind(console);
      console[level] = (...args) => {
        window.__console.push(level + " " + args.map(String).join(" ").slice(0, 400));
        write(...args);
      };
    }
  }
  return null;"#;

/// What the page wrote to its console since [`KEEP_CONSOLE`], a line each.
async fn console_lines(client: &Client) -> String {
    let lines = js(client, "return (window.__console || []).join('\\n');").await;
    lines.as_str().unwrap_or_default().to_owned()
}

/// What the window gets when it asks the backend for the OS clipboard (`clipboard_text`, as the
/// page's `navigator.clipboard.readText` does): the text, or the refusal's message.
async fn window_reads_clipboard(client: &Client) -> Result<Option<String>, String> {
    match invoke(client, "clipboard_text", serde_json::json!({})).await {
        Ok(text) => Ok(text.as_str().map(str::to_owned)),
        Err(refused) => Err(refused["message"]
            .as_str()
            .map_or_else(|| refused.to_string(), str::to_owned)),
    }
}

/// Asserts that the window may not read the OS clipboard (no RDP session in the app): waits up
/// to 10 s for the refusal (a session just closed ends a moment later).
async fn assert_clipboard_closed_to_window(client: &Client, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = window_reads_clipboard(client).await;
        if let Err(refused) = &got {
            assert!(refused.contains("only for RDP in the app"), "{refused}");
            return;
        }
        assert!(Instant::now() < deadline, "{when}, the window read {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits up to `within` for `display`'s clipboard to hold `text`: `Ok`, or what it held last.
async fn clipboard_within(
    display: &str,
    text: &str,
    within: Duration,
) -> Result<(), Option<String>> {
    let deadline = Instant::now() + within;
    loop {
        let got = clipboard_text(display).await.unwrap();
        if got.as_deref() == Some(text) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(got);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits up to 20 s for `display`'s clipboard to hold `text`; panics naming what it held and
/// what the web client logged.
async fn wait_clipboard(client: &Client, display: &str, text: &str, whose: &str) {
    if let Err(got) = clipboard_within(display, text, Duration::from_secs(20)).await {
        panic!(
            "{whose} clipboard holds {got:?}, not {text:?}; the web client logged:\n{}",
            console_lines(client).await
        );
    }
}

/// Copies in the view (Ctrl+C there, as a user copying in the desktop does) until this
/// computer's clipboard on `display` holds `text`, 20 s at most: on a busy machine a Ctrl+C
/// sent while the view takes the focus can be lost, and a user would then copy again.
async fn copy_in_view_until(client: &Client, display: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        keys_to_canvas(client, "\u{E009}c\u{E000}").await;
        let got = match clipboard_within(display, text, Duration::from_secs(3)).await {
            Ok(()) => return,
            Err(got) => got,
        };
        assert!(
            Instant::now() < deadline,
            "the app's clipboard holds {got:?}, not {text:?}, after copies in the view; the web \
             client logged:\n{}",
            console_lines(client).await
        );
    }
}

/// Waits up to 20 s for the guest's screen and the canvas to have one size other than `not`,
/// and returns it.
async fn wait_guest_sized_as_canvas(client: &Client, display: &str, not: (u32, u32)) -> (u32, u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let guest = screen_size(display).await.unwrap();
        let canvas = canvas_grid(client)
            .await
            .map(|(w, h, _)| (u32::try_from(w).unwrap(), u32::try_from(h).unwrap()));
        if Some(guest) == canvas && guest != not {
            return guest;
        }
        assert!(
            Instant::now() < deadline,
            "the guest's screen is {guest:?}, the canvas {canvas:?}; the web client logged:\n{}",
            console_lines(client).await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn rdp_in_the_app_shares_the_clipboard_and_follows_the_window() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let member =
        alices_running_desktop_annotated(client, "rdpclip", &[(RDP_SERVER_ANNOTATION, XRDP)]).await;
    js(client, KEEP_CONSOLE).await;
    // What is copied beside the app is not the window's to read while no RDP session needs it.
    set_clipboard_text(&gui.display, "a password copied beside the app")
        .await
        .unwrap();
    assert_clipboard_closed_to_window(client, "before RDP in the app").await;
    open_rdp_in_app(client, &member).await;
    click(client, "[data-testid='rdp-trust-accept']").await;
    // The guest wants no NLA: no login is asked; the session starts on xrdp's own login window.
    wait_connected(client).await;
    assert!(
        !exists(client, "[data-testid='rdp-login']").await,
        "no login asked"
    );
    let display = vmi_annotations(&member).await[XVNC_DISPLAY_ANNOTATION].clone();
    let before = screen_size(&display).await.unwrap();

    // OK on xrdp's login window (Enter, as a user would) connects the desktop, which takes the
    // view's size (display control, at connection).
    let deadline = Instant::now() + Duration::from_secs(30);
    while screen_size(&display).await.unwrap() == before {
        assert!(
            Instant::now() < deadline,
            "xrdp's login window never let the session in"
        );
        keys_to_canvas(client, "\u{E007}").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let first = wait_guest_sized_as_canvas(client, &display, before).await;

    // Clipboard text both ways, twice each in one session. The guest's copy reaches this
    // computer only after a copy gesture in the view (Ctrl+C there, as a user copying in the
    // desktop does); this computer's reaches the guest while the view has the focus.
    for round in 1..=2 {
        let from_guest = format!("copied in the guest {round}");
        set_clipboard_text(&display, &from_guest).await.unwrap();
        copy_in_view_until(client, &gui.display, &from_guest).await;
        let from_app = format!("copied beside the app {round}");
        set_clipboard_text(&gui.display, &from_app).await.unwrap();
        wait_clipboard(client, &display, &from_app, "the guest's").await;
    }
    assert_eq!(
        window_reads_clipboard(client).await,
        Ok(Some("copied beside the app 2".into()))
    );

    // The window resized: the guest's screen follows the view, and the canvas shows it.
    client.set_window_size(1000, 700).await.unwrap();
    let resized = wait_guest_sized_as_canvas(client, &display, first).await;
    assert!(
        resized.0 < first.0 && resized.1 < first.1,
        "the guest went from {first:?} to {resized:?} for a smaller window"
    );
    wait_canvas_shows_guest(client, &display, "after the resize").await;
    let status = text_of(client, "[data-testid='rdp-status']").await;
    assert!(
        status.contains(&format!("{}×{}", resized.0, resized.1)),
        "{status}"
    );
    eprintln!("RDP in the app with xrdp: clipboard both ways, guest {first:?} → {resized:?}");
    gui.screenshot("e2e-rdp-xrdp.png");
    click(client, "[data-testid='rdp-close']").await;
    assert_clipboard_closed_to_window(client, "after RDP in the app closed").await;

    // The certificate the app accepted for this member is not the one the guest shows any
    // more (as after a man in the middle): the next connection shows both and asks again.
    let store = gui
        .data_home
        .join("dev.corral.vdi-console/rdp-certificates.json");
    let mut known: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&store).expect("the accepted certificates")).unwrap();
    let key = format!("corral-vms/{member}");
    let accepted = known[&key]["fingerprint"].as_str().unwrap().to_owned();
    assert!(
        known[&key]["vmUid"].is_string(),
        "a pin names its VM: {known:?}"
    );
    let other = ["AB"; 32].join(":");
    known[&key]["fingerprint"] = serde_json::json!(other);
    std::fs::write(&store, serde_json::to_vec(&known).unwrap()).unwrap();
    open_rdp_in_app(client, &member).await;
    let prompt = text_of(client, "[data-testid='rdp-trust']").await;
    assert!(
        prompt.contains("has changed") && prompt.contains(&member),
        "{prompt}"
    );
    assert_eq!(
        text_of(client, "[data-testid='rdp-previous-fingerprint']").await,
        other
    );
    assert_eq!(
        text_of(client, "[data-testid='rdp-fingerprint']").await,
        accepted
    );
    gui.screenshot("e2e-rdp-certificate-changed.png");
    click(client, "[data-testid='rdp-trust-accept']").await;
    wait_connected(client).await;
    click(client, "[data-testid='rdp-close']").await;
    gui.close().await;
}
