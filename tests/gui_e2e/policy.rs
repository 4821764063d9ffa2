//! Managed pools in the app (issue 26): a pool's settings dialog changes its DesktopPool on the
//! cluster (warm and size), refuses a value the rules refuse before anything is written, and
//! names the members a shrink removes; a member's history lists its claim with the event TTL
//! sentence beside it, and the pool's history the resize as the administrator's; New pool makes a managed pool with the policy asked for. On a named sandbox with the broker (its replicas record the audit
//! Events), as `sandbox up` starts it.

use std::time::{Duration, Instant};

use corral_tests::{NamedSandbox, stopped_pool};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use sandbox::DEMO_NAMESPACE;
use vdi_core::claim::{self, ClaimOptions};
use vdi_core::identity::Actor;
use vdi_core::policy::usage::hour_of;
use vdi_core::policy::{Assignment, DesktopPool, DesktopPoolSpec, OnRelease};

use crate::driver::{
    Gui, accessibility_check, click, exists, is_disabled, js, open_new_pool, replace_text,
    resize_window, text_of, wait_text, wait_text_within, wait_until_async,
};

/// How long the broker may take to grant a claim here (replicas share two cores with the app).
const BROKER_WORK: Duration = Duration::from_secs(60);

/// The pool's DesktopPool as the cluster holds it.
async fn desktop_pool(admin: &Client, pool: &str) -> DesktopPool {
    Api::<DesktopPool>::namespaced(admin.clone(), DEMO_NAMESPACE)
        .get(pool)
        .await
        .unwrap_or_else(|e| panic!("read DesktopPool {pool}: {e}"))
}

