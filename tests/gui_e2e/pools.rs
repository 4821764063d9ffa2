//! The pools view: the legacy pool followed live, the installed app and CLI showing the same
//! pools, the `/` filter, All namespaces refused (and a namespace offered instead), and a
//! poisoned Lease shown as its member's problem while the view stays live.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use corral_tests::{client_as, sandbox};
use fantoccini::Locator;
use kube::api::{Api, DeleteParams, PostParams};
use vdi_core::names::POOL_LABEL;
use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};

use crate::driver::{
    Gui, assert_no_banner, choose, click, exists, js, replace_text, text_of, type_into, wait_text,
};

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

    // A labelled VM created through the API appears, with no refresh (the time it took is
    // printed: 2 s is the target, the bound is a loaded machine's).
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
            created.elapsed() < Duration::from_secs(20),
            "e2e-1 did not appear within 20 s"
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

/// A claim Lease whose times run off the end of the calendar, and a stray Lease labelled for
/// another pool (`corral_tests::poisoned`): the member shows its own problem, the stray Lease is
/// named in its pool's head, and the view stays live with no banner.
#[tokio::test]
async fn a_poisoned_lease_is_shown_as_its_members_problem_while_the_view_stays_live() {
    let (ns, bobs) = corral_tests::poisoned("guipoison").await;
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    replace_text(
        client,
        "[data-testid='namespace-input']",
        &format!("{ns}\u{e007}"),
    )
    .await;
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
