//! What a fresh instance gets: the KubeVirt CRDs, namespaces, RBAC for the users, a KubeVirt CR,
//! a node, the APIService for the emulated virt-api, and the demo data.
//!
//! RBAC (namespace `corral-vms`, and every namespace [`grant_users`] is called for) depends on
//! whether the instance runs the broker ([`UserRoles`]):
//! - with the broker: `alice`, `bob` and `carol` get the shipped claimant Role
//!   `corral-vdi:desktop-user`, written where they may claim as an administrator writes it
//!   (`vdi_core::broker::claimants::allow`): read pools, VMs and VMIs, manage claim Leases, and
//!   no VM write, stream or power right; the broker grants each claim holder those on their own
//!   member;
//! - without it (the client-side flow, the test binaries' default): `alice`, `bob` get the
//!   sandbox's Role [`SELF_SERVICE`] — read VMs, VMIs and clones, patch VMs,
//!   start/stop/restart/softreboot them through the subresources, open
//!   VNC/console/port-forward/usbredir, all namespace-wide, and manage Leases; `carol` gets [`LEASE_ONLY`] — read VMs and VMIs,
//!   manage Leases, but not change VMs (makes "label patch refused" testable);
//! - `admin`: `system:masters`.
//!
//! Every role with Lease writes is a Role of its namespace, never a ClusterRole (whose rights a
//! ClusterRoleBinding would spread to every Lease of the cluster). Nobody but `admin` may list
//! namespaces or read other namespaces. The ClusterRole
//! [`CAPACITY_READER`] (read nodes, launcher pods, VMIs, the KubeVirt CR and VMs cluster-wide:
//! what GPU and host-device capacity needs) exists but is bound to nobody; tests bind it
//! ([`grant_capacity_reader`]).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use data_encoding::BASE64;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::DEMO_NAMESPACE;
use crate::pki::Pki;

/// Field manager of everything the sandbox writes at start-up.
pub const MANAGER: &str = "corral-sandbox";
/// Namespace of the emulated KubeVirt install (KubeVirt CR, virt-api Service).
pub const KUBEVIRT_NAMESPACE: &str = "kubevirt";
/// Name of the node every emulated VMI runs on.
pub const NODE: &str = "sandbox-node-1";

async fn apply<K>(api: &Api<K>, name: &str, value: Value) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(value),
    )
    .await
    .with_context(|| format!("apply {name}"))
}

fn preserve() -> Value {
    json!({ "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } })
}

/// A structural CRD that keeps unknown fields, as KubeVirt's generated ones effectively do for
/// the fields we do not model.
fn crd(
    group: &str,
    kind: &str,
    plural: &str,
    short: &[&str],
    versions: &[(&str, bool)],
    status_subresource: bool,
    namespaced: bool,
) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|(name, storage)| {
            let mut v = json!({
                "name": name, "served": true, "storage": storage, "schema": preserve(),
                "additionalPrinterColumns": [
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                    { "name": "Status", "type": "string", "jsonPath": ".status.printableStatus" },
                    { "name": "Phase", "type": "string", "jsonPath": ".status.phase" },
                ],
            });
            if status_subresource {
                v["subresources"] = json!({ "status": {} });
            }
            v
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": {
            "group": group,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {
                "kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                "listKind": format!("{kind}List"), "shortNames": short,
                "categories": ["all"],
            },
            "versions": versions,
        }
    })
}

