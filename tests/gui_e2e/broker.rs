//! The app on a cluster with the broker (issue 25): a named sandbox started by `sandbox up`,
//! which runs the broker's two replicas and gives alice the claimant role only. The header's
//! badge names the leader; alice's "Get a desktop" waits while the broker grants ("granting"),
//! then her member reads assigned and Running, with the broker's RoleBinding bound to her; her
//! Release is the Lease alone, and the broker removes the grant and stops the VM.

use std::time::{Duration, Instant};

use corral_tests::{NamedSandbox, stopped_pool, vms};
use fantoccini::Client;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::Api;
use sandbox::DEMO_NAMESPACE;
use serde_json::json;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, BROKER_NAME, BROKER_NAMESPACE, GRANTED_TO_ANNOTATION, grant_name,
};

use crate::driver::{
    Gui, choose, click, exists, is_disabled, js, pick_pool, text_of, wait_attr, wait_text,
    wait_text_within, wait_until_async,
};

/// How long the broker may take to grant a claim and start its VM, or to tear it down, here
/// (the emulator starts a VM in about a second; replicas share two cores with the app).
const BROKER_WORK: Duration = Duration::from_secs(60);

#[tokio::test]
async fn alice_gets_a_desktop_through_the_broker_and_releases_it() {
    let cluster = NamedSandbox::new(&format!("gbroker{}", std::process::id()));
    let kubeconfig = cluster.up();
    let admin = sandbox::kubeconfig::client(&kubeconfig, "admin")
        .await
        .unwrap();
    stopped_pool(&admin, DEMO_NAMESPACE, "brk", 2)
        .await
        .unwrap();
    let gui = Gui::launch_on(&kubeconfig, &[]).await;
    let client = &gui.client;
    wait_text(client, "[data-testid='feed-status']", "live").await;
    wait_text(client, "[data-testid='identity-badge']", "admin").await;
    // Where the header's badges stand before the broker's badge has its answer: they stay there.
    let identity_left = "return document.querySelector(\"[data-testid='identity-badge']\").getBoundingClientRect().left";
    let left_before = js(client, identity_left).await;

    // The badge names the replica that holds the broker's leader Lease.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), BROKER_NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        let leader = leases
            .get(BROKER_NAME)
            .await
            .unwrap()
            .spec
            .and_then(|s| s.holder_identity)
            .expect("sandbox up leaves a replica leading");
        let badge = text_of(client, "[data-testid='broker-badge']").await;
        if badge.trim() == format!("broker: {leader}") {
            break leader;
        }
        assert!(
            Instant::now() < deadline,
            "the badge says {badge:?}; the leader Lease names {leader:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("badge: broker: {leader}");
    assert_eq!(
        js(client, identity_left).await,
        left_before,
        "the header's badges moved when the broker's badge arrived"
    );

    // alice: Get a desktop in pool brk. Until the broker has bound access and started the VM,
    // the line under the button says what the claim waits for.
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;
    wait_text(client, "[data-testid='pool-corral-vms-brk']", "2 free").await;
    // Get a desktop is offered to her: with a broker a claim is the Lease alone, so her role's
    // lack of VM patch and power rights does not block it (it did: the app asked for those).
    wait_text(
        client,
        "[data-testid='get-desktop-line']",
        "claims a free member",
    )
    .await;
    // Permissions arrive after the pools: give them a moment, then the offer must hold.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if exists(client, "[data-testid='get-desktop-blocked']").await {
        panic!(
            "Get a desktop is blocked for alice: {}",
            text_of(client, "[data-testid='get-desktop-blocked']").await
        );
    }
    pick_pool(client, "corral-vms/brk").await;
    click(client, "[data-testid='get-desktop-submit']").await;
    let steps = watch_claim(client, &gui).await;
    eprintln!("claim steps shown: {steps:?}");
    let result = text_of(client, "[data-testid='action-result']").await;
    assert!(
        result.contains("(started by the broker)"),
        "the claim's result: {result}"
    );
    let member = ["brk-1", "brk-2"]
        .into_iter()
        .find(|m| result.contains(&format!("you got {m} ")))
        .unwrap_or_else(|| panic!("the claim's result names no member of brk: {result}"))
        .to_owned();
    for step in &steps {
        assert!(
            step.starts_with("granting: ") || step.starts_with("no broker replica leads"),
            "a claim step the app showed: {step:?}"
        );
    }

    // The app: assigned to alice and Running, in the pool's rows and under My desktops.
    let row = format!("[data-testid='member-{member}']");
    for needle in ["assigned", "alice", "Running"] {
        wait_text_within(client, &row, needle, BROKER_WORK).await;
    }
    let mine = wait_text(
        client,
        &format!("[data-testid='my-desktop-{member}']"),
        "Running",
    )
    .await;
    assert!(mine.contains("assigned"), "under My desktops: {mine}");
    // Her Connect… is offered to her.
    assert!(!is_disabled(client, &format!("[data-testid='connect-{member}']")).await);
    gui.screenshot("e2e-broker-granted.png");

    // bob: with the broker, access follows the claim. Connect… on alice's desktop is not
    // offered as a take-over that every path then refuses: it says who may, and what he may do.
    choose(client, "[data-testid='context-select']", "bob").await;
    wait_text(client, "[data-testid='identity-badge']", "bob").await;
    let connect = format!("[data-testid='connect-{member}']");
    let reason = wait_attr(client, &connect, "data-reason", "Only alice, who holds").await;
    assert!(reason.contains("claim a free desktop"), "{reason}");
    assert!(is_disabled(client, &connect).await, "{reason}");
    gui.screenshot("e2e-broker-bob-connect.png");
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;

    // The cluster: the broker's RoleBinding binds alice to the member's Role, and the broker
    // marked and started the VM.
    let (role, binding) = grant(&admin, &member).await;
    let binding = binding.unwrap_or_else(|| panic!("no RoleBinding {}", grant_name(&member)));
    let subjects: Vec<(String, String)> = binding
        .subjects
        .iter()
        .flatten()
        .map(|s| (s.kind.clone(), s.name.clone()))
        .collect();
    assert_eq!(subjects, [("User".to_owned(), "alice".to_owned())]);
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("Role", grant_name(&member).as_str())
    );
    let role = role.unwrap_or_else(|| panic!("no Role {}", grant_name(&member)));
    for rule in role.rules.iter().flatten() {
        assert_eq!(
            rule.resource_names.as_deref(),
            Some(std::slice::from_ref(&member)),
            "a rule of the grant not limited to {member}: {rule:?}"
        );
    }
    let vm = vms(&admin, DEMO_NAMESPACE).get(&member).await.unwrap();
    assert_eq!(
        vm.annotations()
            .get(GRANTED_TO_ANNOTATION)
            .map(String::as_str),
        Some("alice")
    );
    assert_eq!(
        vm.labels().get(ASSIGNED_TO_LABEL).map(String::as_str),
        Some("alice")
    );
    assert_eq!(
        vm.data.pointer("/status/printableStatus"),
        Some(&json!("Running"))
    );

    // alice releases it in the app: the Lease alone goes, and the broker stops the VM.
    click(client, &format!("[data-testid='release-{member}']")).await;
    wait_text(
        client,
        "[data-testid='release-question']",
        &format!("Release {member}, your desktop?"),
    )
    .await;
    click(client, "[data-testid='confirm-release']").await;
    let released = wait_text(
        client,
        "[data-testid='action-result']",
        &format!("released {member} (was alice)"),
    )
    .await;
    assert!(
        released.contains("its VM is stopped"),
        "the release's result: {released}"
    );
    let deadline = Instant::now() + BROKER_WORK;
    loop {
        let (role, binding) = grant(&admin, &member).await;
        let vm = vms(&admin, DEMO_NAMESPACE).get(&member).await.unwrap();
        let power = vm.data.pointer("/status/printableStatus").cloned();
        let marks = (
            vm.labels().get(ASSIGNED_TO_LABEL).cloned(),
            vm.annotations().get(GRANTED_TO_ANNOTATION).cloned(),
        );
        if role.is_none()
            && binding.is_none()
            && marks == (None, None)
            && power == Some(json!("Stopped"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{member} after alice's release: Role {}, RoleBinding {}, label and granted-to \
             {marks:?}, power {power:?}",
            role.is_some(),
            binding.is_some()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Under My desktops only the seed's label-only legacy-2 stays hers.
    let listed = format!("[data-testid='my-desktop-{member}']");
    wait_until_async(&format!("{member} to leave My desktops"), || async {
        !exists(client, &listed).await
    })
    .await;
    wait_text_within(client, &row, "Stopped", BROKER_WORK).await;
    let row_text = wait_text(client, &row, "free").await;
    assert!(!row_text.contains("alice"), "{member}'s row: {row_text}");
    gui.screenshot("e2e-broker-released.png");
    gui.close().await;
    drop(cluster);
}

/// Follows a running "Get a desktop" until its result shows; returns each distinct step the
/// app showed meanwhile (the claim-progress line), and takes a screenshot the first time the
/// claim reads "granting", if it does for long enough to be seen.
async fn watch_claim(client: &Client, gui: &Gui) -> Vec<String> {
    let deadline = Instant::now() + BROKER_WORK;
    let mut steps: Vec<String> = Vec::new();
    let mut shot = false;
    while !exists(client, "[data-testid='action-result']").await {
        if exists(client, "[data-testid='action-error']").await {
            panic!(
                "the claim failed: {}",
                text_of(client, "[data-testid='action-error']").await
            );
        }
        let step = js(
            client,
            "const e = document.querySelector(\"[data-testid='claim-progress']\"); \
             return e === null ? null : e.textContent",
        )
        .await;
        if let Some(step) = step.as_str()
            && steps.last().map(String::as_str) != Some(step)
        {
            steps.push(step.to_owned());
            if !shot {
                gui.screenshot("e2e-broker-granting.png");
                shot = true;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no result of the claim within {BROKER_WORK:?}; steps shown: {steps:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    steps
}

/// The broker's Role and RoleBinding for `member` in the demo namespace, each if it exists.
async fn grant(admin: &kube::Client, member: &str) -> (Option<Role>, Option<RoleBinding>) {
    let name = grant_name(member);
    let role = Api::<Role>::namespaced(admin.clone(), DEMO_NAMESPACE)
        .get_opt(&name)
        .await
        .unwrap();
    let binding = Api::<RoleBinding>::namespaced(admin.clone(), DEMO_NAMESPACE)
        .get_opt(&name)
        .await
        .unwrap();
    (role, binding)
}
