//! VM power emulation, after KubeVirt's virt-controller: the run strategy decides whether a
//! VMI should exist; the VMI goes Pending → Running after `startMillis`; a VM that should not
//! run has its VMI stopped after `stopMillis`, or after the VMI's own
//! `terminationGracePeriodSeconds` when its spec sets one (then a restart, which deletes the
//! VMI, also keeps it Running for that long: [`GRACE_FINALIZER`]), turning `Succeeded` as it
//! goes; `status.printableStatus` follows (Stopped,
//! Starting, Running, Stopping, ErrorUnschedulable). `Manual` VMs act on
//! `status.stateChangeRequests` written by the start/stop subresources.
//!
//! A running VMI reports `status.interfaces` (address 127.0.0.1, where the guest-side servers
//! of [`super::guests`] listen) and, for a VM annotated `sandbox.corral.dev/paused: "true"`,
//! the condition `Paused` with phase `Running` (the VM then shows `Paused`); for a VM annotated
//! `sandbox.corral.dev/guest-users`, the condition `AgentConnected` (see [`super::agent`]).
//!
//! A VMI that asks for GPUs or host devices (`gpus[]`, `hostDevices[]`) is placed by
//! [`super::scheduler`] on a node with the free devices, through a virt-launcher pod, and
//! reports that node as `status.nodeName`; without a node that fits it stays
//! `ErrorUnschedulable` until one does. Stopping frees its devices. Every other VMI runs on the
//! sandbox's one node without a pod.
//!
//! There is no guest OS: "Running" means only that the emulated VMI says so.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use super::knobs::{
    Knobs, PAUSED_ANNOTATION, SNAPSHOT_DISABLED_ANNOTATION, STORAGE_CLASS,
    UNSCHEDULABLE_ANNOTATION, guest_users,
};
use super::scheduler::{Placement, Scheduler, device_requests};
use super::types::{VirtualMachine, VirtualMachineInstance, VmiSpec, run_strategy};
use crate::bootstrap::{MANAGER, NODE};

/// VMI annotation recording when the emulator began stopping it (RFC 3339).
pub const STOPPING_SINCE: &str = "sandbox.corral.dev/stopping-since";

/// Finalizer the emulator puts on a VMI whose spec sets `terminationGracePeriodSeconds`, as
/// KubeVirt's virt-controller keeps a VMI until its guest has shut down: deleted (a restart), it
/// stays `Running`, its streams served, for that grace period, then turns `Succeeded` and goes.
pub const GRACE_FINALIZER: &str = "sandbox.corral.dev/graceful-shutdown";

/// A VMI's `spec.terminationGracePeriodSeconds`, when set: how long the emulated guest takes to
/// shut down on a stop or restart. KubeVirt gives the guest up to that long after the ACPI
/// shutdown request; the emulated guest ignores the request, as a guest that does not react to
/// ACPI (or whose user keeps it busy) would, and so takes all of it. Unset: the emulator's
/// `stopMillis` knob.
fn grace(vmi: &VirtualMachineInstance) -> Option<Duration> {
    vmi.spec
        .fields
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_u64)
        .map(Duration::from_secs)
}

/// Errors of one reconcile; the controller retries after a second.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReconcileError(#[from] kube::Error);

struct Ctx {
    client: Client,
    scheduler: Arc<Scheduler>,
}

/// Runs the VM and VMI controllers until the task is aborted.
pub async fn run(client: Client) {
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        scheduler: Scheduler::new(client.clone()),
    });
    let vms: Api<VirtualMachine> = Api::all(client.clone());
    let vmis: Api<VirtualMachineInstance> = Api::all(client.clone());
    let vm_controller = Controller::new(vms.clone(), watcher::Config::default())
        .owns(vmis.clone(), watcher::Config::default())
        .run(reconcile_vm, retry, ctx.clone())
        .for_each(|_| async {});
    // A VMI whose VM is gone is deleted (there is no garbage collector in the sandbox).
    let vmi_controller = Controller::new(vmis, watcher::Config::default())
        .watches(vms, watcher::Config::default(), |vm| {
            Some(ObjectRef::new(&vm.name_any()).within(&vm.namespace().unwrap_or_default()))
        })
        .run(reconcile_vmi, retry, ctx)
        .for_each(|_| async {});
    futures::join!(vm_controller, vmi_controller);
}