/// Installs the CRDs (waiting until they are Established), namespaces, RBAC (the users' roles in
/// `corral-vms` as `roles` says), the KubeVirt CR and the node.
pub async fn install(admin: &Client, roles: UserRoles) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let definitions = [
        crd(
            "kubevirt.io",
            "VirtualMachine",
            "virtualmachines",
            &["vm", "vms"],
            &[("v1", true)],
            true,
            true,
        ),
        crd(
            "kubevirt.io",
            "VirtualMachineInstance",
            "virtualmachineinstances",
            &["vmi", "vmis"],
            &[("v1", true)],
            false,
            true,
        ),
        crd(
            "kubevirt.io",
            "KubeVirt",
            "kubevirts",
            &["kv", "kvs"],
            &[("v1", true)],
            true,
            true,
        ),
        crd(
            "clone.kubevirt.io",
            "VirtualMachineClone",
            "virtualmachineclones",
            &["vmclone", "vmclones"],
            &[("v1beta1", true), ("v1alpha1", false)],
            true,
            true,
        ),
    ];
    for def in definitions {
        let name = def["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        apply(&crds, &name, def).await?;
        wait_established(&crds, &name).await?;
    }

    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for ns in [DEMO_NAMESPACE, KUBEVIRT_NAMESPACE] {
        apply(
            &namespaces,
            ns,
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } }),
        )
        .await?;
    }
    install_rbac(admin, roles).await?;

    let kubevirt = dynamic(
        admin,
        "kubevirt.io",
        "v1",
        "KubeVirt",
        "kubevirts",
        KUBEVIRT_NAMESPACE,
    );
    apply(
        &kubevirt,
        "kubevirt",
        json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": { "name": "kubevirt", "namespace": KUBEVIRT_NAMESPACE },
            "spec": { "configuration": {
                "developerConfiguration": { "featureGates": ["Snapshot"] },
                "permittedHostDevices": { "pciHostDevices": [], "mediatedDevices": [] }
            } }
        }),
    )
    .await?;

    let nodes: Api<Node> = Api::all(admin.clone());
    apply(
        &nodes,
        NODE,
        json!({ "apiVersion": "v1", "kind": "Node",
                "metadata": { "name": NODE, "labels": { "kubernetes.io/hostname": NODE, "kubevirt.io/schedulable": "true" } } }),
    )
    .await?;
    // Ready, so without the not-ready taint the API server's TaintNodesByCondition admission
    // put on it (the node lifecycle controller that lifts it does not run here).
    nodes
        .patch(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": null } })),
        )
        .await
        .context("lift the node's not-ready taint")?;
    let capacity = json!({ "cpu": "16", "memory": "64Gi", "pods": "110" });
    nodes
        .patch_status(
            NODE,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({ "apiVersion": "v1", "kind": "Node", "status": {
                "capacity": capacity, "allocatable": capacity,
                "conditions": [{ "type": "Ready", "status": "True", "reason": "SandboxNode",
                                 "message": "emulated node: no kubelet runs here" }]
            } })),
        )
        .await
        .context("set the node's status")?;
    Ok(())
}

async fn wait_established(crds: &Api<CustomResourceDefinition>, name: &str) -> Result<()> {
    for _ in 0..200 {
        let crd = crds.get(name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("CRD {name} was not Established within 10 s")
}

/// A dynamic API for a namespaced kind.
pub fn dynamic(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespace: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// The sandbox's own Role for desktop users of the client-side flow (no broker), in each
/// namespace: what that flow needs namespace-wide (VM patch for the claim label, the power
/// subresources, every stream). Named apart from the shipped `corral-vdi:desktop-user`.
pub const SELF_SERVICE: &str = "corral-vdi:self-service";
/// The sandbox's Role of `carol` without a broker, in each namespace: read VMs and VMIs,
/// manage Leases.
pub const LEASE_ONLY: &str = "corral-vdi:lease-only";
/// The claimant Role shipped with the broker (`broker/claimant-role.yaml`), which the users
/// get in a sandbox with a broker (`vdi_core::broker::claimants`).
pub const DESKTOP_USER: &str = "corral-vdi:desktop-user";
/// The Role and RoleBinding of [`entitle_every_pool`] in a test's namespace.
pub const EVERY_POOL: &str = "corral-vdi:every-pool";

/// Which roles `alice`, `bob` and `carol` get in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserRoles {
    /// A sandbox with the broker: all three get [`DESKTOP_USER`] only.
    Broker,
    /// The client-side flow: `alice` and `bob` get [`SELF_SERVICE`], `carol` [`LEASE_ONLY`].
    ClientSide,
}

async fn install_rbac(admin: &Client, roles: UserRoles) -> Result<()> {
    let cluster_roles: Api<ClusterRole> = Api::all(admin.clone());
    apply(
        &cluster_roles,
        CAPACITY_READER,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": CAPACITY_READER },
            "rules": [
                { "apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"] },
                { "apiGroups": ["kubevirt.io"],
                  "resources": ["virtualmachineinstances", "virtualmachines", "kubevirts"],
                  "verbs": ["list", "watch"] },
            ] }),
    )
    .await?;
    grant_roles(admin, DEMO_NAMESPACE, roles).await
}

/// The ClusterRole that lets a user read what GPU and host-device capacity needs, cluster-wide:
/// nodes, pods (for the virt-launcher pods), VMIs, VMs and the KubeVirt CR.
pub const CAPACITY_READER: &str = "corral-vdi:capacity-reader";

