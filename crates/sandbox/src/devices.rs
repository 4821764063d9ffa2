//! Devices on a sandbox, set per test or benchmark: nodes that report extended resources in
//! `status.capacity` / `status.allocatable` (as a device plugin's kubelet would), with labels,
//! taints and cordons, and the KubeVirt CR's `spec.configuration.permittedHostDevices`.
//!
//! There is no kubelet and no device behind any of it: a node is an object whose status this
//! module writes, and a device is a number. The emulator's scheduler
//! ([`crate::emulator::scheduler`]) places VMIs that ask for devices against these numbers.
//! Every write here is additive or touches one node, so tests running at once do not undo each
//! other's setup (give each test node and resource names of its own).

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::bootstrap::{KUBEVIRT_NAMESPACE, MANAGER, dynamic};

/// The label virt-handler sets on the nodes it runs on; KubeVirt schedules VMs only there.
pub const SCHEDULABLE_LABEL: &str = "kubevirt.io/schedulable";

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    /// `key`.
    pub key: String,
    /// `value` (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    /// `key=value:effect`.
    pub fn new(key: &str, value: &str, effect: &str) -> Self {
        Taint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect: effect.to_owned(),
        }
    }

    fn json(&self) -> Value {
        let mut taint = json!({ "key": self.key, "effect": self.effect });
        if !self.value.is_empty() {
            taint["value"] = json!(self.value);
        }
        taint
    }
}

/// A node to add: its devices, labels, taints and whether it is cordoned. Built with
/// [`DeviceNode::new`] and the methods that follow; applied with [`apply_node`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNode {
    /// Node name.
    pub name: String,
    /// Extended resource → devices present (`status.capacity`); a resource missing here has
    /// its allocatable count as capacity.
    pub capacity: BTreeMap<String, u32>,
    /// Extended resource → devices the scheduler may hand out (`status.allocatable`).
    pub allocatable: BTreeMap<String, u32>,
    /// Labels besides `kubernetes.io/hostname` (and [`SCHEDULABLE_LABEL`], unless
    /// [`DeviceNode::without_virt_handler`]).
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// Whether it carries `kubevirt.io/schedulable=true` (default yes).
    pub kubevirt_schedulable: bool,
}

impl DeviceNode {
    /// A Ready node `name` where virt-handler runs, with no device yet.
    pub fn new(name: &str) -> Self {
        DeviceNode {
            name: name.to_owned(),
            capacity: BTreeMap::new(),
            allocatable: BTreeMap::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            cordoned: false,
            kubevirt_schedulable: true,
        }
    }

    /// `allocatable` of `resource`, as many present.
    pub fn device(mut self, resource: &str, allocatable: u32) -> Self {
        self.allocatable.insert(resource.to_owned(), allocatable);
        self
    }

    /// `present` of `resource` in `status.capacity`, of which `allocatable` may be handed out
    /// (the others unhealthy or reserved).
    pub fn devices(mut self, resource: &str, present: u32, allocatable: u32) -> Self {
        self.capacity.insert(resource.to_owned(), present);
        self.allocatable.insert(resource.to_owned(), allocatable);
        self
    }

    /// A label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// A taint `key=value:effect`.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints.push(Taint::new(key, value, effect));
        self
    }

    /// Cordoned (`spec.unschedulable: true`).
    pub fn cordoned(mut self) -> Self {
        self.cordoned = true;
        self
    }

    /// Without `kubevirt.io/schedulable=true`: virt-handler does not run there.
    pub fn without_virt_handler(mut self) -> Self {
        self.kubevirt_schedulable = false;
        self
    }
}

fn counts(map: &BTreeMap<String, u32>) -> serde_json::Map<String, Value> {
    map.iter()
        .map(|(k, v)| (k.clone(), json!(v.to_string())))
        .collect()
}

/// Creates the node or makes it exactly `node` (server-side apply of its labels, taints,
/// cordon and status: capacity and allocatable with the devices, 16 CPUs, 64 GiB and 110 pods,
/// and a `Ready` condition).
pub async fn apply_node(admin: &Client, node: &DeviceNode) -> Result<()> {
    let nodes: Api<Node> = Api::all(admin.clone());
    let mut labels = node.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), node.name.clone());
    if node.kubevirt_schedulable {
        labels.insert(SCHEDULABLE_LABEL.into(), "true".into());
    }
    let taints: Vec<Value> = node.taints.iter().map(Taint::json).collect();
    let params = PatchParams::apply(MANAGER).force();
    nodes
        .patch(
            &node.name,
            &params,
            &Patch::Apply(json!({ "apiVersion": "v1", "kind": "Node",
                "metadata": { "name": node.name, "labels": labels },
                "spec": { "unschedulable": node.cordoned, "taints": taints } })),
        )
        .await
        .with_context(|| format!("apply node {}", node.name))?;
    // The API server's TaintNodesByCondition admission taints every new node
    // `node.kubernetes.io/not-ready:NoSchedule`; the node lifecycle controller, which does
    // not run here, lifts it once the node is Ready. Lift it (and any other stray taint).
    nodes
        .patch(
            &node.name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": taints } })),
        )
        .await
        .with_context(|| format!("set the taints of node {}", node.name))?;
    let mut capacity = counts(&node.allocatable);
    capacity.extend(counts(&node.capacity));
    let mut allocatable = counts(&node.allocatable);
    for (k, v) in [("cpu", "16"), ("memory", "64Gi"), ("pods", "110")] {
        capacity.insert(k.into(), json!(v));
        allocatable.insert(k.into(), json!(v));
    }
    nodes
        .patch_status(
            &node.name,
            &params,
            &Patch::Apply(json!({ "apiVersion": "v1", "kind": "Node", "status": {
                "capacity": capacity, "allocatable": allocatable,
                "conditions": [{ "type": "Ready", "status": "True", "reason": "SandboxNode",
                                 "message": "emulated node: no kubelet runs here" }] } })),
        )
        .await
        .with_context(|| format!("set the status of node {}", node.name))?;
    Ok(())
}

