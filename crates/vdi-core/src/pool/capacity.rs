//! Pool create, SPEC step 4: capacity admission for GPUs and host devices, after the golden
//! VM's checks and before any clone (arithmetic and rules in [`crate::capacity`]).
//!
//! A golden VM that asks for no device passes without a request. Otherwise the cluster's
//! devices are read once and the pool is admitted only if all of its members can be placed
//! now, each with all of its devices on one schedulable node, and every device is permitted
//! by the KubeVirt CR. Admission is a check, not a reservation.
//!
//! The New pool preview ([`capacity_preview`]) is the same judgement made before a create, for
//! the app's dialog and `corral-vdi capacity --from`: it refuses nothing and creates nothing.

use kube::Client;
use kube::api::Api;

use super::CreatePool;
use super::create_input::pool_size;
use super::golden_vm::golden_vm;
use crate::capacity::{
    CapacityPlan, Demand, plan, plan_vm, plan_without_devices, pool_refusal, read_devices,
};
use crate::error::Result;
use crate::resources::VirtualMachine;
use crate::validate;

/// Admits a pool of `request.size` clones of `golden`, or refuses it.
///
/// Errors: [`crate::Error::Rejected`] `Refused` ([`pool_refusal`]: the sentence, then the
/// per-node table) when a device is not permitted or the members do not all fit; those of
/// [`read_devices`] (`Forbidden` when RBAC hides the nodes or what holds their devices).
pub(super) async fn admit(
    client: &Client,
    golden: &VirtualMachine,
    request: &CreatePool,
) -> Result<CapacityPlan> {
    let demand = Demand::of_vm(golden);
    if !demand.asks_for_devices() {
        return Ok(plan_without_devices(&demand, request.size));
    }
    let devices = read_devices(client).await?;
    let planned = plan(&devices, &demand, request.size);
    if !planned.admitted {
        return Err(pool_refusal(&planned, &request.name));
    }
    tracing::info!(
        namespace = %request.namespace,
        pool = %request.name,
        size = request.size,
        placeable = planned.placeable,
        "capacity admitted (a check, not a reservation)"
    );
    Ok(planned)
}

/// The New pool preview: whether a pool of `size` cloned from `golden` in `namespace` would be
/// admitted now, with the per-node table ([`CapacityPlan`]); creates nothing. The golden VM
/// is read from `namespace` only, as pool create reads it; a golden VM without devices makes
/// no further request.
///
/// Errors: [`crate::Error::Invalid`] for a bad namespace or VM name or a size outside 1 ..=
/// [`super::MAX_POOL_SIZE`] (no request); [`crate::Error::Rejected`] `NotFound` when the
/// golden VM is not in the namespace; those of [`read_devices`].
pub async fn capacity_preview(
    client: &Client,
    namespace: &str,
    golden: &str,
    size: u32,
) -> Result<CapacityPlan> {
    validate::namespace(namespace)?;
    validate::vm_name(golden)?;
    pool_size(size)?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vm = golden_vm(&vms, namespace, golden).await?;
    plan_vm(client, &vm, size).await
}
