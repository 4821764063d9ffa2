//! Reading a pool's member VMs: those labelled `corral.dev/vdi-pool=<pool>` in its namespace.

use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;

use crate::error::{Error, Result};
use crate::names::POOL_LABEL;
use crate::resources::VirtualMachine;

fn selector(pool: &str) -> ListParams {
    ListParams::default().labels(&format!("{POOL_LABEL}={pool}"))
}

fn list_failed(ns: &str, pool: &str, e: kube::Error) -> Error {
    Error::kube(
        format!("list VirtualMachines of pool \"{pool}\" in namespace \"{ns}\""),
        e,
    )
}

/// The VMs of `pool` in `ns` (`vms` is that namespace's API), whole, in the API server's order.
///
/// Errors: the list failed (403, unreachable), naming the pool and namespace.
pub async fn list_members(
    vms: &Api<VirtualMachine>,
    ns: &str,
    pool: &str,
) -> Result<Vec<VirtualMachine>> {
    Ok(vms
        .list(&selector(pool))
        .await
        .map_err(|e| list_failed(ns, pool, e))?
        .items)
}

/// The metadata of the VMs of `pool` in `ns`, as [`list_members`] (a lighter read: names,
/// labels, deletion timestamps).
///
/// Errors: as [`list_members`].
pub async fn list_member_metadata(
    vms: &Api<VirtualMachine>,
    ns: &str,
    pool: &str,
) -> Result<Vec<PartialObjectMeta<VirtualMachine>>> {
    Ok(vms
        .list_metadata(&selector(pool))
        .await
        .map_err(|e| list_failed(ns, pool, e))?
        .items)
}
