//! Pool create, SPEC step 2 and the golden VM's checks: it is read from the pool's namespace
//! only, refused if it is an assigned pool member (or an unassigned one, unless asked for), and
//! refused if KubeVirt would fail or stall its clones late ([`golden_problems`]).

use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::CreatePool;
use crate::error::{Error, ErrorKind, Result};
use crate::names::{GOLDEN_IMAGE_LABEL, POOL_LABEL, lease_name};
use crate::resources::VirtualMachine;
use crate::state::member_view;

/// Reads the golden VM and runs every check on it; returns it for the steps that follow.
///
/// Errors: [`Error::Rejected`] `NotFound` (not in the namespace) or `Invalid` (a pool member,
/// or [`golden_problems`], all of them in one sentence); [`Error::Kube`] when a read fails.
pub(super) async fn check_golden(
    client: &Client,
    vms: &Api<VirtualMachine>,
    request: &CreatePool,
) -> Result<VirtualMachine> {
    let ns = &request.namespace;
    let golden = golden_vm(vms, ns, &request.golden).await?;
    check_golden_membership(client, &golden, ns, Some(request.options.allow_member)).await?;
    let problems = golden_problems(&golden, ns, request.options.allow_running);
    if !problems.is_empty() {
        let causes: Vec<&str> = problems.iter().map(|p| p.cause.as_str()).collect();
        let fixes: Vec<&str> = problems.iter().map(|p| p.fix.as_str()).collect();
        return Err(Error::rejected(
            ErrorKind::Invalid,
            causes.join("; also, "),
            fixes.join("; "),
        ));
    }
    Ok(golden)
}

