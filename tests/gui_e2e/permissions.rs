//! Who may do what: an ordinary user sees the administrator's actions (New pool, Assign…,
//! Delete…) disabled with the cluster's reason; an administrator does not.

use std::time::Duration;

use crate::driver::{Gui, choose, click, is_disabled, text_of, wait_attr, wait_text};

#[tokio::test]
async fn alice_sees_administrator_actions_disabled_with_the_reason_and_admin_does_not() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let guard = wait_text(client, "[data-testid='guard-badge']", "guard").await;
    assert_eq!(guard.trim(), "guard on", "the sandbox has the guard");
    // The GUI tests' sandbox runs no broker: the badge beside the guard's says so, and its
    // title what that means, in the core's words (the CLI's notice too).
    let notice = vdi_core::claim::cluster_half::NO_BROKER_NOTICE;
    let broker = wait_text(client, "[data-testid='broker-badge']", "broker").await;
    assert_eq!(broker.trim(), "no broker");
    let title = wait_attr(client, "[data-testid='broker-badge']", "title", notice).await;
    assert_eq!(title, notice);

    // admin: New pool, Assign… and Delete… are enabled.
    wait_text(client, "[data-testid='identity-badge']", "admin").await;
    let (new_pool, assign, delete) = (
        "[data-testid='new-pool']",
        "[data-testid='assign-corral-vms-legacy']",
        "[data-testid='delete-corral-vms-legacy']",
    );
    // Permissions arrive after the cluster connection opens: give them a moment, then they must hold.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for css in [new_pool, assign, delete] {
        assert!(!is_disabled(client, css).await, "admin: {css} is disabled");
    }

    // alice: all three disabled, each with the cluster's reason.
    choose(client, "[data-testid='context-select']", "alice").await;
    wait_text(client, "[data-testid='identity-badge']", "alice").await;
    // In plain words; the cluster's reason, which names RBAC rules, on hover.
    wait_text(
        client,
        "[data-testid='new-pool-blocked']",
        "You may not create pools in corral-vms (hover",
    )
    .await;
    let blocked = wait_attr(
        client,
        "[data-testid='new-pool-blocked']",
        "title",
        "RBAC does not let you create virtualmachineclones.clone.kubevirt.io",
    )
    .await;
    assert!(is_disabled(client, new_pool).await, "{blocked}");
    let reason = wait_attr(
        client,
        delete,
        "data-reason",
        "RBAC does not let you delete virtualmachines",
    )
    .await;
    assert!(is_disabled(client, delete).await, "{reason}");
    let reason = wait_attr(
        client,
        assign,
        "data-reason",
        "only members of corral-vdi:admins may assign",
    )
    .await;
    assert!(is_disabled(client, assign).await, "{reason}");
    // In plain words on the main screen; the cluster's reasons one click away.
    wait_text(
        client,
        "[data-testid='denied-note'] summary",
        "not yours to use here",
    )
    .await;
    click(client, "[data-testid='denied-note'] summary").await;
    let note = wait_text(client, "[data-testid='denied-note']", "Delete… is off").await;
    assert!(
        note.contains("Assign… is off: only members of corral-vdi:admins"),
        "{note}"
    );
    // What she may do stays offered.
    assert!(!is_disabled(client, "[data-testid='get-desktop-submit']").await);
    gui.screenshot("e2e-alice-permissions.png");
    gui.close().await;
}
