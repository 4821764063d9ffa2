//! The cluster connection: a credential plugin that starts failing (one banner, the pools stay),
//! the cluster coming back on a new address (the app reconnects by itself), and a kubeconfig
//! without a current context (the app asks for one).

use std::time::{Duration, Instant};

use corral_tests::{NamedSandbox, client_as, sandbox, target_dir};
use kube::api::{Api, PostParams};

use crate::driver::{
    Gui, choose, exists, js, tempdir, text_of, wait_text, wait_text_within, wait_until_async,
};

#[tokio::test]
async fn a_credential_plugin_that_starts_failing_shows_one_banner_while_the_pools_stay() {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    // User gina reads the pools of corral-vms; her kubeconfig runs the test plugin, which
    // issues 30-second client certificates signed by the sandbox's CA.
    let bindings: Api<RoleBinding> = Api::namespaced(client_as("admin").await, "corral-vms");
    let binding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "desktop-gina" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sandbox::bootstrap::SELF_SERVICE },
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

/// The API server freezes and thaws with the app open; then the cluster goes away and comes
/// back on a new address with a new kubeconfig, twice: the app follows the sandbox's own kubeconfig, which `sandbox down` removes
/// with its folder and `sandbox up` writes again. Each time the app says it is reconnecting,
/// then reconnects by itself once the new kubeconfig is written (the test prints how soon: 5 s
/// is the target), with no banner left over.
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
    wait_text(client, "[data-testid='summary-judged']", "up to date").await;

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
        // Nothing of the lost cluster connection is offered: one banner, no identity, no actions.
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
        // Each wait has a loaded machine's bound of its own; the time is printed below.
        wait_text_within(
            client,
            "[data-testid='feed-status']",
            "live",
            Duration::from_secs(30),
        )
        .await;
        wait_text_within(
            client,
            "[data-testid='pool-corral-vms-legacy']",
            "legacy-2",
            Duration::from_secs(30),
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
        // The kubeconfig appears once the sandbox is whole, so the cluster connection it
        // reconnects to finds the guard installed (it used to find it not yet installed, and
        // kept "guard off").
        assert_eq!(
            text_of(client, "[data-testid='guard-badge']").await,
            "guard on",
            "round {round}"
        );
    }
    gui.screenshot("e2e-recovery-back.png");
    gui.close().await;
}

/// A kubeconfig that names no current context: the cluster connection the page asks for as it
/// starts (the current context's) is refused, and the window asks to choose a context instead of
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
    // The early cluster connection's refusal has come back (its answer is marked, refused or not), and
    // nothing on screen says it failed.
    wait_until_async("the early cluster connection's answer", || async {
        js(
            client,
            "return performance.getEntriesByName('corral:cluster-connected').length > 0",
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

/// Stepping through the context picker with the arrow keys does not switch at every step
/// (WebKitGTK fires `change` at each one): the choice is taken on Enter. Picked from the list
/// (or by script, as other tests do), it is taken at once.
#[tokio::test]
async fn arrow_keys_step_through_contexts_and_enter_switches_once() {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    let gui = Gui::launch().await;
    let client = &gui.client;
    // The sandbox's kubeconfig starts in admin's context.
    wait_text(client, "[data-testid='identity-badge']", "admin").await;
    // Every identity the badge shows from now on.
    js(
        client,
        "window.__identities = [];
         const badge = () => document.querySelector('[data-testid=identity-badge]');
         new MutationObserver(() => window.__identities.push(badge()?.textContent ?? ''))
           .observe(document.querySelector('.app-header'),
                    { subtree: true, childList: true, characterData: true });
         document.querySelector('[data-testid=context-select]').focus();
         return null",
    )
    .await;
    let key = |k: char| {
        KeyActions::new("keyboard".into())
            .then(KeyAction::Down { value: k })
            .then(KeyAction::Up { value: k })
    };
    const ARROW_DOWN: char = '\u{e015}';
    const ENTER: char = '\u{e007}';
    for _ in 0..2 {
        client.perform_actions(key(ARROW_DOWN)).await.unwrap();
    }
    // Two steps down from admin: bob is shown, not yet taken.
    wait_until_async("the picker to show bob", || async {
        js(
            client,
            "return document.querySelector('[data-testid=context-select]').value",
        )
        .await
            == serde_json::json!("bob")
    })
    .await;
    client.perform_actions(key(ENTER)).await.unwrap();
    wait_text(client, "[data-testid='identity-badge']", "bob").await;
    let seen = js(client, "return window.__identities").await;
    let seen: Vec<String> = serde_json::from_value(seen).unwrap();
    assert!(
        seen.iter().all(|who| !who.contains("alice")),
        "the step over alice switched to it: {seen:?}"
    );
    gui.close().await;
}