/// Binds [`CAPACITY_READER`] to `user` cluster-wide (ClusterRoleBinding
/// `corral-vdi:capacity-reader:<user>`).
pub async fn grant_capacity_reader(admin: &Client, user: &str) -> Result<()> {
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let name = format!("{CAPACITY_READER}:{user}");
    apply(
        &bindings,
        &name,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CAPACITY_READER },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }] }),
    )
    .await?;
    Ok(())
}

/// The sandbox's own Roles for the client-side flow in `namespace` ([`SELF_SERVICE`] and
/// [`LEASE_ONLY`]): Roles, not ClusterRoles, since their Lease rights reach every Lease of
/// where they hold (as the shipped claimant role, `vdi_core::broker::claimants`).
async fn client_side_roles(admin: &Client, namespace: &str) -> Result<()> {
    let roles: Api<Role> = Api::namespaced(admin.clone(), namespace);
    let read = json!(["get", "list", "watch"]);
    // What self-service needs: create a claim Lease, take over (update) or release (delete)
    // one. The guard, not RBAC, keeps users to their own claims.
    let lease_rule = json!({ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update", "delete"] });
    let read_vms = json!({ "apiGroups": ["kubevirt.io"],
        "resources": ["virtualmachines", "virtualmachineinstances"], "verbs": read });
    apply(
        &roles,
        SELF_SERVICE,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": SELF_SERVICE, "namespace": namespace },
            "rules": [
                read_vms,
                { "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"], "verbs": ["patch"] },
                { "apiGroups": ["clone.kubevirt.io"], "resources": ["virtualmachineclones"], "verbs": read },
                { "apiGroups": ["subresources.kubevirt.io"],
                  "resources": ["virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart",
                                "virtualmachineinstances/softreboot"],
                  "verbs": ["update"] },
                { "apiGroups": ["subresources.kubevirt.io"],
                  "resources": ["virtualmachineinstances/vnc", "virtualmachineinstances/console",
                                "virtualmachineinstances/portforward", "virtualmachineinstances/usbredir"],
                  "verbs": ["get"] },
                lease_rule,
            ] }),
    )
    .await?;
    apply(
        &roles,
        LEASE_ONLY,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": LEASE_ONLY, "namespace": namespace },
            "rules": [read_vms, lease_rule] }),
    )
    .await?;
    Ok(())
}

/// Gives `alice`, `bob` and `carol` in `namespace` the roles `roles` says (those they have in
/// `corral-vms`), so that a test can work in a namespace of its own. With a broker, the product's
/// own way: `vdi_core::broker::claimants::allow` (the claimant Role and its RoleBinding
/// [`DESKTOP_USER`]); for the client-side flow the sandbox's Roles, bound by RoleBindings
/// `corral-vdi-<user>`. The client-side Roles are written in either case (tests bind other
/// users to them).
pub async fn grant_users(admin: &Client, namespace: &str, roles: UserRoles) -> Result<()> {
    grant_roles(admin, namespace, roles).await?;
    entitle_every_pool(admin, namespace).await
}

/// The Role and RoleBinding [`EVERY_POOL`]: everyone who may claim in `namespace` (the group
/// `system:authenticated`) may claim from every pool there (the verb `claim` on `desktoppools`
/// without names: SPEC "Entitlements"), as a cluster that keeps the behaviour from before
/// entitlements binds it once. A test of entitlements deletes the RoleBinding.
pub async fn entitle_every_pool(admin: &Client, namespace: &str) -> Result<()> {
    let roles: Api<Role> = Api::namespaced(admin.clone(), namespace);
    apply(
        &roles,
        EVERY_POOL,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": EVERY_POOL, "namespace": namespace },
            "rules": [{ "apiGroups": [vdi_core::entitlement::GROUP],
                        "resources": [vdi_core::entitlement::RESOURCE],
                        "verbs": [vdi_core::entitlement::VERB] }] }),
    )
    .await?;
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), namespace);
    let subjects = [
        json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                            "name": vdi_core::entitlement::EVERYONE_GROUP }),
    ];
    apply(
        &bindings,
        EVERY_POOL,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": EVERY_POOL, "namespace": namespace },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": EVERY_POOL },
            "subjects": subjects }),
    )
    .await?;
    Ok(())
}

