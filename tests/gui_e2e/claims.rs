//! Claims: "Get a desktop" (a pool's last member read as a success) and Release (another
//! user's release refused), and Assign's exact name.

use corral_tests::client_as;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};
use vdi_core::resources::VirtualMachine;

use crate::driver::{
    Gui, choose, click, exists, is_disabled, js, pick_pool, replace_text, text_of, type_into,
    wait_attr, wait_text,
};

#[tokio::test]
async fn alice_gets_a_desktop_and_bob_may_not_release_it() {
    let admin = client_as("admin").await;
    corral_tests::pool_vms(&admin, "corral-vms", "desk", 2)
        .await
        .unwrap();
    corral_tests::pool_vms(&admin, "corral-vms", "solo", 1)
        .await
        .unwrap();
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-desk']").await;

    // alice: "Get a desktop" on pool desk, then it shows under My desktops.
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;
    wait_text(client, "[data-testid='pool-corral-vms-desk']", "2 free").await;
    pick_pool(client, "corral-vms/desk").await;
    click(client, "[data-testid='get-desktop-submit']").await;
    let result = wait_text(client, "[data-testid='action-result']", "you got desk-").await;
    eprintln!("alice's claim: {result}");
    let mine = wait_text(client, "[data-testid='my-desktops']", "desk-").await;
    let member = ["desk-1", "desk-2"]
        .into_iter()
        .find(|m| mine.contains(m))
        .expect("alice's desktop is listed")
        .to_owned();
    assert!(exists(client, &format!("[data-testid='my-desktop-{member}']")).await);

    // A pool's last free member: getting it reads as a success, not as a warning that the
    // pool is full (that is said only to those still asking).
    pick_pool(client, "corral-vms/solo").await;
    click(client, "[data-testid='get-desktop-submit']").await;
    wait_text(client, "[data-testid='my-desktop-solo-1']", "solo").await;
    let line = wait_text(
        client,
        "[data-testid='get-desktop-line']",
        "You hold solo-1 of solo",
    )
    .await;
    // The line says it as news, not in the warning style (one element, two looks).
    let warned = js(
        client,
        "return document.querySelector(\"[data-testid='get-desktop-line']\").classList.contains('my-blocker')",
    )
    .await;
    assert_eq!(warned.as_bool(), Some(false), "{line}");
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
        .get(&vdi_core::names::lease_name(&member))
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("alice")
    );
    gui.close().await;
}

/// Assign, as an administrator: a name with a space around it is refused in the dialog, with the
/// CLI's reason, and nothing is claimed (it is not quietly trimmed into another name); the name
/// as the cluster knows it gets the member.
#[tokio::test]
async fn assign_refuses_a_name_with_a_space_and_takes_the_exact_name() {
    corral_tests::desktop_member("corral-vms", "asg", "asg-1", false).await;
    let admin = client_as("admin").await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "corral-vms");
    let gui = Gui::launch().await;
    let client = &gui.client;
    click(client, "[data-testid='assign-corral-vms-asg']").await;
    type_into(client, "[data-testid='assign-user']", " alice").await;
    click(client, "[data-testid='assign-submit']").await;
    let said = wait_text(
        client,
        "[data-testid='action-error']",
        "starts or ends with a space",
    )
    .await;
    assert!(said.contains("user \" alice\""), "{said}");
    assert!(
        leases.get_opt("corral-vdi-asg-1").await.unwrap().is_none(),
        "a refused assign wrote a Lease"
    );
    js(
        client,
        "document.querySelector(\"[data-testid='assign-user']\").select(); return null",
    )
    .await;
    type_into(client, "[data-testid='assign-user']", "alice").await;
    click(client, "[data-testid='assign-submit']").await;
    wait_text(client, "[data-testid='member-asg-1']", "alice").await;
    let lease = leases.get("corral-vdi-asg-1").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("alice")
    );
    gui.close().await;
    let actor = corral_tests::actor_as("admin").await;
    vdi_core::claim::unassign(
        &actor,
        "corral-vms",
        "asg-1",
        &vdi_core::claim::UnassignOptions { force: true },
    )
    .await
    .unwrap();
    Api::<VirtualMachine>::namespaced(admin, "corral-vms")
        .delete("asg-1", &DeleteParams::default())
        .await
        .unwrap();
}

/// "Get a desktop" offers only the pools you are entitled to (issue 38: RBAC's claim on
/// desktoppools): a pool for alice is offered to her and not to bob, who may claim in the
/// namespace (this sandbox has no broker: carol may not claim here at all; the broker's tests
/// try groups).
#[tokio::test]
async fn get_a_desktop_offers_only_the_pools_you_are_entitled_to() {
    use vdi_core::broker::claimants::Claimant;
    use vdi_core::entitlement::{Who, entitle, unentitle};
    let admin = client_as("admin").await;
    corral_tests::pool_vms(&admin, "corral-vms", "eng", 1)
        .await
        .unwrap();
    unentitle(&admin, "corral-vms", "eng", &[Who::Everyone])
        .await
        .unwrap();
    let alice = Who::Claimant(Claimant::User("alice".into()));
    entitle(&admin, "corral-vms", "eng", &[alice], "admin")
        .await
        .unwrap();
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-eng']").await;
    let option = "[data-testid='get-desktop-option-corral-vms/eng']";
    for (user, offered) in [("alice", true), ("bob", false)] {
        choose(client, "[data-testid='context-select']", user).await;
        wait_text(client, "[data-testid='identity-badge']", user).await;
        wait_text(client, "[data-testid='pool-corral-vms-eng']", "1 free").await;
        wait_attr(
            client,
            "[data-testid='my-desktops']",
            "data-entitlements",
            "known",
        )
        .await;
        replace_text(client, "[data-testid='get-desktop-pool']", "eng").await;
        assert_eq!(
            exists(client, option).await,
            offered,
            "{user} is offered pool eng: {}",
            !offered
        );
    }
}
