//! Where a VMI that asks for devices runs: an emulation of what virt-controller and the
//! Kubernetes scheduler do together for a VMI with `gpus[]` or `hostDevices[]`.
//!
//! - The device names must be permitted by the KubeVirt CR (`spec.configuration.
//!   permittedHostDevices`, when set), else virt-controller does not render the launcher pod:
//!   the VMI stays `Pending` with the condition `Synchronized=False`, reason `FailedCreate`,
//!   "failed to render launch manifest: GPU <name> is not permitted in permittedHostDevices
//!   configuration" (the VM shows `Starting`).
//! - A node is feasible when it is not cordoned, carries `kubevirt.io/schedulable=true` and the
//!   VMI's `nodeSelector` labels, matches one term of its required node affinity (`In`,
//!   `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`; `matchFields` on `metadata.name`), has no
//!   `NoSchedule`/`NoExecute` taint the VMI does not tolerate, and has, for every device, its
//!   `status.allocatable` minus the requests of the pods bound to it that are not `Succeeded`
//!   or `Failed` (any pod, as the scheduler counts; tests may add their own) at least what the
//!   VMI asks for. Of the feasible nodes, the one with the most of the asked-for devices left
//!   wins, ties by name.
//! - The winner gets a virt-launcher pod, named `virt-launcher-<vmi>-<5 characters of the
//!   VMI's UID hash>`, labelled `kubevirt.io=virt-launcher`, `kubevirt.io/created-by=<VMI
//!   UID>`, `vm.kubevirt.io/name=<vmi>` and [`EMULATED_LABEL`], bound to the node, with a
//!   `compute` container whose limits (and requests) hold one device per entry; the emulator
//!   sets its `status.phase` to `Running`. Nothing runs in it.
//! - No feasible node: no pod; the VMI reports `Scheduling` with the condition
//!   `PodScheduled=False`, reason `Unschedulable`, and a message shaped like the scheduler's
//!   ("0/4 nodes are available: 1 Insufficient nvidia.com/X, 1 node(s) were unschedulable."),
//!   the VM `ErrorUnschedulable`; placement is tried again every second, so the VM starts once
//!   a device frees, as a pending launcher pod would on KubeVirt.
//! - The pod is deleted (grace period 0: there is no kubelet to confirm) when the VMI stops or
//!   goes, which frees its devices.
//!
//! Placements are made one at a time (a lock around read-decide-create), so VMIs started at
//! once never share a device. VMIs without devices never come here: they run on the sandbox's
//! one node, [`crate::bootstrap::NODE`], without a pod, as before.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use sha2::Digest;
use tokio::sync::Mutex;

use super::types::VirtualMachineInstance;
use crate::bootstrap::{KUBEVIRT_NAMESPACE, MANAGER, dynamic};

/// Label on the launcher pods the emulator makes (`"true"`); only those are ever deleted by
/// it, so tests may add launcher pods of their own (finished ones, migration targets).
pub const EMULATED_LABEL: &str = "sandbox.corral.dev/emulated-launcher";
/// The node label KubeVirt puts in every launcher pod's nodeSelector.
pub const SCHEDULABLE_LABEL: &str = "kubevirt.io/schedulable";

/// The device resources a VMI spec asks for: `deviceName` → entries naming it, over
/// `domain.devices.gpus[]` and `.hostDevices[]`.
pub fn device_requests(spec: &Map<String, Value>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let devices = spec.get("domain").and_then(|d| d.get("devices"));
    for list in ["gpus", "hostDevices"] {
        let entries = devices
            .and_then(|d| d.get(list))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for entry in entries {
            if let Some(name) = entry
                .get("deviceName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                *out.entry(name.to_owned()).or_insert(0) += 1;
            }
        }
    }
    out
}

/// The launcher pod name of a VMI: `virt-launcher-<vmi>-<5 characters from its UID>`.
pub fn pod_name(vmi: &str, uid: &str) -> String {
    let digest = sha2::Sha256::digest(uid.as_bytes());
    let suffix: String = digest
        .iter()
        .take(5)
        .map(|b| char::from(b"bcdfghjklmnpqrstvwxz2456789"[usize::from(*b) % 27]))
        .collect();
    format!("virt-launcher-{vmi}-{suffix}")
}

