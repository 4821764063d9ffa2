//! The only part of capacity admission that talks to the cluster: four lists, read at once
//! (`tokio::join!`), each with only the fields admission uses parsed:
//!
//! | what | request | without RBAC for it |
//! |---|---|---|
//! | the KubeVirt CR | `GET /apis/kubevirt.io/v1/kubevirts` (all namespaces) | classes unknown, a note |
//! | nodes | `GET /api/v1/nodes` | refused: nothing can be judged |
//! | virt-launcher pods | `GET /api/v1/pods?labelSelector=kubevirt.io=virt-launcher` (all namespaces) | held counted from VMIs, a note |
//! | VMIs | `GET /apis/kubevirt.io/v1/virtualmachineinstances` (all namespaces) | pods only, a note |
//!
//! Without pods and VMIs both, what is held cannot be known, and the read is refused. The
//! Capacity view also lists the VMs labelled `corral.dev/vdi-pool` (metadata only) to name
//! each holder's pool.

use std::collections::HashMap;

use kube::api::{Api, ListParams};
use kube::core::ObjectList;
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;

use super::objects::{
    ClusterDevices, KubeVirtObject, LAUNCHER_LABEL, LAUNCHER_VALUE, NodeObject, PodObject,
    VmiObject,
};
use super::plan::{Demand, cluster_view, plan, plan_without_devices};
use super::view::{CapacityPlan, ClusterCapacity};
use crate::error::{Error, ErrorKind, Result, describe, is_status};
use crate::names::POOL_LABEL;
use crate::resources::VirtualMachine;

const KUBEVIRTS: &str = "/apis/kubevirt.io/v1/kubevirts";
const NODES: &str = "/api/v1/nodes";
const PODS: &str = "/api/v1/pods";
const VMIS: &str = "/apis/kubevirt.io/v1/virtualmachineinstances";

/// What a user needs to be allowed for capacity to be judged, as a fix.
pub const READ_ACCESS_FIX: &str = "ask a cluster administrator for read access to the cluster's \
     devices: get and list on nodes, and list on pods, virtualmachineinstances \
     (kubevirt.io) and kubevirts (kubevirt.io) in all namespaces (the sandbox's ClusterRole \
     corral-vdi:capacity-reader grants exactly these)";

/// One list, parsed into the narrow shape `T` (the API server's whole answer is read, only
/// the fields `T` has are kept).
async fn list<T>(client: &Client, path: &str, params: &ListParams) -> kube::Result<Vec<T>>
where
    T: DeserializeOwned + Clone,
{
    let request = kube::core::Request::new(path)
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let text = client.request_text(request).await?;
    let list: ObjectList<T> = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    Ok(list.items)
}

/// A list RBAC refused (`Err(why)`), one whose resource is not served (404: an empty list),
/// or another failure (returned as the error).
fn soft<T>(result: kube::Result<Vec<T>>, action: &str) -> Result<Result<Vec<T>, String>> {
    match result {
        Ok(items) => Ok(Ok(items)),
        Err(e) if is_status(&e, 403) => Ok(Err(describe(&e))),
        Err(e) if is_status(&e, 404) => Ok(Ok(Vec::new())),
        Err(e) => Err(Error::kube(action, e)),
    }
}

fn forbidden(what: &str, why: &str) -> Error {
    Error::rejected(
        ErrorKind::Forbidden,
        format!(
            "GPU and host-device capacity cannot be judged: you may not list {what} \
             cluster-wide ({why})"
        ),
        READ_ACCESS_FIX,
    )
}

/// Reads what admission needs — the KubeVirt CR, every node, the virt-launcher pods and the
/// VMIs of all namespaces — at once, and builds the snapshot ([`ClusterDevices`]).
///
/// Errors: [`Error::Rejected`] (`Forbidden`, with [`READ_ACCESS_FIX`]) when RBAC refuses the
/// nodes, or both the pods and the VMIs; [`Error::Kube`] when a list fails otherwise
/// (unreachable, 401).
pub async fn read_devices(client: &Client) -> Result<ClusterDevices> {
    let all = ListParams::default();
    let launchers = ListParams::default().labels(&format!("{LAUNCHER_LABEL}={LAUNCHER_VALUE}"));
    let (kubevirts, nodes, pods, vmis) = tokio::join!(
        list::<KubeVirtObject>(client, KUBEVIRTS, &all),
        list::<NodeObject>(client, NODES, &all),
        list::<PodObject>(client, PODS, &launchers),
        list::<VmiObject>(client, VMIS, &all),
    );
    let nodes = match nodes {
        Ok(nodes) => nodes,
        Err(e) if is_status(&e, 403) => return Err(forbidden("nodes", &describe(&e))),
        Err(e) => return Err(Error::kube("list Nodes", e)),
    };
    let kubevirts = soft(kubevirts, "list the KubeVirt CR (kubevirts.kubevirt.io)")?;
    let pods = soft(pods, "list virt-launcher pods in all namespaces")?;
    let vmis = soft(vmis, "list VirtualMachineInstances in all namespaces")?;
    if let (Err(pods_why), Err(_)) = (&pods, &vmis) {
        return Err(forbidden(
            "virt-launcher pods or VirtualMachineInstances",
            pods_why,
        ));
    }
    Ok(ClusterDevices::from_objects(kubevirts, nodes, pods, vmis))
}

/// Whether `size` VMs like `vm` can be placed now ([`plan`]). A VM that asks for no device is
/// admitted without a request.
///
/// Errors: those of [`read_devices`].
pub async fn plan_vm(client: &Client, vm: &VirtualMachine, size: u32) -> Result<CapacityPlan> {
    let demand = Demand::of_vm(vm);
    if !demand.asks_for_devices() {
        return Ok(plan_without_devices(&demand, size));
    }
    let devices = read_devices(client).await?;
    Ok(plan(&devices, &demand, size))
}

/// The Capacity view: every node's device resources, allocatable, held (by which VM, of which
/// pool) and free ([`ClusterCapacity`]).
///
/// Errors: those of [`read_devices`]; a refused list of pool VMs only leaves the pools out
/// (with a note).
pub async fn cluster_capacity(client: &Client) -> Result<ClusterCapacity> {
    let vms: Api<VirtualMachine> = Api::all(client.clone());
    let pool_vms = ListParams::default().labels(POOL_LABEL);
    let (devices, members) = tokio::join!(read_devices(client), vms.list_metadata(&pool_vms));
    let devices = devices?;
    let mut pools = HashMap::new();
    let mut note = None;
    match members {
        Ok(list) => {
            for vm in list.items {
                if let Some(pool) = vm.labels().get(POOL_LABEL) {
                    pools.insert(
                        (vm.namespace().unwrap_or_default(), vm.name_any()),
                        pool.clone(),
                    );
                }
            }
        }
        Err(e) if is_status(&e, 403) => {
            note = Some(format!(
                "pool VMs could not be listed in all namespaces ({}): holders are shown without \
                 their pool",
                describe(&e)
            ));
        }
        Err(e) => {
            return Err(Error::kube(
                "list the pools' VirtualMachines in all namespaces",
                e,
            ));
        }
    }
    let mut view = cluster_view(&devices, &pools);
    view.notes.extend(note);
    Ok(view)
}
