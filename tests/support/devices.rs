//! Devices, for the capacity tests: nodes with extended resources (cordoned, tainted,
//! labelled), KubeVirt's permits, and virt-launcher pods holding devices.

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::Value;
use serde_json::json;

use crate::client_as;

/// Adds node `node` to the shared sandbox (or makes an existing one exactly so), as admin:
/// its devices in `status.capacity` / `status.allocatable`, labels, taints and cordon (see
/// [`sandbox::devices::DeviceNode`]). Nodes are cluster-wide: give each test names of its own.
pub async fn add_node(node: sandbox::devices::DeviceNode) {
    sandbox::devices::apply_node(&client_as("admin").await, &node)
        .await
        .unwrap_or_else(|e| panic!("add node {}: {e:#}", node.name));
}

/// Sets `resource` on `node` to `present` devices of which `allocatable` may be handed out;
/// `None` removes it from the node's status.
pub async fn set_node_devices(node: &str, resource: &str, counts: Option<(u32, u32)>) {
    sandbox::devices::set_devices(&client_as("admin").await, node, resource, counts)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Cordons (`true`) or uncordons `node`.
pub async fn cordon_node(node: &str, cordoned: bool) {
    sandbox::devices::cordon(&client_as("admin").await, node, cordoned)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Replaces the taints of `node`.
pub async fn taint_node(node: &str, taints: &[sandbox::devices::Taint]) {
    sandbox::devices::set_taints(&client_as("admin").await, node, taints)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Sets (or, with `None`, removes) label `key` of `node`.
pub async fn label_node(node: &str, key: &str, value: Option<&str>) {
    sandbox::devices::label_node(&client_as("admin").await, node, key, value)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Permits `resource` in the KubeVirt CR as `kind` (additive; `external` sets
/// `externalResourceProvider: true`).
pub async fn permit_device(kind: sandbox::devices::PermitKind, resource: &str, external: bool) {
    let selector = match kind {
        sandbox::devices::PermitKind::Pci => "10DE:1EB8",
        sandbox::devices::PermitKind::Mediated => "GRID T4-2Q",
        sandbox::devices::PermitKind::Usb => "46f4",
    };
    sandbox::devices::permit(
        &client_as("admin").await,
        kind,
        resource,
        selector,
        external,
    )
    .await
    .unwrap_or_else(|e| panic!("permit {resource}: {e:#}"));
}

/// Lets `user` read what capacity needs cluster-wide (ClusterRole
/// [`sandbox::bootstrap::CAPACITY_READER`]).
pub async fn grant_capacity_reader(user: &str) {
    sandbox::bootstrap::grant_capacity_reader(&client_as("admin").await, user)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Creates a virt-launcher pod `virt-launcher-<vm>-<suffix>` in `ns` bound to `node` in
/// `phase`, whose `compute` container holds `devices` (as KubeVirt's are labelled:
/// `kubevirt.io=virt-launcher`, `kubevirt.io/created-by=<uid>`, and with `migration_target`
/// `kubevirt.io/migrationJobUID`), as a test finds one on a cluster; the emulator never
/// deletes it. Returns its name.
pub async fn launcher_pod(
    ns: &str,
    vm: &str,
    suffix: &str,
    node: &str,
    phase: &str,
    devices: &[(&str, u32)],
    migration_target: bool,
) -> String {
    use k8s_openapi::api::core::v1::Pod;
    let admin = client_as("admin").await;
    let name = format!("virt-launcher-{vm}-{suffix}");
    let limits: serde_json::Map<String, Value> = devices
        .iter()
        .map(|(r, n)| ((*r).to_owned(), json!(n.to_string())))
        .collect();
    let mut labels = json!({
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": format!("uid-of-{vm}"),
        "vm.kubevirt.io/name": vm,
    });
    if migration_target {
        labels["kubevirt.io/migrationJobUID"] = json!(format!("migration-of-{vm}"));
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": { "nodeName": node, "restartPolicy": "Never", "containers": [{
            "name": "compute", "image": "sandbox.invalid/virt-launcher:test",
            "resources": { "limits": limits, "requests": limits } }] },
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin, ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create launcher pod {name}: {e}"));
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "phase": phase } })),
    )
    .await
    .unwrap_or_else(|e| panic!("set the phase of {name}: {e}"));
    name
}
