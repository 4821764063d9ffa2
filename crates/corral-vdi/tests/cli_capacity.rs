//! `corral-vdi capacity` and `pool create`'s capacity refusal against the sandbox: the per-node
//! table, "fits N of the M you ask for" with its exit status, the cluster-wide view naming who
//! holds each device, and the refusal table with its hint. Devices are numbers on nodes this
//! binary adds (its own sandbox), placed by the emulator.

mod common;

use common::{corral, text};
use corral_tests::{add_node, golden_vm, namespace, permit_device, running_vm};
use sandbox::devices::{DeviceNode, PermitKind};
use serde_json::json;

const GPU: &str = "nvidia.com/CLI_GPU";

/// Whitespace-collapsed lines, to compare table rows without their padding.
fn rows(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[tokio::test]
async fn capacity_prints_the_table_and_pool_create_refuses_with_it() {
    permit_device(PermitKind::Pci, GPU, false).await;
    add_node(DeviceNode::new("cli-a").devices(GPU, 6, 4)).await;
    add_node(DeviceNode::new("cli-b").device(GPU, 0)).await;
    add_node(DeviceNode::new("cli-c").device(GPU, 2).cordoned()).await;
    let ns = namespace("clicap").await;
    let gpus = json!([{ "name": "gpu1", "deviceName": GPU }]);
    running_vm(&ns, "busy", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"] = gpus.clone();
    })
    .await;
    golden_vm(&ns, "gold", "Halted", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"] = gpus.clone();
    })
    .await;

    let out = corral(&["capacity", "--from", "gold", "--size", "4", "-n", &ns]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines = rows(&stdout);
    assert_eq!(
        lines[0],
        format!(
            "golden VM \"gold\" (ns/{ns}): each VM needs 1 nvidia.com/CLI_GPU (PCI passthrough: \
             gpus/gpu1), all on one node; a pool of 4 needs 4 nvidia.com/CLI_GPU"
        )
    );
    assert_eq!(
        lines[1],
        "NODE RESOURCE CLASS ALLOCATABLE HELD FREE NEEDED FITS"
    );
    assert!(
        lines.contains(&"cli-a nvidia.com/CLI_GPU PCI passthrough 4 1 3 4 3".to_owned()),
        "{stdout}"
    );
    assert!(
        lines.contains(&"cli-b nvidia.com/CLI_GPU PCI passthrough 0 0 0 4 0".to_owned()),
        "{stdout}"
    );
    assert!(
        lines.contains(&"cli-c nvidia.com/CLI_GPU PCI passthrough 2 0 2 4 -".to_owned()),
        "{stdout}"
    );
    assert!(
        lines.contains(
            &"cli-c: not schedulable for this VM: cordoned (spec.unschedulable)".to_owned()
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "does not fit: fits 3 of the 4 you ask for (room for 3 such VMs now: cli-a 3)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("admission is a check, not a reservation"),
        "{stdout}"
    );

    let out = corral(&["capacity", "--from", "gold", "--size", "3", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("fits: all 3 you ask for can be placed"),
        "{}",
        text(&out.stdout)
    );

    // Cluster-wide: every node's devices and who holds them.
    let out = corral(&["capacity"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines = rows(&stdout);
    assert_eq!(lines[0], "devices per node, and who holds them (VM, pool):");
    assert!(
        lines.contains(&format!(
            "cli-a nvidia.com/CLI_GPU PCI passthrough 4 1 3 {ns}/busy"
        )),
        "{stdout}"
    );
    assert!(
        lines.contains(&"cli-c (cordoned) nvidia.com/CLI_GPU PCI passthrough 2 0 2 -".to_owned()),
        "{stdout}"
    );

    // pool create refuses with the table, changes nothing, and says what would fit.
    let out = corral(&[
        "pool", "create", "gpupool", "--from", "gold", "--size", "4", "-n", &ns,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "error: pool \"gpupool\" cannot be placed: each of its 4 VMs needs 1 \
             nvidia.com/CLI_GPU"
        ),
        "{stderr}"
    );
    assert!(
        rows(&stderr).contains(&"cli-a nvidia.com/CLI_GPU PCI passthrough 4 1 3 4 3".to_owned()),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: make the pool smaller (3 fit now)")
            && stderr.contains("admission is a check, not a reservation"),
        "{stderr}"
    );
    let out = corral(&["pool", "list", "-n", &ns]);
    assert_eq!(text(&out.stdout), format!("no pools in namespace {ns}\n"));
}

#[tokio::test]
async fn a_golden_vm_without_devices_needs_no_check() {
    let ns = namespace("clicap-plain").await;
    golden_vm(&ns, "plain", "Halted", |_| {}).await;
    let out = corral(&["capacity", "--from", "plain", "--size", "500", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "golden VM \"plain\" (ns/{ns}) asks for no GPU or host device: a pool of any size \
             passes capacity admission without a check\n"
        )
    );
    let out = corral(&["capacity", "--from", "missing", "-n", &ns]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("golden VM \"missing\" not found"),
        "{}",
        text(&out.stderr)
    );
}
