//! Connect and the Sessions view: the console in the app (its canvas shows the desktop) and
//! stopped in Sessions; the native viewer and an SSH forward stopped one by one, and every
//! helper ending with the app's window.

use std::process::Command;
use std::time::{Duration, Instant};

use fantoccini::Client;

use crate::driver::{
    Gui, alices_running_desktop, choose, click, js, text_of, wait_attr, wait_text,
};

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
    assert!(
        view.contains(&member) && view.contains("display (VNC)"),
        "{view}"
    );
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
    let (_, console_state) = state_of("display (VNC)");
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
