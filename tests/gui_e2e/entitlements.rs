//! Who may use a pool, in its settings dialog (issue 38, SPEC "Entitlements"): every RBAC grant
//! of the right to claim from it, with its reach and who granted it; an administrator adds a
//! group (a RoleBinding of the pool's name, written to the cluster), is refused one of
//! Kubernetes' own groups with nothing written, and takes back a grant the product wrote.

use std::time::Duration;

use corral_tests::client_as;
use vdi_core::entitlement;

use crate::driver::{
    Gui, choose, click, exists, js, replace_text, text_of, wait_text, wait_until_async,
};

const NS: &str = "corral-vms";

/// Who may claim from `pool` as the cluster says, as "who (reach)" lines.
async fn grants(pool: &str) -> Vec<String> {
    let (found, _) = entitlement::list(&client_as("admin").await, NS, pool)
        .await
        .unwrap();
    found
        .into_iter()
        .map(|e| format!("{} ({:?}, by {:?})", e.who, e.reach, e.granted_by))
        .collect()
}

#[tokio::test]
async fn an_administrator_grants_a_group_and_takes_back_everyone_in_the_pool_settings() {
    let admin = client_as("admin").await;
    // A label-only pool, opened to everyone who may claim here by its name (as pool create does).
    corral_tests::pool_vms(&admin, NS, "ent", 1).await.unwrap();
    let gui = Gui::launch().await;
    let client = &gui.client;
    wait_text(client, "[data-testid='pool-corral-vms-ent']", "ent-1").await;
    click(client, "[data-testid='settings-corral-vms-ent']").await;
    let table = wait_text(
        client,
        "[data-testid='entitlements']",
        "everyone who may claim in the namespace",
    )
    .await;
    eprintln!("who may use ent: {table}");
    assert!(table.contains("this pool"), "{table}");

    // One of Kubernetes' own groups: refused with the reason, nothing written.
    let before = grants("ent").await;
    choose(client, "[data-testid='entitle-kind']", "group").await;
    replace_text(client, "[data-testid='entitle-name']", "system:masters").await;
    click(client, "[data-testid='entitle-add']").await;
    let refused = wait_text(
        client,
        "[data-testid='entitle-error']",
        "one of Kubernetes' own groups",
    )
    .await;
    eprintln!("refused: {refused}");
    assert_eq!(grants("ent").await, before, "a refused group was written");

    // The identity provider's group engineering: a RoleBinding of the pool's name, by admin.
    replace_text(client, "[data-testid='entitle-name']", "engineering").await;
    click(client, "[data-testid='entitle-add']").await;
    wait_text(
        client,
        "[data-testid='entitle-done']",
        "group engineering may claim from pool \"ent\"",
    )
    .await;
    wait_text(client, "[data-testid='entitlements']", "group engineering").await;
    let now = grants("ent").await;
    assert!(
        now.contains(&"group engineering (Pool, by Some(\"admin\"))".to_owned()),
        "{now:?}"
    );
    assert!(!exists(client, "[data-testid='entitle-error']").await);
    gui.screenshot("e2e-entitlements.png");

    // Everyone taken back: its row's Remove.
    let clicked = js(
        client,
        r#"const row = [...document.querySelectorAll("[data-testid='entitlement']")]
             .find(r => r.textContent.includes("everyone who may claim"));
           const button = row && row.querySelector("[data-testid='entitle-remove']");
           if (button) button.click();
           return Boolean(button);"#,
    )
    .await;
    assert_eq!(
        clicked,
        serde_json::json!(true),
        "no Remove on everyone's row"
    );
    wait_text(
        client,
        "[data-testid='entitle-done']",
        "may no longer claim",
    )
    .await;
    wait_until_async("everyone's row to go", || async {
        let text = text_of(client, "[data-testid='entitlements']").await;
        !text.contains("everyone who may claim")
    })
    .await;
    let after = grants("ent").await;
    assert!(
        after.iter().all(|g| !g.starts_with("everyone")),
        "{after:?}"
    );
    // carol (in contractors) may no longer claim from it; alice (in engineering) may.
    corral_tests::eventually("carol refused ent", Duration::from_secs(10), || async {
        (!entitlement::may_claim(&client_as("carol").await, NS, "ent")
            .await
            .unwrap())
        .then_some(())
    })
    .await;
    assert!(
        entitlement::may_claim(&client_as("alice").await, NS, "ent")
            .await
            .unwrap()
    );
    assert!(after.iter().any(|g| g.contains("(Pool,")), "{after:?}");
    gui.close().await;
}
