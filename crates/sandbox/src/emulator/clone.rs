//! VirtualMachineClone emulation, after KubeVirt's clone controller: phases
//! `SnapshotInProgress` → `RestoreInProgress` → `CreatingTargetVM` → `Succeeded` (or
//! `Failed`), `cloneStepMillis` apart, ending in a target VM with the source's spec,
//! `runStrategy: Halted`, labels and annotations copied through the filters, MAC addresses and
//! the firmware UUID blanked, then the clone's `spec.patches` (v1beta1) applied to it as
//! KubeVirt's restore applies them (a patch that does not apply leaves the clone in
//! `CreatingTargetVM` with a warning Event).
//!
//! Faithful failure modes: a missing source stays pending with a condition saying so; a source
//! with persistent TPM or EFI (backend storage) goes `Failed`; a source whose PVC/DataVolume
//! volume lacks snapshot support (`status.volumeSnapshotStatuses`) stays pending with the event
//! `VMVolumeSnapshotsInvalid`; a target name that already exists leaves the clone in
//! `RestoreInProgress` with a warning Event. Knobs can stall (in a given phase) or fail named
//! targets. No disk is copied: there are no disks.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value, json};

use super::knobs::Knobs;
use super::types::{VirtualMachine, VirtualMachineClone, VmSpec};
use super::vm::ReconcileError;
use crate::bootstrap::MANAGER;

/// The annotation KubeVirt's restore writes on every VM it creates or restores.
const LAST_RESTORE_ANNOTATION: &str = "restore.kubevirt.io/lastRestoreUID";

struct Ctx {
    client: Client,
}

