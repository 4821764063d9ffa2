//! Capacity: the New pool dialog refuses a pool the nodes' GPUs cannot hold, and the Capacity
//! view follows the nodes live.

use corral_tests::client_as;
use fantoccini::Locator;
use kube::api::{Api, DeleteParams};
use vdi_core::resources::VirtualMachine;

use crate::driver::{
    Gui, click, is_disabled, open_new_pool, text_of, type_into, wait_attr, wait_text,
};

/// Sets the `gpus[]` of a VM object's template: one entry per resource.
fn gpus(vm: &mut serde_json::Value, resources: &[&str]) {
    let entries: Vec<serde_json::Value> = resources
        .iter()
        .enumerate()
        .map(|(i, r)| serde_json::json!({ "name": format!("gpu{i}"), "deviceName": r }))
        .collect();
    vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"] = serde_json::json!(entries);
}

#[tokio::test]
async fn the_new_pool_dialog_refuses_a_pool_the_gpus_cannot_hold_and_capacity_follows_live() {
    use sandbox::devices::{DeviceNode, PermitKind};
    const GPU: &str = "nvidia.com/GUI_A10";
    corral_tests::permit_device(PermitKind::Pci, GPU, false).await;
    corral_tests::add_node(DeviceNode::new("gui-gpu-a").devices(GPU, 6, 4)).await;
    corral_tests::add_node(DeviceNode::new("gui-gpu-b").devices(GPU, 0, 0)).await;
    corral_tests::golden_vm("corral-vms", "golden-gpu", "Halted", |vm| gpus(vm, &[GPU])).await;

    let gui = Gui::launch().await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;

    // New pool: five members need five GPUs, one node has four free.
    open_new_pool(client, "golden-gpu", "gpupool").await;
    // Select all (Control+A), then type over it, as a user would.
    let size = "[data-testid='pool-size']";
    type_into(client, size, "\u{e009}a\u{e009}5").await;
    // The plan's own words, as the CLI prints them (vdi_core::capacity::plan_words).
    let verdict = wait_text(client, "[data-testid='capacity-verdict']", "fits 4 of").await;
    assert!(
        verdict.starts_with("does not fit: fits 4 of the 5 you ask for (room for 4 such VMs now:"),
        "{verdict}"
    );
    let table = text_of(client, "[data-testid='capacity-table']").await;
    assert!(table.contains("gui-gpu-a"), "{table}");
    assert!(table.contains("gui-gpu-b"), "{table}");
    assert!(is_disabled(client, "[data-testid='create-submit']").await);
    let blocked = text_of(client, "[data-testid='create-blocked']").await;
    assert!(
        blocked.starts_with("make the pool smaller (4 fit now)"),
        "{blocked}"
    );
    // The member preview does not contradict the disabled Create.
    assert_eq!(
        text_of(client, "[data-testid='new-pool-preview']").await,
        "Would create gpupool-1 … gpupool-5"
    );
    gui.screenshot("e2e-capacity-refused.png");

    // Four fit: Create is enabled again.
    type_into(client, size, "\u{e009}a\u{e009}4").await;
    wait_text(
        client,
        "[data-testid='capacity-verdict']",
        "fits: all 4 you ask for",
    )
    .await;
    wait_attr(
        client,
        "[data-testid='capacity-preview']",
        "data-admitted",
        "true",
    )
    .await;
    assert!(!is_disabled(client, "[data-testid='create-submit']").await);
    assert_eq!(
        text_of(client, "[data-testid='new-pool-preview']").await,
        "Will create gpupool-1 … gpupool-4"
    );
    client
        .find(Locator::Css("[data-testid='new-pool-dialog']"))
        .await
        .unwrap()
        .send_keys("\u{e00c}")
        .await
        .unwrap();

    // The Capacity view: node a hands out 4 of its 6; a VM that starts takes one, live.
    click(client, "[data-testid='capacity-button']").await;
    let row = "[data-testid='cluster-capacity-row'][data-node='gui-gpu-a']";
    let text = wait_text(client, row, GPU).await;
    assert!(text.contains("4 of 6"), "{text}");
    assert_eq!(
        text_of(
            client,
            &format!("{row} [data-testid='cluster-capacity-free']")
        )
        .await,
        "4"
    );
    corral_tests::running_vm("corral-vms", "gpu-user", |vm| gpus(vm, &[GPU])).await;
    wait_text(
        client,
        &format!("{row} [data-testid='cluster-capacity-holders']"),
        "corral-vms/gpu-user",
    )
    .await;
    assert_eq!(
        text_of(
            client,
            &format!("{row} [data-testid='cluster-capacity-free']")
        )
        .await,
        "3"
    );
    gui.screenshot("e2e-capacity-view.png");
    let vms: Api<VirtualMachine> = Api::namespaced(client_as("admin").await, "corral-vms");
    for name in ["gpu-user", "golden-gpu"] {
        vms.delete(name, &DeleteParams::default()).await.unwrap();
    }
    gui.close().await;
}