/// Warnings about secrets in `vm`'s cloud-init `userData` (a `cloudInitNoCloud` or
/// `cloudInitConfigDrive` volume's inline `userData`): a password (`password:`, `passwd:`,
/// `chpasswd`, `plain_text_passwd`, `hashed_passwd`) or a private key (`PRIVATE KEY-----`).
/// Whoever may read VMs in the namespace (every claimant) reads it, in the golden VM and in
/// every member cloned from it; a Secret named by `userDataSecretRef` is not theirs to read.
/// One sentence per volume; empty when none is found. A warning, not a refusal: pool create
/// goes on and says it.
pub fn secrets_in_user_data(vm: &VirtualMachine) -> Vec<String> {
    const SIGNS: [&str; 6] = [
        "password:",
        "passwd:",
        "chpasswd",
        "plain_text_passwd",
        "hashed_passwd",
        "private key-----",
    ];
    let name = vm.name_any();
    let volumes = vm
        .spec
        .template
        .as_ref()
        .and_then(|t| t.pointer("/spec/volumes"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    volumes
        .iter()
        .filter_map(|volume| {
            let data = ["cloudInitNoCloud", "cloudInitConfigDrive"]
                .iter()
                .find_map(|kind| volume.get(kind)?.get("userData")?.as_str())?
                .to_lowercase();
            let found: Vec<&str> = SIGNS.iter().copied().filter(|s| data.contains(s)).collect();
            (!found.is_empty()).then(|| {
                format!(
                    "golden VM \"{name}\" has cloud-init userData with what looks like a secret \
                     (volume {}: {}): everyone who may read VMs in this namespace, every claimant \
                     included, reads it in the golden VM and in each member; keep secrets in a \
                     Secret named by userDataSecretRef, which claimants cannot read",
                    volume.get("name").and_then(Value::as_str).unwrap_or("?"),
                    found.join(", ")
                )
            })
        })
        .collect()
}

/// Something about a golden VM that would make KubeVirt fail its clones late (or make them
/// unsafe), found before anything is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldenProblem {
    /// The cause, naming the VM and the field or volume.
    pub cause: String,
    /// The fix.
    pub fix: String,
}

/// What is wrong with `vm` as a golden VM in `namespace`, in the order KubeVirt would trip on
/// it; empty when it may be cloned.
///
/// Rules (KubeVirt's clone controller, `pkg/storage/clone`; REFERENCE "VirtualMachineClone"):
/// - a persistent TPM (`spec.template.spec.domain.devices.tpm.persistent: true`) or EFI
///   (`...domain.firmware.bootloader.efi.persistent: true`) needs backend storage, which the
///   clone controller refuses: each clone would go `Failed`;
/// - every `dataVolume` / `persistentVolumeClaim` volume must appear in
///   `status.volumeSnapshotStatuses` with `enabled: true`; otherwise each clone would stay
///   pending for ever (event `VMVolumeSnapshotsInvalid`);
/// - `status.printableStatus` must be `Stopped` unless `allow_running`: a snapshot of a running
///   VM's disk is only crash-consistent.
pub fn golden_problems(
    vm: &VirtualMachine,
    namespace: &str,
    allow_running: bool,
) -> Vec<GoldenProblem> {
    let name = vm.name_any();
    let mut problems = Vec::new();
    let template = vm.spec.template.clone().unwrap_or(Value::Null);
    let domain = template
        .pointer("/spec/domain")
        .cloned()
        .unwrap_or(Value::Null);
    if domain.pointer("/devices/tpm/persistent") == Some(&Value::Bool(true)) {
        problems.push(GoldenProblem {
            cause: format!(
                "golden VM \"{name}\" has a persistent TPM (spec.template.spec.domain.devices.tpm.\
                 persistent: true); KubeVirt cannot clone a VM whose TPM state lives in backend \
                 storage, so every clone would fail"
            ),
            fix: "clone from a golden VM without a persistent TPM (drop `persistent: true` from \
                  its TPM device, or build a golden VM without one)"
                .into(),
        });
    }
    if domain.pointer("/firmware/bootloader/efi/persistent") == Some(&Value::Bool(true)) {
        problems.push(GoldenProblem {
            cause: format!(
                "golden VM \"{name}\" has persistent EFI variables (spec.template.spec.domain.\
                 firmware.bootloader.efi.persistent: true); KubeVirt cannot clone a VM whose EFI \
                 state lives in backend storage, so every clone would fail"
            ),
            fix: "clone from a golden VM without persistent EFI (drop `persistent: true` from its \
                  EFI bootloader, or build a golden VM without it)"
                .into(),
        });
    }

    let statuses: Vec<Value> = vm
        .status
        .as_ref()
        .and_then(|s| s.other.get("volumeSnapshotStatuses"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let volumes = template
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for volume in &volumes {
        if volume.get("dataVolume").is_none() && volume.get("persistentVolumeClaim").is_none() {
            continue;
        }
        let volume_name = volume.get("name").and_then(Value::as_str).unwrap_or("");
        let status = statuses
            .iter()
            .find(|s| s.get("name").and_then(Value::as_str) == Some(volume_name));
        match status {
            None => problems.push(GoldenProblem {
                cause: format!(
                    "golden VM \"{name}\": KubeVirt reports no snapshot support for volume \
                     \"{volume_name}\" (status.volumeSnapshotStatuses has no entry for it), so \
                     every clone would stay pending"
                ),
                fix: format!(
                    "wait until KubeVirt has reconciled the VM and reports the volume \
                     (kubectl get vm {name} -n {namespace} -o jsonpath='{{.status.volumeSnapshotStatuses}}'), \
                     then try again"
                ),
            }),
            Some(status) if status.get("enabled") != Some(&Value::Bool(true)) => {
                let reason = status
                    .get("reason")
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                    .unwrap_or("no reason given");
                problems.push(GoldenProblem {
                    cause: format!(
                        "golden VM \"{name}\": volume \"{volume_name}\" does not support snapshots \
                         ({reason}), so every clone would stay pending"
                    ),
                    fix: "give the volume's StorageClass a VolumeSnapshotClass (kubectl get \
                          volumesnapshotclass), or move the disk to a StorageClass that has one"
                        .into(),
                });
            }
            Some(_) => {}
        }
    }

    let power = vm.printable_status();
    if power != "Stopped" && !allow_running {
        problems.push(GoldenProblem {
            cause: format!(
                "golden VM \"{name}\" is {power}, not Stopped: a clone of a VM that is not stopped \
                 gets a disk that is only crash-consistent"
            ),
            fix: format!(
                "stop it first (virtctl stop {name} -n {namespace}) and wait for Stopped, or pass \
                 --allow-running to clone it as it is"
            ),
        });
    }
    problems
}

/// The golden VM `golden` a pool being adopted names (`pool adopt --from`), read from
/// `namespace` only and refused when it is a pool member, any pool's: a managed pool's broker
/// clones it at every grow and reset, so it must be a golden image, not a desktop.
///
/// Errors: [`golden_vm`]'s; [`Error::Rejected`] `Invalid` for a pool member.
pub(crate) async fn adopted_golden(
    client: &Client,
    namespace: &str,
    golden: &str,
) -> Result<VirtualMachine> {
    let vm = golden_vm_in(client, namespace, golden).await?;
    check_golden_membership(client, &vm, namespace, None).await?;
    Ok(vm)
}

/// The golden VM `golden` in `namespace`, as pool create reads it (its own namespace only).
///
/// Errors: [`Error::Rejected`] `NotFound` naming it and the namespace; [`Error::Kube`].
pub(crate) async fn golden_vm_in(
    client: &Client,
    namespace: &str,
    golden: &str,
) -> Result<VirtualMachine> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    golden_vm(&vms, namespace, golden).await
}

/// Refuses a golden VM that is itself a pool member: an assigned one always (its disk is a
/// user's), an unassigned one unless `allow_member` is `Some(true)` (pool create's
/// `--from-member`; `None` where no such option exists).
async fn check_golden_membership(
    client: &Client,
    golden: &VirtualMachine,
    namespace: &str,
    allow_member: Option<bool>,
) -> Result<()> {
    let Some(pool) = golden.labels().get(POOL_LABEL) else {
        return Ok(());
    };
    let name = golden.name_any();
    let lease = crate::lease::get(client, namespace, &lease_name(&name)).await?;
    let view = member_view(golden, lease.as_ref(), Timestamp::now());
    if !view.claimable {
        return Err(Error::rejected(
            ErrorKind::Invalid,
            format!(
                "golden VM \"{name}\" is a member of pool \"{pool}\" and is {} ({}): cloning it \
                 would copy a user's desktop into a pool anyone can claim",
                view.state_label,
                view.holder.as_deref().unwrap_or("holder unknown")
            ),
            "clone from a golden VM built for the purpose (kubectl get vm -n <namespace> lists \
             them; the New pool dialog offers only VMs that are no pool member)",
        ));
    }
    let fix = match allow_member {
        Some(true) => return Ok(()),
        Some(false) => {
            "clone from a golden VM built for the purpose; to clone this unassigned member \
             anyway, pass --from-member"
        }
        None => {
            "name a golden VM built for the purpose with --from (kubectl get vm -n <namespace> \
             lists them; pool members carry the pool label)"
        }
    };
    Err(Error::rejected(
        ErrorKind::Invalid,
        format!(
            "golden VM \"{name}\" is a member of pool \"{pool}\": pool members are desktops, \
             not golden images"
        ),
        fix,
    ))
}

/// Reads the golden VM from `namespace` only (SPEC step 2: no search of other namespaces).
///
/// Errors: [`Error::Rejected`] (`NotFound`) with a hint to pass `-n`; [`Error::Kube`] when the
/// read fails.
pub(crate) async fn golden_vm(
    vms: &Api<VirtualMachine>,
    namespace: &str,
    golden: &str,
) -> Result<VirtualMachine> {
    match vms.get_opt(golden).await {
        Ok(Some(vm)) => Ok(vm),
        Ok(None) => Err(Error::rejected(
            ErrorKind::NotFound,
            format!("golden VM \"{golden}\" not found in namespace \"{namespace}\""),
            format!(
                "pool create looks for the golden VM only in the pool's namespace: pass -n with \
                 the namespace where \"{golden}\" lives (kubectl get vm -A | grep {golden})"
            ),
        )),
        Err(e) => Err(Error::kube(
            format!("read golden VM \"{golden}\" in namespace \"{namespace}\""),
            e,
        )),
    }
}

/// Marks `golden` (in `namespace`) as a golden image ([`GOLDEN_IMAGE_LABEL`]), unless it is
/// marked already: pool create's last step, so that with the guard only administrators change
/// what every future member copies. `None` when marked; else a warning naming the VM, the
/// failure and what an administrator runs (the pool is made all the same).
pub async fn mark_golden_image(
    client: &Client,
    namespace: &str,
    golden: &VirtualMachine,
) -> Option<String> {
    if golden.labels().contains_key(GOLDEN_IMAGE_LABEL) {
        return None;
    }
    let name = golden.name_any();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({ "metadata": { "labels": { GOLDEN_IMAGE_LABEL: "true" } } });
    let params = PatchParams {
        field_manager: Some(super::FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    vms.patch(&name, &params, &Patch::Merge(&patch))
        .await
        .err()
        .map(|e| {
            format!(
                "golden VM \"{name}\" in namespace \"{namespace}\" could not be marked as a golden \
                 image ({}): until it is, the guard does not stop non-administrators from \
                 changing what every new member copies; an administrator runs `kubectl label vm \
                 {name} -n {namespace} {GOLDEN_IMAGE_LABEL}=true`",
                crate::error::describe(&e)
            )
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::resources::{VirtualMachineSpec, VirtualMachineStatus};

    fn golden(template: Value, printable: &str, snapshots: Value) -> VirtualMachine {
        let mut vm = VirtualMachine::new(
            "gold",
            VirtualMachineSpec {
                run_strategy: Some("Halted".into()),
                template: Some(template),
                ..Default::default()
            },
        );
        vm.status = Some(VirtualMachineStatus {
            printable_status: Some(printable.into()),
            other: BTreeMap::from([("volumeSnapshotStatuses".to_owned(), snapshots)]),
            ..Default::default()
        });
        vm
    }

    fn template(domain: Value) -> Value {
        json!({ "spec": { "domain": domain, "volumes": [
            { "name": "rootdisk", "dataVolume": { "name": "gold-root" } },
            { "name": "cloudinit", "cloudInitNoCloud": { "userData": "#cloud-config" } },
        ] } })
    }

    #[test]
    fn a_password_or_private_key_in_user_data_is_warned_about() {
        let with = |user_data: &str| {
            let template = serde_json::json!({ "spec": { "volumes": [
                { "name": "disk", "dataVolume": { "name": "d" } },
                { "name": "init", "cloudInitNoCloud": { "userData": user_data } },
            ] } });
            golden(template, "Stopped", serde_json::json!([]))
        };
        let warned = secrets_in_user_data(&with("#cloud-config\nchpasswd:\n  list: root:secret\n"));
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(
            warned[0].contains("(volume init: passwd:, chpasswd)"),
            "{warned:?}"
        );
        let key =
            "#cloud-config\nwrite_files:\n- content: |\n    -----BEGIN OPENSSH PRIVATE KEY-----";
        assert_eq!(secrets_in_user_data(&with(key)).len(), 1);
        assert!(
            secrets_in_user_data(&with(
                "#cloud-config\nssh_authorized_keys: [ssh-ed25519 AAAA]"
            ))
            .is_empty()
        );
        assert!(
            secrets_in_user_data(&golden(
                serde_json::json!({}),
                "Stopped",
                serde_json::json!([])
            ))
            .is_empty()
        );
    }

    #[test]
    fn a_stopped_snapshottable_golden_vm_passes() {
        let ok = json!([{ "name": "rootdisk", "enabled": true },
                        { "name": "cloudinit", "enabled": false, "reason": "not supported" }]);
        let vm = golden(template(json!({})), "Stopped", ok);
        assert!(golden_problems(&vm, "ns", false).is_empty());
    }

    #[test]
    fn golden_vms_kubevirt_cannot_clone_are_refused() {
        let ok = json!([{ "name": "rootdisk", "enabled": true }]);
        let tpm = golden(
            template(json!({ "devices": { "tpm": { "persistent": true } } })),
            "Stopped",
            ok.clone(),
        );
        let problems = golden_problems(&tpm, "ns", false);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].cause.contains("persistent TPM"), "{problems:?}");
        let efi = golden(
            template(json!({ "firmware": { "bootloader": { "efi": { "persistent": true } } } })),
            "Stopped",
            ok.clone(),
        );
        assert!(
            golden_problems(&efi, "ns", false)[0]
                .cause
                .contains("persistent EFI")
        );

        let disabled =
            json!([{ "name": "rootdisk", "enabled": false, "reason": "No VolumeSnapshotClass" }]);
        let vm = golden(template(json!({})), "Stopped", disabled);
        let problems = golden_problems(&vm, "ns", false);
        assert!(
            problems[0].cause.contains(
                "volume \"rootdisk\" does not support snapshots (No VolumeSnapshotClass)"
            ),
            "{problems:?}"
        );
        assert!(problems[0].fix.contains("VolumeSnapshotClass"));

        let unknown = golden(template(json!({})), "Stopped", json!([]));
        assert!(
            golden_problems(&unknown, "ns", false)[0]
                .cause
                .contains("no snapshot support")
        );

        let running = golden(template(json!({})), "Running", ok);
        let problems = golden_problems(&running, "ns", false);
        assert!(
            problems[0].cause.contains("is Running, not Stopped"),
            "{problems:?}"
        );
        assert!(problems[0].fix.contains("--allow-running"));
        assert!(golden_problems(&running, "ns", true).is_empty());
    }
}
