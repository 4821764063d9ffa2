//! The window: a dead Wayland socket (the X display, or the reason and the fix), the theme
//! switch, and screens at the minimum and a common size, light and dark, laid out and passing
//! the accessibility check.

use std::process::Command;
use std::time::{Duration, Instant};

use corral_tests::sandbox;
use kube::api::{Api, DeleteParams};
use vdi_core::resources::VirtualMachine;

use crate::driver::{
    Gui, ROWS_WHERE_LAID_OUT, accessibility_check, app_binary, choose, click, element, exists, js,
    resize_window, tempdir, text_of, type_into, wait_attr, wait_text,
};

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
            && stderr.contains("fix: start it from your graphical login"),
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

/// Actions cells whose buttons do not fit inside the cell's padding (a cell that does not wrap
/// shows an ellipsis for a button that overflows it): "button texts in row", each.
const CLIPPED_ACTIONS: &str = "return [...document.querySelectorAll('.cell-actions')]
  .filter((cell) => cell.scrollWidth > cell.clientWidth)
  .map((cell) => `${[...cell.querySelectorAll('button')].map((b) => b.textContent.trim()).join(' + ')} in ${cell.parentElement.dataset.testid}`);";

/// Column headers cut off by their column or taking a second line: their texts (a header whose
/// text is for screen readers only, in a one-pixel box, aside).
const HEADERS_NOT_WHOLE: &str =
    "return [...document.querySelectorAll('[role=columnheader], thead th')]
  .filter((h) => h.querySelector('.sr-only') === null)
  .filter((h) => { const r = document.createRange(); r.selectNodeContents(h);
    const lines = new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size;
    return h.scrollWidth > h.clientWidth + 1 || lines > 1; })
  .map((h) => h.textContent.trim());";

/// The window at its minimum width (900 × 600) and at 1280 × 820, light and dark: no table
/// scrolls sideways, no column header is cut or wrapped, no action button is cut off (every
/// action reachable), and the pools
/// view and the New pool, Capacity, Sessions and USB views pass the accessibility check.
/// Screens saved.
#[tokio::test]
async fn screens_at_900_and_1280_light_and_dark_pass_the_accessibility_check() {
    // The widest actions cell there is: admin's Connect… and Force release… on a running
    // member alice holds (a pool of its own made here through the API, removed at the end).
    // And one of the viewer's own, for My desktops' widest actions: Connect… and Release….
    let admin = corral_tests::actor_as("admin").await;
    let mut claimed = Vec::new();
    for (member, user) in [("wide-1", "alice"), ("wide-2", "admin")] {
        corral_tests::desktop_member("corral-vms", "wide", member, true).await;
        let options = vdi_core::claim::ClaimOptions::default();
        let held = vdi_core::claim::assign(&admin, "corral-vms", "wide", user, &options)
            .await
            .unwrap();
        claimed.push(held.member);
    }
    let [held, mine] = [&claimed[0], &claimed[1]];
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    wait_text(
        client,
        &format!("[data-testid='unassign-{held}']"),
        "Force release",
    )
    .await;
    element(client, &format!("[data-testid='connect-{held}']")).await;
    wait_text(client, "[data-testid='my-desktops']", mine).await;
    for (width, height) in [(900, 600), (1280, 820)] {
        resize_window(client, width, height).await;
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
            let page = js(
                client,
                "return [document.documentElement.scrollWidth, window.innerWidth]",
            )
            .await;
            assert!(
                page[0].as_u64() <= page[1].as_u64(),
                "{width}×{height} {theme}: the page is wider than the window: {page}"
            );
            let headers = js(client, HEADERS_NOT_WHOLE).await;
            assert_eq!(
                headers,
                serde_json::json!([]),
                "{width}×{height} {theme}: column headers cut or on two lines"
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
    for member in &claimed {
        vdi_core::claim::unassign(
            &admin,
            "corral-vms",
            member,
            &vdi_core::claim::UnassignOptions { force: true },
        )
        .await
        .unwrap();
        Api::<VirtualMachine>::namespaced(admin.client().clone(), "corral-vms")
            .delete(member, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// Tooltips are the page's own: while the pointer rests on a button its title shows in the
/// page's tooltip (the platform has none to show: the title is held aside), and the click that
/// opens a dialog takes the tooltip away, where WebKitGTK's native one stayed over the dialog
/// until the pointer moved. The title is back once the pointer leaves.
#[tokio::test]
async fn a_tooltip_shows_on_rest_and_goes_with_the_click_that_opens_a_dialog() {
    use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let title = "Consoles, viewers and forwards the app started";
    let button = element(client, "[data-testid='sessions-button']").await;
    let point_at = |element: fantoccini::elements::Element| {
        MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
            element,
            duration: None,
            x: 0.0,
            y: 0.0,
        })
    };
    client.perform_actions(point_at(button)).await.unwrap();
    wait_text(client, "[data-testid='app-tooltip']:not([hidden])", title).await;
    gui.screenshot("e2e-tooltip-shown.png");
    assert_eq!(
        js(
            client,
            "return document.querySelector('[data-testid=sessions-button]').getAttribute('title')"
        )
        .await,
        serde_json::Value::Null,
        "while the pointer rests on it, the platform has no title to show"
    );
    client
        .perform_actions(
            MouseActions::new("mouse".into())
                .then(PointerAction::Down {
                    button: MOUSE_BUTTON_LEFT,
                })
                .then(PointerAction::Up {
                    button: MOUSE_BUTTON_LEFT,
                }),
        )
        .await
        .unwrap();
    text_of(client, "[data-testid='sessions-view']").await;
    assert!(
        !exists(client, "[data-testid='app-tooltip']:not([hidden])").await,
        "the tooltip stayed over the dialog its click opened"
    );
    gui.screenshot("e2e-tooltip-gone.png");
    click(client, "[data-testid='sessions-close']").await;
    let brand = element(client, ".brand-name").await;
    client.perform_actions(point_at(brand)).await.unwrap();
    wait_attr(client, "[data-testid='sessions-button']", "title", title).await;
    gui.close().await;
}