/// The users' roles in `namespace` as `roles` says, without entitlements: [`grant_users`]'
/// first half, and all of `corral-vms`', whose pools are entitled one by one.
async fn grant_roles(admin: &Client, namespace: &str, roles: UserRoles) -> Result<()> {
    client_side_roles(admin, namespace).await?;
    if roles == UserRoles::Broker {
        let claimants: Vec<_> = ["alice", "bob", "carol"]
            .into_iter()
            .map(|u| vdi_core::broker::claimants::Claimant::User(u.to_owned()))
            .collect();
        vdi_core::broker::claimants::allow(admin, namespace, &claimants).await?;
        return Ok(());
    }
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), namespace);
    let grants = [
        ("alice", SELF_SERVICE),
        ("bob", SELF_SERVICE),
        ("carol", LEASE_ONLY),
    ];
    for (user, role) in grants {
        let name = format!("corral-vdi-{user}");
        apply(
            &bindings,
            &name,
            json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": { "name": name, "namespace": namespace },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role },
                "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }] }),
        )
        .await?;
    }
    Ok(())
}

/// Registers the emulated virt-api with the aggregator: an ExternalName Service pointing at
/// `localhost:<port>` (Endpoints may not name loopback addresses) and the APIService
/// `v1.subresources.kubevirt.io`, as virt-operator registers the real one. Returns once the
/// aggregator reports it Available.
pub async fn register_virt_api(admin: &Client, pki: &Pki, port: u16) -> Result<()> {
    let services: Api<Service> = Api::namespaced(admin.clone(), KUBEVIRT_NAMESPACE);
    apply(
        &services,
        "virt-api",
        json!({ "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "virt-api", "namespace": KUBEVIRT_NAMESPACE },
            "spec": { "type": "ExternalName", "externalName": "localhost",
                      "ports": [{ "name": "https", "port": port, "protocol": "TCP" }] } }),
    )
    .await?;
    let apiservices: Api<APIService> = Api::all(admin.clone());
    apply(
        &apiservices,
        "v1.subresources.kubevirt.io",
        json!({ "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": { "name": "v1.subresources.kubevirt.io" },
            "spec": { "group": "subresources.kubevirt.io", "version": "v1",
                      "groupPriorityMinimum": 1000, "versionPriority": 15,
                      "caBundle": BASE64.encode(pki.ca_pem.as_bytes()),
                      "service": { "namespace": KUBEVIRT_NAMESPACE, "name": "virt-api", "port": port } } }),
    )
    .await?;
    for _ in 0..300 {
        let svc = apiservices.get("v1.subresources.kubevirt.io").await?;
        let conditions = svc.status.and_then(|s| s.conditions).unwrap_or_default();
        if conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the emulated virt-api APIService did not become Available within 30 s")
}

/// The golden VM's spec: a desktop with a DataVolume root disk and USB client passthrough.
pub fn golden_spec(run_strategy: &str, domain_label: &str) -> Value {
    json!({
        "runStrategy": run_strategy,
        "template": {
            "metadata": { "labels": { "kubevirt.io/domain": domain_label } },
            "spec": {
                "domain": {
                    "cpu": { "cores": 2 },
                    "memory": { "guest": "4Gi" },
                    "devices": {
                        "disks": [{ "name": "rootdisk", "disk": { "bus": "virtio" } }],
                        "interfaces": [{ "name": "default", "masquerade": {} }],
                        "clientPassthrough": {}
                    }
                },
                "networks": [{ "name": "default", "pod": {} }],
                "volumes": [{ "name": "rootdisk", "dataVolume": { "name": format!("{domain_label}-root") } }]
            }
        }
    })
}

/// Waits (up to 60 s) until the emulator has reconciled the seed: `golden-desktop` Stopped
/// with its volume snapshot support reported, `legacy-2` Running, `legacy-1` and `legacy-3`
/// Stopped.
pub async fn wait_for_seed(admin: &Client) -> Result<()> {
    let vms = dynamic(
        admin,
        "kubevirt.io",
        "v1",
        "VirtualMachine",
        "virtualmachines",
        DEMO_NAMESPACE,
    );
    let want = [
        ("golden-desktop", "Stopped"),
        ("legacy-1", "Stopped"),
        ("legacy-2", "Running"),
        ("legacy-3", "Stopped"),
    ];
    let mut last = String::new();
    for _ in 0..600 {
        let mut pending = Vec::new();
        for (name, power) in want {
            let vm = vms.get(name).await?;
            let status = vm.data.get("status").cloned().unwrap_or(Value::Null);
            let printable = status
                .get("printableStatus")
                .and_then(Value::as_str)
                .unwrap_or("Unknown");
            let snapshots = status.get("volumeSnapshotStatuses").is_some();
            if printable != power || !snapshots {
                pending.push(format!("{name} is {printable}, want {power}"));
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        last = pending.join("; ");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the emulator did not reconcile the seed within 60 s: {last}")
}

/// Demo data in `corral-vms`: a stopped golden VM `golden-desktop`, and a Phase 1 pool `legacy`
/// of three members made the old way (labels only, no Leases), `legacy-2` assigned to `alice`,
/// open to everyone who may claim there (an entitlement by the pool's name: a pool made later
/// for one group only stays closed to the others).
pub async fn seed(admin: &Client) -> Result<()> {
    vdi_core::entitlement::entitle(
        admin,
        DEMO_NAMESPACE,
        "legacy",
        &[vdi_core::entitlement::Who::Everyone],
        "admin",
    )
    .await?;
    let vms = dynamic(
        admin,
        "kubevirt.io",
        "v1",
        "VirtualMachine",
        "virtualmachines",
        DEMO_NAMESPACE,
    );
    apply(
        &vms,
        "golden-desktop",
        json!({ "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": { "name": "golden-desktop", "namespace": DEMO_NAMESPACE, "labels": { "app": "desktop" } },
            "spec": golden_spec("Halted", "golden-desktop") }),
    )
    .await?;
    for i in 1..=3 {
        let name = format!("legacy-{i}");
        let mut labels = json!({ "app": "desktop", "corral.dev/vdi-pool": "legacy" });
        let mut annotations = json!({});
        let mut strategy = "Halted";
        if i == 2 {
            labels["corral.dev/vdi-assigned-to"] = json!("alice");
            annotations["corral.dev/vdi-claimed-at"] = json!("2026-01-15T09:30:00Z");
            strategy = "Always";
        }
        apply(
            &vms,
            &name,
            json!({ "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": { "name": name, "namespace": DEMO_NAMESPACE, "labels": labels, "annotations": annotations },
                "spec": golden_spec(strategy, &name) }),
        )
        .await?;
    }
    Ok(())
}

/// The name of the sandbox's probe policy, of its binding, and of the ConfigMap it refuses
/// ([`wait_policies_enforced`]).
const ENFORCEMENT_PROBE: &str = "sandbox-enforcement-probe";

/// Returns (within 30 s) once the API server enforces every admission policy and binding
/// written before the call, and removes what it wrote to see that.
///
/// The API server loads admission policies from its informers and compiles them at a refresh
/// every second (k8s.io/apiserver `pkg/admission/plugin/policy/generic/policy_source.go`,
/// `policyRefreshIntervalDefault`): a policy is enforced a moment after it is written, and no
/// status says when. So a probe policy and its binding are written after all others, refusing
/// the creation of a ConfigMap named [`ENFORCEMENT_PROBE`], and a dry run of that creation is
/// tried until it is refused. An informer delivers one resource's events in order: a refresh
/// that has the probe's policy and binding has every policy and binding written before them.
///
/// Errors: the probe's objects cannot be written or removed; an error other than the probe's
/// refusal; no refusal within 30 s.
pub async fn wait_policies_enforced(admin: &Client) -> Result<()> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(admin.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
    let message = "the sandbox's enforcement probe";
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": { "name": ENFORCEMENT_PROBE },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["configmaps"],
            }]},
            "validations": [{
                "expression": format!("object.metadata.name != '{ENFORCEMENT_PROBE}'"),
                "message": message,
            }],
        },
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": { "name": ENFORCEMENT_PROBE },
        "spec": { "policyName": ENFORCEMENT_PROBE, "validationActions": ["Deny"] },
    }))?;
    let create = PostParams::default();
    policies.create(&create, &policy).await?;
    bindings.create(&create, &binding).await?;

    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), DEMO_NAMESPACE);
    let probe: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": ENFORCEMENT_PROBE },
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut enforced = false;
    for _ in 0..300 {
        match config_maps.create(&dry_run, &probe).await {
            Err(kube::Error::Api(status)) if status.message.contains(message) => {
                enforced = true;
                break;
            }
            Err(e) => return Err(e).context("the dry run of the enforcement probe"),
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let delete = DeleteParams::default();
    bindings.delete(ENFORCEMENT_PROBE, &delete).await?;
    policies.delete(ENFORCEMENT_PROBE, &delete).await?;
    if !enforced {
        bail!("the API server did not enforce a new admission policy within 30 s");
    }
    Ok(())
}