/// Sets `resource` on node `node` to `present` devices of which `allocatable` may be handed out
/// (`None`: the node no longer reports the resource), as a device plugin's kubelet updates
/// them.
pub async fn set_devices(
    admin: &Client,
    node: &str,
    resource: &str,
    counts: Option<(u32, u32)>,
) -> Result<()> {
    let (present, allocatable) = match counts {
        Some((p, a)) => (json!(p.to_string()), json!(a.to_string())),
        None => (Value::Null, Value::Null),
    };
    Api::<Node>::all(admin.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": {
                "capacity": { resource: present }, "allocatable": { resource: allocatable } } })),
        )
        .await
        .with_context(|| format!("set {resource} on node {node}"))?;
    Ok(())
}

/// Cordons (`true`) or uncordons node `node`, as `kubectl cordon` / `uncordon` do.
pub async fn cordon(admin: &Client, node: &str, cordoned: bool) -> Result<()> {
    Api::<Node>::all(admin.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "unschedulable": cordoned } })),
        )
        .await
        .with_context(|| format!("cordon node {node}"))?;
    Ok(())
}

/// Replaces the taints of node `node`.
pub async fn set_taints(admin: &Client, node: &str, taints: &[Taint]) -> Result<()> {
    let taints: Vec<Value> = taints.iter().map(Taint::json).collect();
    Api::<Node>::all(admin.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": taints } })),
        )
        .await
        .with_context(|| format!("taint node {node}"))?;
    Ok(())
}

/// Sets (or, with `None`, removes) label `key` of node `node`.
pub async fn label_node(admin: &Client, node: &str, key: &str, value: Option<&str>) -> Result<()> {
    Api::<Node>::all(admin.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { key: value } } })),
        )
        .await
        .with_context(|| format!("label node {node}"))?;
    Ok(())
}

/// Deletes node `node` (nothing on it is evicted: there is no controller for that).
pub async fn delete_node(admin: &Client, node: &str) -> Result<()> {
    match Api::<Node>::all(admin.clone())
        .delete(node, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("delete node {node}")),
    }
}

/// Which `permittedHostDevices` list a permit goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermitKind {
    /// `pciHostDevices` (with a `pciVendorSelector`).
    Pci,
    /// `mediatedDevices` (with an `mdevNameSelector`).
    Mediated,
    /// `usb` (with `selectors`).
    Usb,
}

/// Adds `resource` to the KubeVirt CR's `spec.configuration.permittedHostDevices` list of
/// `kind` (with `selector` as its `pciVendorSelector` / `mdevNameSelector` / USB vendor, and
/// `externalResourceProvider: external`), unless that list names it already. Additive: other
/// entries stay (a read-modify-write with the resourceVersion, retried on a conflict).
pub async fn permit(
    admin: &Client,
    kind: PermitKind,
    resource: &str,
    selector: &str,
    external: bool,
) -> Result<()> {
    let kubevirts = dynamic(
        admin,
        "kubevirt.io",
        "v1",
        "KubeVirt",
        "kubevirts",
        KUBEVIRT_NAMESPACE,
    );
    let (list, mut entry) = match kind {
        PermitKind::Pci => (
            "pciHostDevices",
            json!({ "pciVendorSelector": selector, "resourceName": resource }),
        ),
        PermitKind::Mediated => (
            "mediatedDevices",
            json!({ "mdevNameSelector": selector, "resourceName": resource }),
        ),
        PermitKind::Usb => (
            "usb",
            json!({ "resourceName": resource, "selectors": [{ "vendor": selector, "product": "0001" }] }),
        ),
    };
    if external {
        entry["externalResourceProvider"] = json!(true);
    }
    for _ in 0..20 {
        let mut kv = kubevirts
            .get("kubevirt")
            .await
            .context("read the KubeVirt CR")?;
        let permitted = kv
            .data
            .pointer_mut("/spec/configuration")
            .and_then(Value::as_object_mut)
            .context("the KubeVirt CR has no spec.configuration")?
            .entry("permittedHostDevices")
            .or_insert_with(|| json!({}));
        let Some(entries) = permitted
            .as_object_mut()
            .map(|p| p.entry(list).or_insert_with(|| json!([])))
            .and_then(Value::as_array_mut)
        else {
            bail!("permittedHostDevices.{list} is not a list");
        };
        if entries
            .iter()
            .any(|e| e.get("resourceName").and_then(Value::as_str) == Some(resource))
        {
            return Ok(());
        }
        entries.push(entry.clone());
        match kubevirts
            .replace("kubevirt", &PostParams::default(), &kv)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).context("update the KubeVirt CR"),
        }
    }
    bail!("the KubeVirt CR kept changing while {resource} was being permitted")
}
