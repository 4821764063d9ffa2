//! The New pool and Delete pool dialogs: a pool of three created and deleted, a create refused
//! up front (no Clean up offered), and a create failing part-way cleaned up from the dialog.

use std::time::{Duration, Instant};

use corral_tests::client_as;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use vdi_core::names::POOL_LABEL;
use vdi_core::resources::VirtualMachine;

use crate::driver::{
    Gui, click, exists, is_disabled, js, open_new_pool, picked_pool, text_of, type_into, wait_text,
};

#[tokio::test]
async fn a_pool_of_three_is_created_and_deleted_through_the_dialogs() {
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    // Get a desktop's pool, shown by default: a new pool sorted before every other one
    // ("a-guipool") does not replace it.
    let picked = picked_pool(client).await;
    assert!(!picked.is_empty(), "no pool shown under Get a desktop");

    open_new_pool(client, "golden-desktop", "a-guipool").await;
    wait_text(client, "[data-testid='new-pool-dialog']", "a-guipool-3").await;
    click(client, "[data-testid='create-submit']").await;
    wait_text(client, "[data-testid='create-progress']", "a-guipool-1").await;
    let result = wait_text(client, "[data-testid='create-result']", "3 members").await;
    eprintln!("create result: {result}");
    for i in 1..=3 {
        assert!(exists(client, &format!("[data-testid='progress-a-guipool-{i}']")).await);
    }
    click(client, "[data-testid='create-close']").await;
    for i in 1..=3 {
        wait_text(
            client,
            "[data-testid='pool-corral-vms-a-guipool']",
            &format!("a-guipool-{i}"),
        )
        .await;
    }

    assert_eq!(picked_pool(client).await, picked);
    gui.screenshot("e2e-pool-created.png");
    click(client, "[data-testid='delete-corral-vms-a-guipool']").await;
    let listed = wait_text(client, "[data-testid='delete-dialog']", "a-guipool-3").await;
    assert!(listed.contains("a-guipool-1"), "{listed}");
    type_into(client, "[data-testid='delete-confirm-name']", "a-guipool").await;
    click(client, "[data-testid='delete-submit']").await;
    wait_text(client, "[data-testid='action-result']", "a-guipool").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while exists(client, "[data-testid='pool-corral-vms-a-guipool']").await {
        assert!(
            Instant::now() < deadline,
            "the deleted pool stayed on screen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let vms: Api<VirtualMachine> = Api::namespaced(client_as("admin").await, "corral-vms");
    let left = vms
        .list(&kube::api::ListParams::default().labels(&format!("{POOL_LABEL}=a-guipool")))
        .await
        .unwrap();
    assert!(
        left.items
            .iter()
            .all(|vm| vm.metadata.deletion_timestamp.is_some())
    );
    gui.close().await;
}

/// A name the list shows taken is refused in the dialog (Create disabled, with the reason). A
/// create the server refuses before it made anything (a member's name is another pool's VM)
/// offers no Clean up or Retry, which would delete that VM: it says nothing was made, and the
/// VM stays.
#[tokio::test]
async fn a_create_refused_up_front_offers_no_clean_up() {
    let vms: Api<VirtualMachine> = Api::namespaced(client_as("admin").await, "corral-vms");
    corral_tests::desktop_member("corral-vms", "upfront", "taken-1", false).await;
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-upfront']").await;
    open_new_pool(client, "golden-desktop", "legacy").await;
    wait_text(client, "[data-testid='new-pool-exists']", "already exists").await;
    wait_text(client, "[data-testid='create-blocked']", "Choose a name").await;
    assert!(is_disabled(client, "[data-testid='create-submit']").await);
    let preview = text_of(client, "[data-testid='new-pool-preview']").await;
    assert!(preview.starts_with("Would create"), "{preview}");
    // The refusal is read first, what would have been made after it.
    let refusal_first = js(
        client,
        r#"const exists = document.querySelector("[data-testid='new-pool-exists']");
           const preview = document.querySelector("[data-testid='new-pool-preview']");
           return Boolean(exists.compareDocumentPosition(preview) & Node.DOCUMENT_POSITION_FOLLOWING);"#,
    )
    .await;
    assert_eq!(refusal_first, serde_json::json!(true));

    // "taken" is no pool's name, but its first member's name is upfront's VM.
    for _ in 0.."legacy".len() {
        type_into(client, "[data-testid='pool-name']", "\u{e003}").await;
    }
    type_into(client, "[data-testid='pool-name']", "taken").await;
    wait_text(
        client,
        "[data-testid='new-pool-preview']",
        "Will create taken-1",
    )
    .await;
    click(client, "[data-testid='create-submit']").await;
    wait_text(client, "[data-testid='create-error']", "taken-1").await;
    wait_text(
        client,
        "[data-testid='create-nothing-made']",
        "nothing to clean up",
    )
    .await;
    assert!(
        !exists(client, "[data-testid='create-clean-up']").await,
        "Clean up offered"
    );
    assert!(
        !exists(client, "[data-testid='create-retry']").await,
        "Retry offered"
    );
    click(client, "[data-testid='create-close']").await;
    let vm = vms.get("taken-1").await.expect("taken-1 is still there");
    assert_eq!(
        vm.labels().get(POOL_LABEL).map(String::as_str),
        Some("upfront")
    );
    gui.close().await;
    vms.delete("taken-1", &DeleteParams::default())
        .await
        .unwrap();
}

/// A create that fails part-way says so in the app's words (no CLI commands), shows the failed
/// member in its own colour, and Clean up removes what it made.
#[tokio::test]
async fn a_failed_create_offers_clean_up_in_the_dialog() {
    corral_tests::add_knob("failClones", "guifail-2").await;
    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    open_new_pool(client, "golden-desktop", "guifail").await;
    wait_text(client, "[data-testid='new-pool-dialog']", "guifail-3").await;
    click(client, "[data-testid='create-submit']").await;
    let error = wait_text(client, "[data-testid='create-error']", "guifail-2").await;
    assert!(
        !error.contains("corral-vdi ") && !error.contains("--timeout"),
        "CLI advice in the app: {error}"
    );
    let choices = wait_text(client, "[data-testid='create-choices']", "Clean up").await;
    assert!(choices.contains("2 of 3 members were made"), "{choices}");
    let failed_width = js(
        client,
        "return document.querySelector(\"[data-testid='create-bar-failed']\").getBoundingClientRect().width",
    )
    .await;
    assert!(
        failed_width.as_f64().unwrap_or(0.0) > 0.0,
        "no failed segment"
    );
    gui.screenshot("e2e-create-failed.png");
    click(client, "[data-testid='create-clean-up']").await;
    wait_text(client, "[data-testid='create-cleaned-up']", "guifail").await;
    click(client, "[data-testid='create-close']").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while exists(client, "[data-testid='pool-corral-vms-guifail']").await {
        assert!(Instant::now() < deadline, "the cleaned-up pool stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gui.close().await;
}