/// How placing a VMI ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Bound to `node` through the launcher pod `pod`.
    Placed {
        /// The node.
        node: String,
        /// The launcher pod's name.
        pod: String,
    },
    /// No node fits; the scheduler's message.
    Unschedulable(String),
    /// A device is not permitted; virt-controller's message.
    NotPermitted(String),
}

/// The emulated scheduler: one placement at a time.
pub struct Scheduler {
    client: Client,
    lock: Mutex<()>,
}

/// A whole-number quantity (extended resources are whole numbers).
fn quantity(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Whether a node label set passes one `matchExpressions` entry.
fn requirement(labels: &BTreeMap<String, String>, req: &Value) -> bool {
    let key = req.get("key").and_then(Value::as_str).unwrap_or_default();
    let values: Vec<&str> = req
        .get("values")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let have = labels.get(key).map(String::as_str);
    let number = |s: &str| s.parse::<i64>().ok();
    match req.get("operator").and_then(Value::as_str).unwrap_or("") {
        "In" => have.is_some_and(|h| values.contains(&h)),
        "NotIn" => have.is_none_or(|h| !values.contains(&h)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        "Gt" => {
            matches!((have.and_then(number), values.first().and_then(|v| number(v))), (Some(h), Some(v)) if h > v)
        }
        "Lt" => {
            matches!((have.and_then(number), values.first().and_then(|v| number(v))), (Some(h), Some(v)) if h < v)
        }
        _ => false,
    }
}

/// Whether the node passes the VMI's required node affinity (any term; a term needs all of
/// its expressions and fields).
fn affinity(node: &Node, spec: &Map<String, Value>) -> bool {
    let Some(terms) = spec
        .get("affinity")
        .and_then(|a| {
            a.pointer(
                "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
            )
        })
        .and_then(Value::as_array)
    else {
        return true;
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.name_any();
    let fields = BTreeMap::from([("metadata.name".to_owned(), name)]);
    terms.iter().any(|term| {
        let exprs = term
            .get("matchExpressions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let field_exprs = term
            .get("matchFields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        (!exprs.is_empty() || !field_exprs.is_empty())
            && exprs.iter().all(|e| requirement(&labels, e))
            && field_exprs.iter().all(|e| requirement(&fields, e))
    })
}

/// Whether a toleration (JSON) tolerates a taint.
fn tolerates(toleration: &Value, key: &str, value: &str, effect: &str) -> bool {
    let field = |f: &str| toleration.get(f).and_then(Value::as_str).unwrap_or("");
    if !field("effect").is_empty() && field("effect") != effect {
        return false;
    }
    if !field("key").is_empty() && field("key") != key {
        return false;
    }
    match field("operator") {
        "Exists" => true,
        "" | "Equal" => field("value") == value,
        _ => false,
    }
}

impl Scheduler {
    /// A scheduler acting with the admin client.
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Scheduler {
            client,
            lock: Mutex::new(()),
        })
    }

    /// Deletes the emulated launcher pods of VM `vm` in `namespace` except the one of the VMI
    /// with UID `keep` (all of them without one): their devices are free again.
    pub async fn release(
        &self,
        namespace: &str,
        vm: &str,
        keep: Option<&str>,
    ) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let selector = format!("{EMULATED_LABEL}=true,vm.kubevirt.io/name={vm}");
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        for pod in list.items {
            if keep.is_some()
                && pod
                    .labels()
                    .get("kubevirt.io/created-by")
                    .map(String::as_str)
                    == keep
            {
                continue;
            }
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            match pods.delete(&pod.name_any(), &params).await {
                Ok(_) => tracing::debug!(pod = %pod.name_any(), "launcher pod released"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The permit problem of `requests`, if the KubeVirt CR sets permitted host devices and
    /// does not list one of them.
    async fn not_permitted(
        &self,
        requests: &BTreeMap<String, u64>,
        spec: &Map<String, Value>,
    ) -> Result<Option<String>, kube::Error> {
        let kubevirts = dynamic(
            &self.client,
            "kubevirt.io",
            "v1",
            "KubeVirt",
            "kubevirts",
            KUBEVIRT_NAMESPACE,
        );
        let list = kubevirts.list(&ListParams::default()).await?;
        let Some(permitted) = list
            .items
            .first()
            .and_then(|kv| kv.data.pointer("/spec/configuration/permittedHostDevices"))
            .filter(|p| !p.is_null())
        else {
            return Ok(None);
        };
        let mut names = HashSet::new();
        for list in ["pciHostDevices", "mediatedDevices", "usb"] {
            for entry in permitted
                .get(list)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = entry.get("resourceName").and_then(Value::as_str) {
                    names.insert(name.to_owned());
                }
            }
        }
        let devices = spec.get("domain").and_then(|d| d.get("devices"));
        for (list, kind) in [("gpus", "GPU"), ("hostDevices", "HostDevice")] {
            for entry in devices
                .and_then(|d| d.get(list))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = entry
                    .get("deviceName")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if requests.contains_key(name) && !names.contains(name) {
                    return Ok(Some(format!(
                        "failed to render launch manifest: {kind} {name} is not permitted in \
                         permittedHostDevices configuration"
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Places `vmi`, which asks for `requests`: finds a node (or says why none), creates its
    /// launcher pod there and reports it `Running`. Idempotent: a VMI that has its pod keeps
    /// it; pods of the same VM's earlier VMIs are released first.
    pub async fn place(
        &self,
        vmi: &VirtualMachineInstance,
        requests: &BTreeMap<String, u64>,
    ) -> Result<Placement, kube::Error> {
        let ns = vmi.namespace().unwrap_or_default();
        let name = vmi.name_any();
        let uid = vmi.uid().unwrap_or_default();
        let spec = &vmi.spec.fields;
        let one_at_a_time = self.lock.lock().await;
        self.release(&ns, &name, Some(&uid)).await?;
        if let Some(message) = self.not_permitted(requests, spec).await? {
            return Ok(Placement::NotPermitted(message));
        }
        let all_pods: Api<Pod> = Api::all(self.client.clone());
        let pods = all_pods.list(&ListParams::default()).await?.items;
        let pod = pod_name(&name, &uid);
        if let Some(existing) = pods
            .iter()
            .find(|p| p.namespace().as_deref() == Some(ns.as_str()) && p.name_any() == pod)
        {
            let node = existing
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            return Ok(Placement::Placed { node, pod });
        }
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await?
            .items;

        // What the pods bound to each node ask for, of the resources this VMI wants.
        let mut used: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for p in &pods {
            let Some(spec) = &p.spec else { continue };
            let Some(node) = spec.node_name.clone().filter(|n| !n.is_empty()) else {
                continue;
            };
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            for container in &spec.containers {
                let resources = container.resources.clone().unwrap_or_default();
                let (asked, limits) = (
                    resources.requests.unwrap_or_default(),
                    resources.limits.unwrap_or_default(),
                );
                for resource in requests.keys() {
                    if let Some(q) = asked.get(resource).or_else(|| limits.get(resource)) {
                        let n = quantity(&q.0).unwrap_or(0);
                        *used
                            .entry(node.clone())
                            .or_default()
                            .entry(resource.clone())
                            .or_insert(0) += n;
                    }
                }
            }
        }

        let mut selector: BTreeMap<String, String> = spec
            .get("nodeSelector")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default();
        selector.insert(SCHEDULABLE_LABEL.to_owned(), "true".to_owned());
        let tolerations = spec
            .get("tolerations")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<(u64, String)> = None;
        for node in &nodes {
            let node_name = node.name_any();
            let node_spec = node.spec.clone().unwrap_or_default();
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let reason = if node_spec.unschedulable == Some(true) {
                Some("node(s) were unschedulable".to_owned())
            } else if selector.iter().any(|(k, v)| labels.get(k) != Some(v))
                || !affinity(node, spec)
            {
                Some("node(s) didn't match Pod's node affinity/selector".to_owned())
            } else if let Some(taint) = node_spec.taints.unwrap_or_default().into_iter().find(|t| {
                matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                    && !tolerations.iter().any(|tol| {
                        tolerates(tol, &t.key, t.value.as_deref().unwrap_or(""), &t.effect)
                    })
            }) {
                Some(format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    taint.key,
                    taint.value.unwrap_or_default()
                ))
            } else {
                let allocatable = node
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.clone())
                    .unwrap_or_default();
                let mut left = 0u64;
                let mut short = None;
                for (resource, want) in requests {
                    let have = allocatable
                        .get(resource)
                        .and_then(|q| quantity(&q.0))
                        .unwrap_or(0);
                    let taken = used
                        .get(&node_name)
                        .and_then(|u| u.get(resource))
                        .copied()
                        .unwrap_or(0);
                    match have.checked_sub(taken + want) {
                        Some(rest) => left += rest,
                        None => {
                            short = Some(format!("Insufficient {resource}"));
                            break;
                        }
                    }
                }
                if short.is_none()
                    && best
                        .as_ref()
                        .is_none_or(|(l, n)| left > *l || (left == *l && node_name < *n))
                {
                    best = Some((left, node_name.clone()));
                }
                short
            };
            if let Some(reason) = reason {
                *reasons.entry(reason).or_insert(0) += 1;
            }
        }

        let Some((_, node)) = best else {
            let parts: Vec<String> = reasons
                .iter()
                .map(|(reason, n)| format!("{n} {reason}"))
                .collect();
            return Ok(Placement::Unschedulable(format!(
                "0/{} nodes are available: {}.",
                nodes.len(),
                parts.join(", ")
            )));
        };
        let limits: Map<String, Value> = requests
            .iter()
            .map(|(r, n)| (r.clone(), json!(n.to_string())))
            .collect();
        let owner = vmi.controller_owner_ref(&()).map(|o| vec![o]);
        let mut object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": pod, "namespace": ns,
                "labels": {
                    "kubevirt.io": "virt-launcher",
                    "kubevirt.io/created-by": uid,
                    "vm.kubevirt.io/name": name,
                    EMULATED_LABEL: "true",
                },
                "annotations": { "kubevirt.io/domain": name },
            },
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "tolerations": tolerations,
                "containers": [{
                    "name": "compute",
                    "image": "sandbox.invalid/virt-launcher:emulated",
                    "resources": { "limits": limits, "requests": limits },
                }],
            },
        });
        if let Some(owner) = owner {
            object["metadata"]["ownerReferences"] = json!(owner);
        }
        let launcher: Pod = serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
        let pods_here: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match pods_here.create(&params, &launcher).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
        drop(one_at_a_time);
        pods_here
            .patch_status(
                &pod,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": { "phase": "Running" } })),
            )
            .await?;
        tracing::debug!(%ns, vmi = %name, %node, %pod, "VMI with devices placed");
        Ok(Placement::Placed { node, pod })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_counted_by_name() {
        let spec: Map<String, Value> = serde_json::from_value(json!({ "domain": { "devices": {
            "gpus": [{ "name": "a", "deviceName": "x.com/g" }, { "name": "b", "deviceName": "x.com/g" }],
            "hostDevices": [{ "name": "c", "deviceName": "y.com/n" }, { "name": "d" }],
        } } }))
        .unwrap();
        assert_eq!(
            device_requests(&spec),
            BTreeMap::from([("x.com/g".to_owned(), 2), ("y.com/n".to_owned(), 1)])
        );
        assert!(device_requests(&Map::new()).is_empty());
    }

    #[test]
    fn launcher_pods_are_named_after_the_vmi_and_its_uid() {
        let name = pod_name("gpu-1", "0d5e-uid");
        assert!(name.starts_with("virt-launcher-gpu-1-"), "{name}");
        assert_eq!(name.len(), "virt-launcher-gpu-1-".len() + 5);
        assert_eq!(name, pod_name("gpu-1", "0d5e-uid"));
        assert_ne!(name, pod_name("gpu-1", "other"));
    }

    #[test]
    fn tolerations_match_like_kubernetes() {
        let t = |v: Value| tolerates(&v, "gpu", "yes", "NoSchedule");
        assert!(t(json!({ "key": "gpu", "value": "yes" })));
        assert!(t(json!({ "operator": "Exists" })));
        assert!(!t(json!({ "key": "gpu", "value": "no" })));
        assert!(!t(
            json!({ "key": "gpu", "operator": "Exists", "effect": "NoExecute" })
        ));
    }
}