/// Waits until `pool`'s DesktopPool satisfies `check`; returns it.
async fn wait_desktop_pool(
    admin: &Client,
    pool: &str,
    what: &str,
    check: impl Fn(&DesktopPoolSpec) -> bool,
) -> DesktopPool {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = desktop_pool(admin, pool).await;
        if check(&now.spec) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "DesktopPool {pool} never had {what}: {:?}",
            now.spec
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the input matching `css`.
async fn value_of(client: &fantoccini::Client, css: &str) -> String {
    let read = format!("return document.querySelector({css:?}).value");
    js(client, &read)
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn pool_settings_change_the_desktop_pool_and_the_history_lists_a_claim() {
    let cluster = NamedSandbox::new(&format!("gpolicy{}", std::process::id()));
    let kubeconfig = cluster.up();
    let admin = sandbox::kubeconfig::client(&kubeconfig, "admin")
        .await
        .unwrap();
    // A managed pool of two stopped members.
    stopped_pool(&admin, DEMO_NAMESPACE, "pol", 2)
        .await
        .unwrap();
    let spec = DesktopPoolSpec {
        golden: "golden-desktop".into(),
        size: 2,
        ..Default::default()
    };
    Api::<DesktopPool>::namespaced(admin.clone(), DEMO_NAMESPACE)
        .create(&PostParams::default(), &DesktopPool::new("pol", spec))
        .await
        .unwrap();

    // alice claims one (through the broker, which records the claim as an Event).
    let alice = Actor::connect(
        sandbox::kubeconfig::client(&kubeconfig, "alice")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let claimed = tokio::time::timeout(
        BROKER_WORK,
        claim::assign(
            &alice,
            DEMO_NAMESPACE,
            "pol",
            "alice",
            &ClaimOptions::default(),
        ),
    )
    .await
    .expect("alice's claim within the broker's time")
    .expect("alice's claim");
    let mine = claimed.member.clone();

    let gui = Gui::launch_on(&kubeconfig, &[]).await;
    let client = &gui.client;
    wait_text(client, "[data-testid='feed-status']", "live").await;
    wait_text(client, "[data-testid='managed-corral-vms-pol']", "managed").await;
    wait_text(client, "[data-testid='counts-corral-vms-pol']", "1 claimed").await;
    // The demo's label-only pool is unmanaged.
    let legacy = text_of(client, "[data-testid='managed-corral-vms-legacy']").await;
    assert_eq!(legacy.trim(), "unmanaged");

    click(client, "[data-testid='settings-corral-vms-pol']").await;
    wait_text(
        client,
        "[data-testid='pool-settings-dialog']",
        "golden-desktop",
    )
    .await;
    assert_eq!(value_of(client, "[data-testid='settings-size']").await, "2");
    assert_eq!(value_of(client, "[data-testid='settings-warm']").await, "0");
    let before = desktop_pool(&admin, "pol").await;

    // More warm members than the size: the rule's sentence, the field marked, and no Save.
    replace_text(client, "[data-testid='settings-warm']", "5").await;
    let problem = wait_text(
        client,
        "[data-testid='settings-problem']",
        "Warm: 5 is out of range",
    )
    .await;
    eprintln!("warm 5 of 2: {problem}");
    // The dialog keeps its height while a problem comes and goes as values are typed.
    let height =
        "return document.querySelector(\"[data-testid='pool-settings-dialog']\").scrollHeight";
    let with_problem = js(client, height).await;
    replace_text(client, "[data-testid='settings-warm']", "0").await;
    wait_text_within(
        client,
        "[data-testid='settings-blocked']",
        "Nothing changed",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        js(client, height).await,
        with_problem,
        "the settings dialog changed its height when the problem went"
    );
    replace_text(client, "[data-testid='settings-warm']", "5").await;
    wait_text(
        client,
        "[data-testid='settings-problem']",
        "Warm: 5 is out of range",
    )
    .await;
    assert!(is_disabled(client, "[data-testid='settings-save']").await);
    let warm_invalid = js(
        client,
        "return document.querySelector(\"[data-testid='settings-warm']\").getAttribute('aria-invalid')",
    )
    .await;
    assert_eq!(warm_invalid.as_str(), Some("true"));
    // A duration that is none: named too, once warm is right again.
    replace_text(client, "[data-testid='settings-warm']", "1").await;
    replace_text(client, "[data-testid='settings-max-session']", "soon").await;
    wait_text(client, "[data-testid='settings-problem']", "Max session: ").await;
    assert!(is_disabled(client, "[data-testid='settings-save']").await);
    // A click on the disabled Save writes nothing.
    click(client, "[data-testid='settings-save']").await;
    gui.screenshot("e2e-policy-invalid.png");
    let after = desktop_pool(&admin, "pol").await;
    assert_eq!(
        after.spec, before.spec,
        "a refused value changed the DesktopPool"
    );
    assert_eq!(after.resource_version(), before.resource_version());

    // Size 3, warm 1, max session 8h: written to the DesktopPool.
    replace_text(client, "[data-testid='settings-max-session']", "8h").await;
    replace_text(client, "[data-testid='settings-size']", "3").await;
    // Before Save, what the larger size adds.
    wait_text(
        client,
        "[data-testid='settings-preview']",
        "Saving adds member pol-3, cloned from golden-desktop",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while is_disabled(client, "[data-testid='settings-save']").await {
        assert!(
            Instant::now() < deadline,
            "Save stayed disabled: {}",
            text_of(client, "[data-testid='pool-settings-dialog']").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    click(client, "[data-testid='settings-save']").await;
    wait_text(
        client,
        "[data-testid='action-result']",
        "Settings of pol saved: size 3, warm 1",
    )
    .await;
    assert!(!exists(client, "[data-testid='pool-settings-dialog']").await);
    let grown = wait_desktop_pool(&admin, "pol", "size 3, warm 1, maxSession 8h", |s| {
        s.size == 3 && s.warm == Some(1) && s.max_session.as_deref() == Some("8h")
    })
    .await;
    eprintln!("written: {:?}", grown.spec);
    // The broker clones pol-3; the view shows it once it exists (stopped: warm 1 runs pol-1).
    wait_text_within(
        client,
        "[data-testid='member-pol-3']",
        "Stopped",
        BROKER_WORK,
    )
    .await;
    assert_eq!(
        mine, "pol-2",
        "alice's claim lands on pol-2 (the order is spread by identity)"
    );

    // Size 1, alice's claim in the middle: the confirmation names exactly what goes, pol-3 now,
    // alice's pol-2 once released, never pol-1. (The notice of the save above is dismissed
    // first, so the next one is a new element.)
    click(client, "[data-testid='action-result'] .notice-close").await;
    click(client, "[data-testid='settings-corral-vms-pol']").await;
    wait_text(
        client,
        "[data-testid='pool-settings-dialog']",
        "golden-desktop",
    )
    .await;
    replace_text(client, "[data-testid='settings-warm']", "0").await;
    replace_text(client, "[data-testid='settings-size']", "1").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while is_disabled(client, "[data-testid='settings-save']").await {
        assert!(Instant::now() < deadline, "Save stayed disabled for size 1");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    click(client, "[data-testid='settings-save']").await;
    let confirm = wait_text(
        client,
        "[data-testid='settings-confirm']",
        "Every other member stays",
    )
    .await;
    eprintln!("shrink confirmation: {confirm}");
    // Exactly what the broker does (the core's plan): pol-1 is within the size and stays;
    // above it, a free member goes now, alice's once she releases it.
    assert!(
        !confirm.contains("pol-1"),
        "a member within the size is named: {confirm}"
    );
    for member in ["pol-2", "pol-3"] {
        let (now, later) = (
            exists(
                client,
                &format!("[data-testid='settings-removed-{member}']"),
            )
            .await,
            exists(
                client,
                &format!("[data-testid='settings-removed-later-{member}']"),
            )
            .await,
        );
        assert_eq!(
            (now, later),
            (member != mine, member == mine),
            "{member} (alice holds {mine}): {confirm}"
        );
    }
    gui.screenshot("e2e-policy-shrink.png");
    click(client, "[data-testid='settings-confirm-submit']").await;
    wait_text(
        client,
        "[data-testid='action-result']",
        "Settings of pol saved: size 1, warm 0",
    )
    .await;
    wait_desktop_pool(&admin, "pol", "size 1, warm 0", |s| {
        s.size == 1 && s.warm == Some(0)
    })
    .await;

    // alice's member now goes when released: its row says so, and a release's confirmation
    // (here an administrator's force release) says that its VM and disk are deleted, and why,
    // before anything is done.
    wait_text(
        client,
        &format!("[data-testid='state-note-{mine}']"),
        "removed when released",
    )
    .await;
    // The pool's head says the shrink is not over, and what it waits for.
    let resizing = wait_text(
        client,
        "[data-testid='resizing-corral-vms-pol']",
        &format!("{mine} goes when released"),
    )
    .await;
    assert!(resizing.starts_with("resizing to 1"), "{resizing}");
    // At the window's minimum width the head keeps the pool's name whole beside the note, and
    // My desktops keeps Connect… and Release… whole.
    resize_window(client, 900, 600).await;
    let narrow = js(
        client,
        "const name = document.querySelector(\"[data-testid='pool-corral-vms-pol'] .pool-name\");
         const note = document.querySelector(\"[data-testid='resizing-corral-vms-pol']\");
         const cut = [...document.querySelectorAll('.my-table .cell-actions')]
           .filter((c) => c.scrollWidth > c.clientWidth).length;
         return [name.scrollWidth <= name.clientWidth + 1 && name.clientWidth > 0,
           note.clientWidth >= 60, cut];",
    )
    .await;
    gui.screenshot("e2e-policy-narrow.png");
    assert_eq!(
        narrow,
        serde_json::json!([true, true, 0]),
        "at 900 px: [pool name whole, resize note readable, My desktops actions cut]"
    );
    resize_window(client, 1280, 820).await;
    click(client, &format!("[data-testid='unassign-{mine}']")).await;
    let question = wait_text(client, "[data-testid='release-question']", "made smaller").await;
    assert!(question.contains("disk are deleted"), "{question}");
    gui.screenshot("e2e-policy-release-removes.png");
    click(client, "[data-testid='release-cancel']").await;
    wait_until_async("Cancel to close the release dialog", || async {
        !exists(client, "[data-testid='release-dialog']").await
    })
    .await;

    // alice's member's history: her claim, with the event TTL sentence beside it.
    click(client, &format!("[data-testid='history-{mine}']")).await;
    wait_text(client, "[data-testid='history-ttl']", "event TTL").await;
    let history = wait_text_within(
        client,
        "[data-testid='history-list']",
        "Claimed",
        BROKER_WORK,
    )
    .await;
    eprintln!("history of {mine}: {history}");
    assert!(history.contains("alice"), "{history}");
    gui.screenshot("e2e-policy-history.png");
    // Esc closes it (the dialog listens on the document, as every dialog of the app).
    close_history_with_escape(client, "the history").await;

    // The pool's history: the resize, named as the administrator's (issue 37 item 8), beside
    // its members' acts.
    click(client, "[data-testid='pool-history-corral-vms-pol']").await;
    let pool_history = wait_text_within(
        client,
        "[data-testid='history-list']",
        "Resized",
        BROKER_WORK,
    )
    .await;
    eprintln!("history of pool pol: {pool_history}");
    let resized = js(
        client,
        r#"const row = [...document.querySelectorAll("[data-testid='history-entry']")]
             .find(r => r.dataset.reason === "Resized");
           return row ? [...row.querySelectorAll("td")].map(td => td.textContent) : null;"#,
    )
    .await;
    let cells: Vec<&str> = resized
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default();
    assert!(
        cells.contains(&"the pool") && cells.contains(&"admin"),
        "the resize is the pool's own, by admin: {cells:?}"
    );
    assert!(pool_history.contains(&mine), "{pool_history}");
    gui.screenshot("e2e-policy-pool-history.png");
    close_history_with_escape(client, "the pool's history").await;

    // With a broker, New pool makes a managed pool, as the CLI's pool create does: it asks for
    // the policy, and the DesktopPool it writes carries it.
    open_new_pool(client, "golden-desktop", "made").await;
    wait_text(
        client,
        "[data-testid='new-pool-dialog']",
        "broker keeps the pool",
    )
    .await;
    replace_text(client, "[data-testid='pool-size']", "1").await;
    replace_text(client, "[data-testid='new-pool-warm']", "2").await;
    replace_text(client, "[data-testid='new-pool-max-session']", "8x").await;
    replace_text(client, "[data-testid='pool-timeout']", "0").await;
    // Warm above the size (the broker's rule), a duration that is none and a timeout out of
    // range: every problem at once, each in plain words on its own field, before anything is
    // made.
    wait_text(
        client,
        "[data-testid='new-pool-invalid'][data-field='warm']",
        "Warm: 2 is out of range (0 to the size, 1)",
    )
    .await;
    wait_text(
        client,
        "[data-testid='new-pool-invalid'][data-field='maxSession']",
        "Max session: ",
    )
    .await;
    wait_text(
        client,
        "[data-testid='new-pool-invalid'][data-field='timeout']",
        "Clone timeout: a clone timeout of 0 s is out of range",
    )
    .await;
    let marked = js(
        client,
        r#"return ["pool-name", "pool-size", "pool-timeout", "new-pool-warm", "new-pool-max-session"]
             .map(id => document.querySelector(`[data-testid='${id}']`)
               .getAttribute("aria-invalid") === "true");"#,
    )
    .await;
    assert_eq!(
        marked,
        serde_json::json!([false, false, true, true, true]),
        "the fields at fault are marked, and only those"
    );
    let problems = text_of(client, "[data-testid='new-pool-problems']").await;
    assert!(!problems.contains("spec."), "plain words: {problems}");
    assert!(is_disabled(client, "[data-testid='create-submit']").await);
    gui.screenshot("e2e-policy-new-pool-problems.png");
    replace_text(client, "[data-testid='pool-timeout']", "120").await;
    replace_text(client, "[data-testid='new-pool-warm']", "1").await;
    replace_text(client, "[data-testid='new-pool-max-session']", "8h").await;
    click(client, "[data-testid='new-pool-on-release-reset']").await;
    wait_text(client, "[data-testid='new-pool-preview']", "made-1").await;
    gui.screenshot("e2e-policy-new-pool.png");
    click(client, "[data-testid='create-submit']").await;
    wait_text_within(
        client,
        "[data-testid='create-result']",
        "1 member",
        BROKER_WORK,
    )
    .await;
    let made = desktop_pool(&admin, "made").await.spec;
    assert_eq!(
        (
            made.size,
            made.warm,
            made.max_session.as_deref(),
            made.on_release
        ),
        (1, Some(1), Some("8h"), Some(OnRelease::Reset)),
        "{made:?}"
    );
    click(client, "[data-testid='create-close']").await;
    wait_text(client, "[data-testid='managed-corral-vms-made']", "managed").await;

    // Its settings: who may use it (pool create opened it to everyone who may claim here, by
    // its name), and the assignment mode. Dedicated with a reset on release is the broker's
    // refusal, named before anything is written; dedicated with keep is saved.
    click(client, "[data-testid='settings-corral-vms-made']").await;
    let who = wait_text(
        client,
        "[data-testid='entitlements']",
        "everyone who may claim in the namespace",
    )
    .await;
    assert!(who.contains("this pool"), "{who}");
    let chosen =
        "return document.querySelector(\"[data-testid='settings-assignment-floating']\").checked";
    assert_eq!(js(client, chosen).await, serde_json::json!(true));
    click(client, "[data-testid='settings-assignment-dedicated']").await;
    wait_text(client, "[data-testid='settings-problem']", "dedicated").await;
    assert!(is_disabled(client, "[data-testid='settings-save']").await);
    click(client, "[data-testid='settings-on-release-keep']").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while is_disabled(client, "[data-testid='settings-save']").await {
        assert!(
            Instant::now() < deadline,
            "Save stayed disabled for dedicated and keep: {}",
            text_of(client, "[data-testid='pool-settings-dialog']").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gui.screenshot("e2e-policy-dedicated.png");
    click(client, "[data-testid='settings-save']").await;
    wait_text(
        client,
        "[data-testid='action-result']",
        "Settings of made saved",
    )
    .await;
    let made = wait_desktop_pool(&admin, "made", "dedicated, keep on release", |s| {
        s.assignment == Some(Assignment::Dedicated) && s.on_release == Some(OnRelease::Keep)
    })
    .await;
    eprintln!("made dedicated: {:?}", made.spec);
    // An administrator gives made-1 to alice: its row names her as its owner while nobody
    // holds it.
    let admin_actor = Actor::connect(admin.clone()).await.unwrap();
    vdi_core::managed::owner::set_owner(&admin_actor, DEMO_NAMESPACE, "made-1", Some("alice"))
        .await
        .unwrap();
    wait_text(client, "[data-testid='owner-made-1']", "owner: alice").await;
    usage_chart_shows_the_peak_at_its_hour(&gui, &admin, &kubeconfig).await;
    gui.close().await;
}

/// The bars (hour, peak claimed) of the usage chart `css`, in order.
async fn bars(client: &fantoccini::Client, css: &str) -> Vec<(String, i64)> {
    let read = format!(
        "return Array.from(document.querySelectorAll({:?})).map(r => [r.dataset.hour, Number(r.dataset.peak)])",
        format!("{css} g.usage-peak rect")
    );
    serde_json::from_value(js(client, &read).await).unwrap()
}

/// `corral-vdi pool usage <pool> -o csv` as the administrator: (hour, peak claimed, lowest
/// free) per row.
fn cli_usage(kubeconfig: &std::path::Path, pool: &str) -> Vec<(String, i64, i64)> {
    let out = std::process::Command::new(corral_tests::cli_binary())
        .env("KUBECONFIG", kubeconfig)
        .args([
            "--context",
            "admin",
            "pool",
            "usage",
            pool,
            "-n",
            DEMO_NAMESPACE,
        ])
        .args(["-o", "csv"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("hour,peak_claimed,lowest_free,reclaims"));
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            (
                cells[0].to_owned(),
                cells[1].parse().unwrap(),
                cells[2].parse().unwrap(),
            )
        })
        .collect()
}

/// Issue 39 item 4: after scripted claims (alice and bob, two of a pool of three), the pool's
/// small chart has its tallest bar at the hour of the claims by the API server's clock (the
/// hour the CLI's CSV gives the peak of 2), and the large chart and its table show the CLI's
/// rows exactly.
async fn usage_chart_shows_the_peak_at_its_hour(
    gui: &Gui,
    admin: &Client,
    kubeconfig: &std::path::Path,
) {
    let client = &gui.client;
    stopped_pool(admin, DEMO_NAMESPACE, "use", 3).await.unwrap();
    let spec = DesktopPoolSpec {
        golden: "golden-desktop".into(),
        size: 3,
        ..Default::default()
    };
    Api::<DesktopPool>::namespaced(admin.clone(), DEMO_NAMESPACE)
        .create(&PostParams::default(), &DesktopPool::new("use", spec))
        .await
        .unwrap();
    let before = jiff::Timestamp::now();
    for user in ["alice", "bob"] {
        let actor = Actor::connect(sandbox::kubeconfig::client(kubeconfig, user).await.unwrap())
            .await
            .unwrap();
        tokio::time::timeout(
            BROKER_WORK,
            claim::assign(
                &actor,
                DEMO_NAMESPACE,
                "use",
                user,
                &ClaimOptions::default(),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("{user}'s claim within the broker's time"))
        .unwrap_or_else(|e| panic!("{user}'s claim: {e}"));
    }
    // The broker's history says so (its next look after the claims).
    let deadline = Instant::now() + BROKER_WORK;
    let peak = loop {
        let rows = cli_usage(kubeconfig, "use");
        if let Some(row) = rows.iter().find(|r| r.1 == 2) {
            break row.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no hour with a peak of 2: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The hour of the claims, by the API server's clock (the sandbox's is this machine's).
    let (first, last) = (hour_of(before), hour_of(jiff::Timestamp::now()));
    assert!(
        first <= peak.0 && peak.0 <= last,
        "the peak's hour {} is not the claims' ({first} to {last})",
        peak.0
    );

    // The small chart in the pool's head: its tallest bar is that hour.
    let small = "[data-testid='usage-chart-use']";
    wait_until_async("the small chart shows the peak of 2", || async {
        bars(client, small).await.iter().any(|b| b.1 == 2)
    })
    .await;
    let drawn = bars(client, small).await;
    let tallest = drawn.iter().max_by_key(|b| b.1).unwrap();
    assert_eq!(tallest.0, peak.0, "tallest bar {tallest:?} of {drawn:?}");
    let label = js(
        client,
        &format!(
            "return document.querySelector(\"{small} g.usage-peak rect[data-hour='{}']\").getAttribute('aria-label')",
            peak.0
        ),
    )
    .await;
    assert!(
        label
            .as_str()
            .unwrap_or_default()
            .contains("peak 2 claimed"),
        "{label}"
    );

    js(
        client,
        "document.querySelector(\"[data-testid='usage-corral-vms-use']\").scrollIntoView()",
    )
    .await;
    gui.screenshot("e2e-usage-head.png");

    // The large chart and its table: the CLI's rows, bar for bar (read again until both agree:
    // a new hour may begin between the two reads).
    click(client, "[data-testid='usage-corral-vms-use']").await;
    wait_text(client, "[data-testid='usage-dialog']", "Usage of pool use").await;
    click(client, "[data-testid='usage-table-toggle']").await;
    wait_until_async("the large chart and the table match the CLI's CSV", || async {
        let rows = cli_usage(kubeconfig, "use");
        let want: Vec<(String, i64)> = rows.iter().map(|r| (r.0.clone(), r.1)).collect();
        let table = js(
            client,
            "return Array.from(document.querySelectorAll(\"[data-testid='usage-table'] tbody tr\")).map(r => [r.dataset.hour, ...Array.from(r.cells).slice(1, 3).map(c => Number(c.textContent))])",
        )
        .await;
        let mut table: Vec<(String, i64, i64)> = serde_json::from_value(table).unwrap_or_default();
        table.sort();
        bars(client, "[data-testid='usage-chart-large']").await == want && table == rows
    })
    .await;
    gui.screenshot("e2e-usage-chart.png");
    accessibility_check(client, "the usage dialog").await;
}

/// Presses Esc where the focus is and waits until the history dialog (`what`) has closed.
async fn close_history_with_escape(client: &fantoccini::Client, what: &str) {
    js(
        client,
        "document.activeElement.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }))",
    )
    .await;
    wait_until_async(&format!("Esc to close {what}"), || async {
        !exists(client, "[data-testid='history-dialog']").await
    })
    .await;
}