/// Runs the clone controller until the task is aborted.
pub async fn run(client: Client) {
    let clones: Api<VirtualMachineClone> = Api::all(client.clone());
    Controller::new(clones, watcher::Config::default())
        .run(
            reconcile,
            |_, err: &ReconcileError, _| {
                tracing::debug!(error = %err, "clone reconcile failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            Arc::new(Ctx { client }),
        )
        .for_each(|_| async {})
        .await;
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Whether `key` passes KubeVirt-style filters: none means all; `*` only at the end, `!` only
/// at the start (negation). A key is copied when some positive filter matches it (or there is
/// none) and no negated filter does.
pub fn passes(filters: &[String], key: &str) -> bool {
    let matches = |pattern: &str| match pattern.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => key == pattern,
    };
    let positive: Vec<&str> = filters
        .iter()
        .filter(|f| !f.starts_with('!'))
        .map(String::as_str)
        .collect();
    let included = positive.is_empty() || positive.iter().any(|p| matches(p));
    let excluded = filters
        .iter()
        .filter_map(|f| f.strip_prefix('!'))
        .any(matches);
    included && !excluded
}

fn filtered(map: Option<&std::collections::BTreeMap<String, String>>, filters: &[String]) -> Value {
    let mut out = Map::new();
    for (k, v) in map.into_iter().flatten() {
        if passes(filters, k) {
            out.insert(k.clone(), Value::String(v.clone()));
        }
    }
    Value::Object(out)
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the source keeps TPM or EFI state in backend storage: KubeVirt cannot clone those.
fn backend_storage(source: &VirtualMachine) -> bool {
    let domain = source
        .spec
        .fields
        .get("template")
        .and_then(|t| t.pointer("/spec/domain"))
        .cloned()
        .unwrap_or_default();
    domain.pointer("/devices/tpm/persistent") == Some(&Value::Bool(true))
        || domain.pointer("/firmware/bootloader/efi/persistent") == Some(&Value::Bool(true))
}

async fn reconcile(
    clone: Arc<VirtualMachineClone>,
    ctx: Arc<Ctx>,
) -> Result<Action, ReconcileError> {
    let ns = clone.namespace().unwrap_or_default();
    let name = clone.name_any();
    let clones: Api<VirtualMachineClone> = Api::namespaced(ctx.client.clone(), &ns);
    let vms: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let spec = Value::Object(clone.spec.fields.clone());
    let status = clone.status.clone().unwrap_or_else(|| json!({}));
    let phase = str_at(&status, "/phase").unwrap_or("").to_owned();
    if matches!(phase.as_str(), "Succeeded" | "Failed") {
        return Ok(Action::await_change());
    }
    let knobs = Knobs::read(&ctx.client).await;
    let source_name = str_at(&spec, "/source/name").unwrap_or_default().to_owned();
    let target_name = str_at(&spec, "/target/name")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{source_name}-clone"));
    let entered = status
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Progressing"))
        .and_then(|c| str_at(c, "/lastTransitionTime"))
        .and_then(|t| t.parse::<Timestamp>().ok());
    let waited = entered
        .and_then(|t| Duration::try_from(Timestamp::now().duration_since(t)).ok())
        .unwrap_or_default();
    if !phase.is_empty() && waited < knobs.clone_step {
        return Ok(Action::requeue(knobs.clone_step - waited));
    }
    if knobs.stalls(&target_name, &phase) {
        return Ok(Action::await_change());
    }

    let ready_reason = status
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| str_at(c, "/reason"))
        .map(str::to_owned);
    let Some(source) = vms.get_opt(&source_name).await? else {
        // Written once, not on every retry: each status write would wake this controller again.
        if ready_reason.as_deref() != Some("SourceNotFound") {
            set_phase(
                &clones,
                &name,
                "",
                "SourceNotFound",
                &format!("source VirtualMachine {source_name} does not exist"),
                false,
            )
            .await?;
        }
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    if knobs.fail_clones.contains(&target_name) {
        set_phase(
            &clones,
            &name,
            "Failed",
            "Failed",
            "clone failed (emulated failure)",
            true,
        )
        .await?;
        return Ok(Action::await_change());
    }
    if backend_storage(&source) {
        set_phase(
            &clones,
            &name,
            "Failed",
            "Failed",
            "cannot clone a VM with persistent TPM or EFI (backend storage)",
            true,
        )
        .await?;
        return Ok(Action::await_change());
    }
    match phase.as_str() {
        "" => {
            // KubeVirt checks the source's volumes before it snapshots them: a PVC/DataVolume
            // volume without snapshot support leaves the clone pending (not failed), with an
            // event, until the VM's status changes.
            if let Some(reason) = snapshot_problems(&source) {
                if ready_reason.as_deref() != Some(reason.as_str()) {
                    set_pending(&clones, &name, &reason).await?;
                }
                record_once(
                    &ctx.client,
                    &clone,
                    "Normal",
                    "VMVolumeSnapshotsInvalid",
                    &reason,
                )
                .await?;
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            set_phase(
                &clones,
                &name,
                "SnapshotInProgress",
                "SnapshotInProgress",
                "creating a snapshot of the source",
                false,
            )
            .await?;
        }
        "SnapshotInProgress" => {
            set_phase(
                &clones,
                &name,
                "RestoreInProgress",
                "RestoreInProgress",
                "restoring the snapshot into the target",
                false,
            )
            .await?;
            let snapshot = format!("tmp-snapshot-{}", clone.uid().unwrap_or_default());
            clones
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": { "snapshotName": snapshot } })),
                )
                .await?;
        }
        "RestoreInProgress" => {
            if vms.get_opt(&target_name).await?.is_some() {
                warn_once(
                    &ctx.client,
                    &clone,
                    "RestoreFailed",
                    &format!("target VirtualMachine {target_name} already exists"),
                )
                .await?;
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            set_phase(
                &clones,
                &name,
                "CreatingTargetVM",
                "CreatingTargetVM",
                "creating the target VirtualMachine",
                false,
            )
            .await?;
        }
        "CreatingTargetVM" => {
            let restore = format!("tmp-restore-{}", clone.uid().unwrap_or_default());
            let vm = match target_vm(&source, &spec, &target_name, &restore) {
                Ok(vm) => vm,
                Err(why) => {
                    // KubeVirt's restore fails the same way on every retry; the clone waits.
                    warn_once(&ctx.client, &clone, "VirtualMachineRestoreError", &why).await?;
                    return Ok(Action::requeue(Duration::from_secs(2)));
                }
            };
            create_target(&vms, &vm).await?;
            set_phase(
                &clones,
                &name,
                "Succeeded",
                "Succeeded",
                "clone succeeded",
                true,
            )
            .await?;
            clones
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": { "targetName": target_name } })),
                )
                .await?;
            return Ok(Action::await_change());
        }
        _ => return Ok(Action::await_change()),
    }
    Ok(Action::requeue(knobs.clone_step))
}

/// KubeVirt's check of the source's volumes (`validateVolumeSnapshotStatus`): every
/// PVC/DataVolume volume must be listed in `status.volumeSnapshotStatuses` with
/// `enabled: true`. Returns the joined reasons, in KubeVirt's words, or `None`.
fn snapshot_problems(source: &VirtualMachine) -> Option<String> {
    let volumes = source
        .spec
        .fields
        .get("template")
        .and_then(|t| t.pointer("/spec/volumes"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let statuses = source
        .status
        .as_ref()
        .and_then(|s| s.get("volumeSnapshotStatuses"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut problems = Vec::new();
    for volume in &volumes {
        if volume.get("dataVolume").is_none() && volume.get("persistentVolumeClaim").is_none() {
            continue;
        }
        let name = str_at(volume, "/name").unwrap_or_default();
        match statuses.iter().find(|s| str_at(s, "/name") == Some(name)) {
            Some(s) if s.get("enabled") == Some(&Value::Bool(true)) => {}
            Some(_) => problems.push(format!(
                "Virtual Machine volume {name} does not support snapshots"
            )),
            None => problems.push(format!(
                "Virtual Machine volume {name} snapshot support unknown"
            )),
        }
    }
    (!problems.is_empty()).then(|| problems.join("\n"))
}

/// A pending clone, as KubeVirt leaves it: no phase, Progressing False "Pending", Ready False
/// with the cause.
async fn set_pending(
    clones: &Api<VirtualMachineClone>,
    name: &str,
    reason: &str,
) -> Result<(), kube::Error> {
    let now = Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .unwrap_or_else(|_| Timestamp::now())
        .to_string();
    let status = json!({ "status": { "conditions": [
        { "type": "Ready", "status": "False", "reason": reason, "message": reason,
          "lastTransitionTime": now },
        { "type": "Progressing", "status": "False", "reason": "Pending", "message": "Pending",
          "lastTransitionTime": now },
    ] } });
    clones
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map(|_| ())
}

async fn set_phase(
    clones: &Api<VirtualMachineClone>,
    name: &str,
    phase: &str,
    reason: &str,
    message: &str,
    done: bool,
) -> Result<(), kube::Error> {
    // Millisecond precision: the phase timing reads it back (metav1.Time would truncate to
    // seconds, but these conditions are kept as plain JSON by the CRD).
    let now = Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .unwrap_or_else(|_| Timestamp::now())
        .to_string();
    let ready = if phase == "Succeeded" {
        "True"
    } else {
        "False"
    };
    let progressing = if done { "False" } else { "True" };
    let status = json!({ "status": {
        "phase": if phase.is_empty() { Value::Null } else { Value::String(phase.into()) },
        "conditions": [
            { "type": "Ready", "status": ready, "reason": reason, "message": message,
              "lastTransitionTime": now },
            { "type": "Progressing", "status": progressing, "reason": reason, "message": message,
              "lastTransitionTime": now },
        ]
    } });
    clones
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map(|_| ())
}

/// The VM a clone creates, as KubeVirt's restore builds it: the source's spec halted, labels
/// and annotations through the filters, MACs and firmware UUID blanked, the annotation
/// `restore.kubevirt.io/lastRestoreUID` set, and then the clone's `spec.patches` (JSON patch
/// strings, RFC 6902) applied to the whole object, all or none (kubevirt
/// `pkg/storage/snapshot/restore.go`, `generateRestoredVMSpec`, `patchVM`). Errors: a patch
/// that is not a JSON patch operation or does not apply, in KubeVirt's words ("error patching
/// VM …").
fn target_vm(
    source: &VirtualMachine,
    spec: &Value,
    target: &str,
    restore: &str,
) -> Result<VirtualMachine, String> {
    let label_filters = string_list(spec.get("labelFilters"));
    let annotation_filters = string_list(spec.get("annotationFilters"));
    let template_label_filters = string_list(spec.pointer("/template/labelFilters"));
    let template_annotation_filters = string_list(spec.pointer("/template/annotationFilters"));

    let mut vm_spec = source.spec.fields.clone();
    vm_spec.remove("running");
    vm_spec.insert("runStrategy".into(), json!("Halted"));
    if let Some(template) = vm_spec.get_mut("template") {
        if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
            for (field, filters) in [
                ("labels", &template_label_filters),
                ("annotations", &template_annotation_filters),
            ] {
                if let Some(map) = meta
                    .get(field)
                    .and_then(|m| serde_json::from_value(m.clone()).ok())
                {
                    meta.insert(field.into(), filtered(Some(&map), filters));
                }
            }
        }
        if let Some(domain) = template.pointer_mut("/spec/domain") {
            if let Some(firmware) = domain.get_mut("firmware").and_then(Value::as_object_mut) {
                firmware.remove("uuid");
            }
            let new_macs = spec.get("newMacAddresses").and_then(Value::as_object);
            if let Some(ifaces) = domain
                .pointer_mut("/devices/interfaces")
                .and_then(Value::as_array_mut)
            {
                for iface in ifaces {
                    let iface_name = iface
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    if let Some(obj) = iface.as_object_mut() {
                        match new_macs.and_then(|m| m.get(&iface_name)) {
                            Some(mac) => obj.insert("macAddress".into(), mac.clone()),
                            None => obj.remove("macAddress"),
                        };
                    }
                }
            }
        }
    }
    let mut vm = VirtualMachine::new(target, VmSpec { fields: vm_spec });
    vm.metadata.namespace = source.namespace();
    vm.metadata.labels =
        serde_json::from_value(filtered(source.metadata.labels.as_ref(), &label_filters)).ok();
    let mut annotations = filtered(source.metadata.annotations.as_ref(), &annotation_filters);
    annotations[LAST_RESTORE_ANNOTATION] = json!(restore);
    vm.metadata.annotations = serde_json::from_value(annotations).ok();
    let patches = string_list(spec.get("patches"));
    if patches.is_empty() {
        return Ok(vm);
    }
    let patching = |e: &dyn std::fmt::Display| {
        format!("VirtualMachineRestore encountered error error patching VM {target}: {e}")
    };
    let operations = patches
        .iter()
        .map(|p| serde_json::from_str::<json_patch::PatchOperation>(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| patching(&e))?;
    let mut doc = serde_json::to_value(&vm).map_err(|e| patching(&e))?;
    json_patch::patch(&mut doc, &operations).map_err(|e| patching(&e))?;
    serde_json::from_value(doc).map_err(|e| patching(&e))
}

/// Creates the clone's target VM; one that exists already (a retry) is left as it is.
async fn create_target(vms: &Api<VirtualMachine>, vm: &VirtualMachine) -> Result<(), kube::Error> {
    let params = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match vms.create(&params, vm).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Records a warning Event on the clone, once per reason (as an Event recorder would
/// aggregate).
async fn warn_once(
    client: &Client,
    clone: &VirtualMachineClone,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    record_once(client, clone, "Warning", reason, message).await
}

/// Records an Event of `type_` (`Normal` or `Warning`) on the clone, once per reason.
async fn record_once(
    client: &Client,
    clone: &VirtualMachineClone,
    type_: &str,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let ns = clone.namespace().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let name = format!("{}.{}", clone.name_any(), reason.to_lowercase());
    if events.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let now = Timestamp::now();
    let event = Event {
        metadata: kube::api::ObjectMeta {
            name: Some(name),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(VirtualMachineClone::api_version(&()).into_owned()),
            kind: Some("VirtualMachineClone".into()),
            name: clone.metadata.name.clone(),
            namespace: Some(ns),
            uid: clone.uid(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(type_.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    };
    match events.create(&PostParams::default(), &event).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::{VirtualMachine, json, passes, target_vm};

    #[test]
    fn filters_follow_kubevirt_rules() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(passes(&[], "anything"));
        assert!(passes(&f(&["app*"]), "app.kubernetes.io/name"));
        assert!(!passes(&f(&["app*"]), "team"));
        assert!(!passes(&f(&["*", "!corral.dev/*"]), "corral.dev/vdi-pool"));
        assert!(passes(&f(&["*", "!corral.dev/*"]), "team"));
    }

    #[test]
    fn patches_apply_to_the_target_after_the_filters_all_or_none() {
        let source: VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": { "name": "gold", "annotations": { "corral.dev/vdi-x": "no", "note": "yes" } },
            "spec": { "runStrategy": "Always" }
        }))
        .unwrap();
        let mark = r#"{"op":"add","path":"/metadata/annotations/corral.dev~1vdi-cloned-by","value":"c/r"}"#;
        let spec = json!({ "annotationFilters": ["*", "!corral.dev/vdi-*"], "patches": [mark] });
        let vm = target_vm(&source, &spec, "gold-1", "tmp-restore-u").unwrap();
        let annotations = vm.metadata.annotations.unwrap();
        assert_eq!(annotations.get("corral.dev/vdi-cloned-by").unwrap(), "c/r");
        assert_eq!(annotations.get("note").unwrap(), "yes");
        assert!(!annotations.contains_key("corral.dev/vdi-x"));
        assert_eq!(
            annotations
                .get("restore.kubevirt.io/lastRestoreUID")
                .unwrap(),
            "tmp-restore-u"
        );
        assert_eq!(vm.spec.fields["runStrategy"], "Halted");
        // A patch that does not apply fails them all, in KubeVirt's words.
        let bad = r#"{"op":"remove","path":"/metadata/labels/missing"}"#;
        let spec = json!({ "patches": [mark, bad] });
        let err = target_vm(&source, &spec, "gold-1", "tmp-restore-u").unwrap_err();
        assert!(err.contains("error patching VM gold-1"), "{err}");
    }
}