fn retry<K>(_: Arc<K>, err: &ReconcileError, _: Arc<Ctx>) -> Action {
    tracing::debug!(error = %err, "emulator reconcile failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn reconcile_vmi(
    vmi: Arc<VirtualMachineInstance>,
    ctx: Arc<Ctx>,
) -> Result<Action, ReconcileError> {
    let ns = vmi.namespace().unwrap_or_default();
    let vms: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = vmi
        .owner_references()
        .iter()
        .find(|o| o.kind == "VirtualMachine");
    if let Some(deleted) = vmi.meta().deletion_timestamp.as_ref()
        && vmi.finalizers().iter().any(|f| f == GRACE_FINALIZER)
    {
        // A deleted VMI with a graceful shutdown: Running (streams served) for its grace
        // period from the deletion, unless its shutdown already ran (Succeeded), then gone.
        let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
        let left = grace(&vmi)
            .unwrap_or_default()
            .saturating_sub(since(Some(deleted.0)));
        let phase = vmi.status.as_ref().and_then(|s| s.get("phase"));
        if !left.is_zero() && phase != Some(&json!("Succeeded")) {
            return Ok(Action::requeue(left));
        }
        set_vmi_status(&vmis, &vmi.name_any(), json!({ "phase": "Succeeded" })).await?;
        let done = json!({ "metadata": { "finalizers": null } });
        ignore_not_found(
            vmis.patch(
                &vmi.name_any(),
                &PatchParams::default(),
                &Patch::Merge(done),
            )
            .await,
        )?;
        return Ok(Action::await_change());
    }
    if let Some(owner) = owner {
        let alive = vms
            .get_opt(&owner.name)
            .await?
            .is_some_and(|vm| vm.uid().as_deref() == Some(owner.uid.as_str()));
        if !alive {
            if !device_requests(&vmi.spec.fields).is_empty() {
                ctx.scheduler.release(&ns, &vmi.name_any(), None).await?;
            }
            let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
            ignore_not_found(vmis.delete(&vmi.name_any(), &DeleteParams::default()).await)?;
        }
    }
    Ok(Action::await_change())
}

fn since(stamp: Option<Timestamp>) -> Duration {
    stamp
        .and_then(|t| Duration::try_from(Timestamp::now().duration_since(t)).ok())
        .unwrap_or_default()
}

/// Status fields the emulator owns on a VM.
fn vm_status(printable: &str, created: bool, ready: bool, vm: &VirtualMachine) -> Value {
    let spec = &vm.spec.fields;
    // Every PVC/DataVolume volume reports snapshots enabled, as with a CSI driver that has a
    // VolumeSnapshotClass, except those named in the snapshot-disabled annotation, which report
    // KubeVirt's reason for a StorageClass without one; other volume kinds are not
    // snapshottable.
    let disabled: Vec<&str> = vm
        .annotations()
        .get(SNAPSHOT_DISABLED_ANNOTATION)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let volumes = spec
        .get("template")
        .and_then(|t| t.pointer("/spec/volumes"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let snapshot_statuses: Vec<Value> = volumes
        .iter()
        .map(|v| {
            let name = v.get("name").cloned().unwrap_or(Value::Null);
            let persistent =
                v.get("dataVolume").is_some() || v.get("persistentVolumeClaim").is_some();
            let off = name.as_str().is_some_and(|n| disabled.contains(&n));
            if persistent && off {
                let reason = format!(
                    "No VolumeSnapshotClass: Volume snapshots are not configured for this \
                     StorageClass [{STORAGE_CLASS}] [{}]",
                    name.as_str().unwrap_or_default()
                );
                json!({ "name": name, "enabled": false, "reason": reason })
            } else if persistent {
                json!({ "name": name, "enabled": true })
            } else {
                json!({ "name": name, "enabled": false,
                        "reason": "Snapshot is not supported for this volumeSource type" })
            }
        })
        .collect();
    json!({
        "printableStatus": printable,
        "created": created,
        "ready": ready,
        "volumeSnapshotStatuses": snapshot_statuses,
    })
}

async fn reconcile_vm(vm: Arc<VirtualMachine>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let ns = vm.namespace().unwrap_or_default();
    let name = vm.name_any();
    let vms: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let spec = &vm.spec.fields;
    let with_devices = spec
        .get("template")
        .and_then(|t| t.get("spec"))
        .and_then(Value::as_object)
        .is_some_and(|s| !device_requests(s).is_empty());
    if vm.meta().deletion_timestamp.is_some() {
        if with_devices {
            ctx.scheduler.release(&ns, &name, None).await?;
        }
        ignore_not_found(vmis.delete(&name, &DeleteParams::default()).await)?;
        return Ok(Action::await_change());
    }
    let knobs = Knobs::read(&ctx.client).await;
    let status = vm.status.clone().unwrap_or_else(|| json!({}));
    let vmi = vmis.get_opt(&name).await?;

    let requests: Vec<String> = status
        .get("stateChangeRequests")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("action").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let desired = match run_strategy(spec).as_str() {
        "Always" | "RerunOnFailure" | "Once" => true,
        "Manual" => match requests.last().map(String::as_str) {
            Some("Start") => true,
            Some("Stop") => false,
            _ => vmi.is_some(),
        },
        _ => false,
    };

    let mut requeue = None;
    let new_status = match (desired, vmi) {
        (true, None) => {
            create_vmi(&vmis, &vm).await?;
            requeue = Some(knobs.start);
            vm_status("Starting", true, false, &vm)
        }
        (_, Some(vmi)) if vmi.meta().deletion_timestamp.is_some() => {
            requeue = Some(Duration::from_millis(200));
            vm_status("Terminating", true, false, &vm)
        }
        (true, Some(vmi)) => {
            let phase = vmi
                .status
                .as_ref()
                .and_then(|s| s.get("phase"))
                .and_then(Value::as_str)
                .unwrap_or("Pending")
                .to_owned();
            let unschedulable = vm
                .annotations()
                .get(UNSCHEDULABLE_ANNOTATION)
                .is_some_and(|v| v == "true");
            let placed_on = vmi
                .status
                .as_ref()
                .and_then(|s| s.get("nodeName"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_owned);
            let requests = device_requests(&vmi.spec.fields);
            if phase == "Running" {
                let node = placed_on.as_deref().unwrap_or(NODE);
                let want = running_vmi_status(&vm, &vmi, node);
                let current = vmi.status.clone().unwrap_or_default();
                if ["conditions", "interfaces"]
                    .iter()
                    .any(|k| current.get(k) != want.get(k))
                {
                    set_vmi_status(&vmis, &name, want).await?;
                }
                vm_status(printable_running(&vm), true, true, &vm)
            } else if unschedulable {
                set_vmi_status(
                    &vmis,
                    &name,
                    json!({ "phase": "Scheduling", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/1 nodes are available: 1 Insufficient resources (emulated)" }] }),
                )
                .await?;
                vm_status("ErrorUnschedulable", true, false, &vm)
            } else {
                let placement = match (&placed_on, requests.is_empty()) {
                    (Some(node), _) => Placement::Placed {
                        node: node.clone(),
                        pod: String::new(),
                    },
                    (None, true) => Placement::Placed {
                        node: NODE.to_owned(),
                        pod: String::new(),
                    },
                    (None, false) => {
                        let placement = ctx.scheduler.place(&vmi, &requests).await?;
                        let status = match &placement {
                            Placement::Placed { node, .. } => json!({
                                "phase": "Scheduled", "nodeName": node,
                                "conditions": [{ "type": "PodScheduled", "status": "True" }] }),
                            Placement::Unschedulable(message) => json!({
                                "phase": "Scheduling", "conditions": [{
                                    "type": "PodScheduled", "status": "False",
                                    "reason": "Unschedulable", "message": message }] }),
                            Placement::NotPermitted(message) => json!({
                                "phase": "Pending", "conditions": [{
                                    "type": "Synchronized", "status": "False",
                                    "reason": "FailedCreate", "message": message }] }),
                        };
                        set_vmi_status(&vmis, &name, status).await?;
                        placement
                    }
                };
                match placement {
                    Placement::Placed { node, .. } => {
                        let elapsed = since(vmi.creation_timestamp().map(|t| t.0));
                        if elapsed >= knobs.start {
                            set_vmi_status(&vmis, &name, running_vmi_status(&vm, &vmi, &node))
                                .await?;
                            vm_status(printable_running(&vm), true, true, &vm)
                        } else {
                            requeue = Some(knobs.start - elapsed);
                            vm_status("Starting", true, false, &vm)
                        }
                    }
                    Placement::Unschedulable(_) => {
                        // Tried again, as a pending launcher pod would be scheduled once a
                        // device frees.
                        requeue = Some(Duration::from_secs(1));
                        vm_status("ErrorUnschedulable", true, false, &vm)
                    }
                    Placement::NotPermitted(_) => {
                        requeue = Some(Duration::from_secs(2));
                        vm_status("Starting", true, false, &vm)
                    }
                }
            }
        }
        (false, Some(vmi)) => {
            let stop_after = grace(&vmi).unwrap_or(knobs.stop);
            let stamp = vmi
                .annotations()
                .get(STOPPING_SINCE)
                .and_then(|s| s.parse::<Timestamp>().ok());
            match stamp {
                None => {
                    let patch = json!({ "metadata": { "annotations": {
                        STOPPING_SINCE: Timestamp::now().to_string() } } });
                    vmis.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await?;
                    requeue = Some(stop_after);
                    vm_status("Stopping", true, false, &vm)
                }
                Some(t) if since(Some(t)) >= stop_after => {
                    if !device_requests(&vmi.spec.fields).is_empty() {
                        ctx.scheduler.release(&ns, &name, None).await?;
                    }
                    // The guest shut down: Succeeded, then gone (the finalizer of a graceful
                    // shutdown drops at once, [`reconcile_vmi`]).
                    ignore_not_found(
                        set_vmi_status(&vmis, &name, json!({ "phase": "Succeeded" })).await,
                    )?;
                    ignore_not_found(vmis.delete(&name, &DeleteParams::default()).await)?;
                    vm_status("Stopped", false, false, &vm)
                }
                Some(t) => {
                    requeue = Some(stop_after.saturating_sub(since(Some(t))));
                    vm_status("Stopping", true, false, &vm)
                }
            }
        }
        (false, None) => {
            if with_devices && status.get("printableStatus") != Some(&json!("Stopped")) {
                // A VMI deleted by someone else leaves its launcher pod behind.
                ctx.scheduler.release(&ns, &name, None).await?;
            }
            vm_status("Stopped", false, false, &vm)
        }
    };

    let mut patch = new_status;
    // A Manual VM keeps its last request until the VM got there: a Start once a VMI exists, a
    // Stop once it is gone.
    let reached = match patch["printableStatus"].as_str() {
        Some("Stopped") => !desired,
        Some("Stopping" | "Terminating") => false,
        _ => desired,
    };
    if !requests.is_empty() && run_strategy(spec) == "Manual" && reached {
        patch["stateChangeRequests"] = Value::Null;
    }
    let changed = patch.as_object().is_some_and(|fields| {
        fields
            .iter()
            .any(|(k, v)| status.get(k).unwrap_or(&Value::Null) != v)
    });
    if changed {
        vms.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": patch })),
        )
        .await?;
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

fn paused(vm: &VirtualMachine) -> bool {
    vm.annotations()
        .get(PAUSED_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// What a running VM shows: `Paused` while its VMI is paused (KubeVirt's printable status for a
/// VMI with the `Paused` condition), else `Running`.
fn printable_running(vm: &VirtualMachine) -> &'static str {
    if paused(vm) { "Paused" } else { "Running" }
}

/// The status of a running VMI: phase `Running` on `node`, the `Ready` condition,
/// `AgentConnected` when the VM stands for a guest agent (`sandbox.corral.dev/guest-users`),
/// the `Paused` condition (reason `PausedByUser`, as `virtctl pause` leaves it) when the VM is
/// annotated paused, and `status.interfaces` with the guest's address. There is no guest
/// network: every interface reports 127.0.0.1, where the guest-side servers listen.
///
/// Interfaces follow KubeVirt's defaulting: the spec's `domain.devices.interfaces`; with none
/// and no `networks`, one pod interface `default` unless `autoattachPodInterface: false`.
fn running_vmi_status(vm: &VirtualMachine, vmi: &VirtualMachineInstance, node: &str) -> Value {
    let spec = &vmi.spec.fields;
    let declared: Vec<Value> = spec
        .get("domain")
        .and_then(|d| d.pointer("/devices/interfaces"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let networks = spec
        .get("networks")
        .and_then(Value::as_array)
        .is_some_and(|n| !n.is_empty());
    let autoattach = spec
        .get("domain")
        .and_then(|d| d.pointer("/devices/autoattachPodInterface"))
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let interfaces: Vec<Value> = if declared.is_empty() && !networks && autoattach {
        vec![json!({ "name": "default" })]
    } else {
        declared
    };
    let interfaces: Vec<Value> = interfaces
        .iter()
        .enumerate()
        .map(|(i, iface)| {
            let name = iface
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("default");
            let mac = iface
                .get("macAddress")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| local_mac(&format!("{}/{name}", vmi.name_any())));
            json!({ "name": name, "interfaceName": format!("eth{i}"), "mac": mac,
                    "ipAddress": "127.0.0.1", "ipAddresses": ["127.0.0.1"],
                    "infoSource": "domain" })
        })
        .collect();
    let mut conditions = vec![json!({ "type": "Ready", "status": "True" })];
    if guest_users(vm.annotations()).is_some() {
        conditions.push(json!({ "type": "AgentConnected", "status": "True" }));
    }
    if paused(vm) {
        conditions.push(
            json!({ "type": "Paused", "status": "True", "reason": "PausedByUser",
            "message": "VMI was paused by user (sandbox.corral.dev/paused)" }),
        );
    }
    json!({ "phase": "Running", "nodeName": node, "conditions": conditions,
            "interfaces": interfaces })
}

/// A locally administered unicast MAC derived from `seed`.
fn local_mac(seed: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(seed.as_bytes());
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        digest[0], digest[1], digest[2], digest[3], digest[4]
    )
}

async fn create_vmi(
    vmis: &Api<VirtualMachineInstance>,
    vm: &VirtualMachine,
) -> Result<(), kube::Error> {
    let template = vm.spec.fields.get("template").cloned().unwrap_or_default();
    let spec = template
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let labels = template
        .pointer("/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok());
    let mut vmi = VirtualMachineInstance::new(&vm.name_any(), VmiSpec { fields: spec });
    vmi.metadata.namespace = vm.namespace();
    vmi.metadata.labels = labels;
    vmi.metadata.owner_references = vm.controller_owner_ref(&()).map(|o| vec![o]);
    if grace(&vmi).is_some() {
        vmi.metadata.finalizers = Some(vec![GRACE_FINALIZER.to_owned()]);
    }
    vmi.status = Some(json!({ "phase": "Pending" }));
    match vmis
        .create(
            &PostParams {
                field_manager: Some(MANAGER.into()),
                ..Default::default()
            },
            &vmi,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn set_vmi_status(
    vmis: &Api<VirtualMachineInstance>,
    name: &str,
    status: Value,
) -> Result<(), kube::Error> {
    vmis.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map(|_| ())
}
