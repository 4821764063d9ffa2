//! A site's scale: 10,000 members in 1,000 pools on a sandbox of their own stay usable
//! (what is on screen only, the filter, End, live changes, "Get a desktop"'s pool box).

use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use kube::api::Api;
use vdi_core::resources::VirtualMachine;

use crate::driver::{
    Gui, ROWS_WHERE_LAID_OUT, accessibility_check, click, exists, is_disabled, js, picked_pool,
    type_into, wait_attr, wait_text, wait_text_within,
};

/// The `data-testid`s of the options in "Get a desktop"'s open list, in order.
async fn pool_options(client: &Client) -> serde_json::Value {
    js(
        client,
        "return [...document.querySelectorAll('.pool-picker-popup [role=option]')].map(o => o.dataset.testid)",
    )
    .await
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

    // A change to one member on screen shows, with no refresh (the time it took is printed: a
    // second is the target, the bound is a loaded machine's).
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
        Duration::from_secs(20),
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
