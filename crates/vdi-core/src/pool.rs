//! Pool create and delete (SPEC "Pool create", "Pool list / delete", "Bad input and faults").
//!
//! **Create** follows the SPEC's steps in order, and refuses everything it can before it
//! changes anything:
//! 1. input (pool name, size, namespace, timeout) is checked without a single request
//!    ([`validate_create`]);
//! 2. the namespace must exist; the VirtualMachineClone API version is chosen by discovery
//!    (`clone.kubevirt.io`: `v1beta1`, else `v1alpha1`);
//! 3. the golden VM is looked up in the target namespace only, and refused if KubeVirt would
//!    fail its clones late: a PVC/DataVolume volume without snapshot support, a persistent TPM
//!    or EFI, or a VM that is not stopped (unless [`CreateOptions::allow_running`])
//!    ([`golden_problems`]);
//! 4. refused if the pool exists, a member name is taken, a clone object already targets a
//!    member (another create in progress, or debris of an aborted one), or a claim Lease of a
//!    member is left over;
//! 5. then one `VirtualMachineClone` per member, all in flight at once (API requests bounded by
//!    [`CreateOptions::api_concurrency`]), each waited for with its own timeout while its
//!    phase and condition message are reported ([`CreateProgress`]);
//! 6. each new VM gets the pool label (a merge patch of that label alone); KubeVirt creates
//!    clone targets with `runStrategy: Halted`, and the clone's label filters keep the golden
//!    VM's `corral.dev/vdi-*` labels and annotations off the members, so they start stopped
//!    and unassigned;
//! 7. finished clone objects are removed; a clone that fails or stalls is deleted (so it cannot
//!    produce an unlabelled VM later), as is a VM it produced that could not be labelled; the
//!    error says exactly which members exist ([`PoolCreateFailure`]).
//!
//! **Races.** Clone objects have names derived from their member (`corral-vdi-clone-<member>`)
//! and creating one is first-writer-wins. The first member's clone is created alone, as a lock:
//! of two creates of the same pool, the one that loses gets `AlreadyExists` and stops at once,
//! having created nothing. The winner then checks again that the pool is free (a create that
//! finished and removed its clones in the meantime is caught there), before the other clones
//! start. Clone objects carry the labels `corral.dev/vdi-pool`, `corral.dev/vdi-member` and
//! `corral.dev/vdi-create-run=<run id>`; cleanup deletes only objects of its own run.
//!
//! **Cancel.** [`CreateOptions::cancel`] stops a running create (Ctrl-C in the CLI): members
//! still waiting are treated like failed ones (their clone objects deleted, a VM they produced
//! removed), and the error lists the members that exist.
//!
//! **Delete** removes the members, their `corral-vdi-<member>` Leases and leftover clone
//! objects, refusing while any member is assigned (label or active Lease) unless forced. Run
//! twice, the second run finds nothing to delete and succeeds.
//!
//! Capacity admission (SPEC step 4) is not part of this module yet.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as KubeEvent, Namespace};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use crate::cluster::ServerClock;
use crate::error::{Error, Result, describe, is_status};
use crate::labels::{MEMBER_LABEL, POOL_LABEL, lease_name};
use crate::model::{
    CreateProgress, CreateStarted, CreateStep, ErrorKind, MemberFailure, MemberProgress,
    MemberState, PoolCreateFailure, PoolCreated, PoolDeleted,
};
use crate::resources::VirtualMachine;
use crate::state::member_view;
use crate::validate;

/// Largest pool [`create_pool`] accepts, in members. A sanity bound against typos (a pool of
/// 5000 is almost certainly meant to be 50), not a cluster limit.
pub const MAX_POOL_SIZE: u32 = 500;
/// Longest a VM name (and so `<pool>-<N>`) may be, in characters: a DNS-1123 label, because
/// KubeVirt names the VMI and its pod after the VM.
pub const MAX_MEMBER_NAME: usize = 63;
/// How long each member's clone is waited for by default (SPEC: 2 minutes).
pub const DEFAULT_CLONE_TIMEOUT: Duration = Duration::from_secs(120);
/// How many API requests a pool create has in flight at once by default.
pub const DEFAULT_API_CONCURRENCY: usize = 8;
/// API group of KubeVirt's VirtualMachineClone.
pub const CLONE_GROUP: &str = "clone.kubevirt.io";
/// Kind of KubeVirt's clone object.
pub const CLONE_KIND: &str = "VirtualMachineClone";
/// The VirtualMachineClone versions Corral VDI speaks, most preferred first: `v1beta1`
/// (stored from KubeVirt 1.5), else `v1alpha1` (REFERENCE "VirtualMachineClone").
pub const CLONE_VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];
/// Label on the clone objects of one create run: `corral.dev/vdi-create-run=<run id>`.
pub const RUN_LABEL: &str = "corral.dev/vdi-create-run";
/// Prefix of a member's clone object name: `corral-vdi-clone-<member>`.
pub const CLONE_PREFIX: &str = "corral-vdi-clone-";
/// Label and annotation filters of every clone: copy everything from the golden VM except
/// Corral's own keys (pool, assignment, claimed-at), so members start unassigned. KubeVirt's
/// filter rules: `*` only at the end, `!` only at the start.
pub const CLONE_FILTERS: [&str; 2] = ["*", "!corral.dev/vdi-*"];
/// Field manager of the patches pool create makes.
pub const FIELD_MANAGER: &str = "corral-vdi";
/// After a failed member's clone object is deleted, how long to wait before looking for a VM
/// that a clone controller still working on the old object may have created.
const CLEANUP_GRACE: Duration = Duration::from_millis(750);

/// Name of the member `index` (1-based) of `pool`: `<pool>-<index>`.
pub fn member_name(pool: &str, index: u32) -> String {
    format!("{pool}-{index}")
}

/// The members of a pool of `size`: `<pool>-1` … `<pool>-<size>`.
pub fn member_names(pool: &str, size: u32) -> Vec<String> {
    (1..=size).map(|i| member_name(pool, i)).collect()
}

/// Name of the VirtualMachineClone that makes `member`: `corral-vdi-clone-<member>`.
pub fn clone_name(member: &str) -> String {
    format!("{CLONE_PREFIX}{member}")
}

/// The VirtualMachineClone version to use among those the cluster serves: `v1beta1` if served,
/// else `v1alpha1`, else none (an unknown future version is not guessed at).
pub fn choose_clone_version<'a>(served: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let served: Vec<&str> = served.into_iter().collect();
    CLONE_VERSIONS
        .into_iter()
        .find(|preferred| served.contains(preferred))
}

/// How a pool create behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// How long each member's clone may take to produce its VM (default 2 minutes). Each member
    /// is timed from the creation of its clone object.
    pub timeout: Duration,
    /// Clone a golden VM that is not stopped. Its disk is then only crash-consistent (as after
    /// a power cut), so this must be asked for.
    pub allow_running: bool,
    /// Clone a golden VM that is itself an unassigned pool member. Never allowed for an
    /// assigned member: that would copy a user's disk into a pool anyone can claim.
    pub allow_member: bool,
    /// API requests in flight at once (default 8). Clones run in parallel on the cluster
    /// regardless; this bounds only the load on the API server.
    pub api_concurrency: usize,
    /// Clone objects in flight at once; `None` (the default) starts every member's clone at
    /// once, so a pool of N takes about as long as one clone. Set it to spare the storage
    /// backend many simultaneous snapshots.
    pub clone_concurrency: Option<usize>,
    /// Lets another task stop the create (Ctrl-C, a Cancel button): members still waiting
    /// stop, their clone objects are deleted, and the result says which members exist.
    pub cancel: Option<CancelHandle>,
}

/// Stops a running pool create from elsewhere; cloning the handle shares it.
#[derive(Debug, Clone)]
pub struct CancelHandle(Arc<watch::Sender<bool>>);

impl CancelHandle {
    /// A handle nobody has cancelled yet.
    pub fn new() -> Self {
        CancelHandle(Arc::new(watch::Sender::new(false)))
    }

    /// Asks the create to stop; idempotent.
    pub fn cancel(&self) {
        self.0.send_replace(true);
    }

    /// Whether [`CancelHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once the create is cancelled.
    async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = rx.wait_for(|c| *c).await;
    }
}

impl Default for CancelHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for CancelHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CancelHandle {}

/// Completes when `cancel` fires; never, without one.
async fn cancelled(cancel: Option<&CancelHandle>) {
    match cancel {
        Some(handle) => handle.cancelled().await,
        None => std::future::pending().await,
    }
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            timeout: DEFAULT_CLONE_TIMEOUT,
            allow_running: false,
            allow_member: false,
            api_concurrency: DEFAULT_API_CONCURRENCY,
            clone_concurrency: None,
            cancel: None,
        }
    }
}

/// What to create: `pool create <name> --from <golden> --size N -n <namespace>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePool {
    /// Namespace of the golden VM and of the pool.
    pub namespace: String,
    /// Pool name: a DNS-1123 label; members are `<name>-1` … `<name>-<size>`.
    pub name: String,
    /// The golden VM to clone, in `namespace`.
    pub golden: String,
    /// Number of members, 1 ..= [`MAX_POOL_SIZE`].
    pub size: u32,
    /// How to go about it.
    pub options: CreateOptions,
}

/// Checks a create request without contacting the cluster and returns the member names.
///
/// Errors ([`Error::Invalid`], each naming the value and the fix): the pool name is not a
/// DNS-1123 label; the size is 0 or above [`MAX_POOL_SIZE`]; `<name>-<size>` is longer than
/// 63 characters; the namespace or golden VM name is not a valid name; the timeout is outside
/// 1 s ..= 24 h ([`validate::clone_timeout`]).
pub fn validate_create(request: &CreatePool) -> Result<Vec<String>> {
    let name = &request.name;
    validate::pool_name(name)?;
    if request.size == 0 || request.size > MAX_POOL_SIZE {
        return Err(Error::invalid(
            format!(
                "pool size {} is out of range: a pool has 1 to {MAX_POOL_SIZE} members",
                request.size
            ),
            format!("pass --size between 1 and {MAX_POOL_SIZE}"),
        ));
    }
    let last = member_name(name, request.size);
    if last.len() > MAX_MEMBER_NAME {
        return Err(Error::invalid(
            format!(
                "member name \"{last}\" would be {} characters long; VM names may have at most \
                 {MAX_MEMBER_NAME}",
                last.len()
            ),
            format!(
                "shorten the pool name to at most {} characters",
                MAX_MEMBER_NAME - (last.len() - name.len())
            ),
        ));
    }
    validate::namespace(&request.namespace)?;
    validate::vm_name(&request.golden)?;
    validate::clone_timeout(request.options.timeout)?;
    Ok(member_names(name, request.size))
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

/// `3s`, `1m30s`, `2m`, `750ms`: a duration as a person writes it.
pub fn format_duration(d: Duration) -> String {
    let millis = d.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let sub = millis % 1000;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || sub > 0 || out.is_empty() {
        if sub > 0 && h == 0 && m == 0 {
            out.push_str(&format!(
                "{s}.{}s",
                format!("{sub:03}").trim_end_matches('0')
            ));
        } else {
            out.push_str(&format!("{s}s"));
        }
    }
    out
}

/// The VirtualMachineClone API the cluster serves, found by discovery.
#[derive(Debug, Clone)]
pub struct CloneApi {
    /// The resource at the chosen version.
    pub resource: ApiResource,
    /// The chosen version (`v1beta1` or `v1alpha1`).
    pub version: String,
}

/// Finds the VirtualMachineClone API by discovery (group `clone.kubevirt.io`, version by
/// [`choose_clone_version`]).
///
/// Errors: [`Error::Rejected`] (`NotFound`) when the group or kind is not served (KubeVirt
/// missing, or too old); otherwise the discovery request's error.
pub async fn discover_clone_api(client: &Client) -> Result<CloneApi> {
    let missing = || {
        Error::rejected(
            ErrorKind::NotFound,
            "this cluster serves no VirtualMachineClone API (clone.kubevirt.io v1beta1 or \
             v1alpha1): KubeVirt is not installed, or too old to clone VMs",
            "install KubeVirt 1.0 or newer (kubectl get crd virtualmachineclones.clone.kubevirt.io \
             shows whether it is there), or pick the context of a cluster that has it",
        )
    };
    let group = match kube::discovery::group(client, CLONE_GROUP).await {
        Ok(group) => group,
        Err(kube::Error::Discovery(_)) => return Err(missing()),
        Err(e) => {
            return Err(Error::kube(
                format!("discover the {CLONE_KIND} API ({CLONE_GROUP})"),
                e,
            ));
        }
    };
    let version = choose_clone_version(group.versions()).ok_or_else(missing)?;
    let resource = group
        .versioned_resources(version)
        .into_iter()
        .map(|(resource, _)| resource)
        .find(|r| r.kind == CLONE_KIND)
        .ok_or_else(missing)?;
    Ok(CloneApi {
        resource,
        version: version.to_owned(),
    })
}

/// Refuses a namespace that does not exist. A user who may not read namespaces (403) gets no
/// verdict here; the golden VM lookup then speaks for the namespace.
async fn check_namespace(client: &Client, namespace: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.get_opt(namespace).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Error::rejected(
            ErrorKind::NotFound,
            format!("namespace \"{namespace}\" does not exist"),
            "pass -n with the namespace where the golden VM lives (kubectl get vm -A lists them)",
        )),
        Err(e) if is_status(&e, 403) => Ok(()),
        Err(e) => Err(Error::kube(format!("read namespace \"{namespace}\""), e)),
    }
}

/// Refuses a golden VM that is itself a pool member: an assigned one always (its disk is a
/// user's), an unassigned one unless `allow_member`.
async fn check_golden_membership(
    client: &Client,
    golden: &VirtualMachine,
    namespace: &str,
    allow_member: bool,
) -> Result<()> {
    let Some(pool) = golden.labels().get(POOL_LABEL) else {
        return Ok(());
    };
    let name = golden.name_any();
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases
        .get_opt(&lease_name(&name))
        .await
        .map_err(|e| Error::kube(format!("read Lease {}", lease_name(&name)), e))?;
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
    if !allow_member {
        return Err(Error::rejected(
            ErrorKind::Invalid,
            format!(
                "golden VM \"{name}\" is a member of pool \"{pool}\": pool members are desktops, \
                 not golden images"
            ),
            "clone from a golden VM built for the purpose; to clone this unassigned member \
             anyway, pass --from-member",
        ));
    }
    Ok(())
}

/// Reads the golden VM from `namespace` only (SPEC step 2: no search of other namespaces).
async fn golden_vm(
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

fn status_of(obj: &DynamicObject) -> Value {
    obj.data.get("status").cloned().unwrap_or(Value::Null)
}

fn phase_of(obj: &DynamicObject) -> String {
    status_of(obj)
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn target_of(obj: &DynamicObject) -> Option<String> {
    obj.data
        .pointer("/spec/target/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The clone's condition message: the Ready condition's message (else reason), else the
/// Progressing condition's. KubeVirt puts the cause of a pending or failed clone there.
fn condition_text(status: &Value) -> String {
    let conditions = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for kind in ["Ready", "Progressing"] {
        let Some(c) = conditions.iter().find(|c| c["type"] == kind) else {
            continue;
        };
        for field in ["message", "reason"] {
            if let Some(text) = c
                .get(field)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                return text.to_owned();
            }
        }
    }
    String::new()
}

/// `in phase X`, or `with no phase yet` before KubeVirt has set one.
fn in_phase(phase: &str) -> String {
    if phase.is_empty() {
        "with no phase yet".to_owned()
    } else {
        format!("in phase {phase}")
    }
}

/// What the watch last said about one clone object.
#[derive(Debug, Clone, Default)]
struct CloneObs {
    /// The watch has seen the object.
    seen: bool,
    /// The watch saw it deleted.
    gone: bool,
    /// `status.phase` ("" before KubeVirt sets one).
    phase: String,
    /// [`condition_text`].
    message: String,
}

fn observe(obj: &DynamicObject) -> CloneObs {
    CloneObs {
        seen: true,
        gone: false,
        phase: phase_of(obj),
        message: condition_text(&status_of(obj)),
    }
}

/// The objects that make a pool's names taken.
struct Namespaced {
    namespace: String,
    pool: String,
    members: Vec<String>,
    vms: Api<VirtualMachine>,
    clones: Api<DynamicObject>,
    leases: Api<Lease>,
}

impl Namespaced {
    /// Refuses (naming the object) if the pool exists, a member name is taken, a clone object
    /// other than those of run `own_run` targets a member, or a member's claim Lease exists.
    async fn check_free(&self, own_run: Option<&str>) -> Result<()> {
        let ns = &self.namespace;
        let pool = &self.pool;
        let delete_hint = format!("corral-vdi pool delete {pool} -n {ns}");

        let labelled = self
            .vms
            .list_metadata(&ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
            .await
            .map_err(|e| {
                Error::kube(
                    format!("list VirtualMachines of pool \"{pool}\" in namespace \"{ns}\""),
                    e,
                )
            })?;
        if !labelled.items.is_empty() {
            let mut names: Vec<String> = labelled.items.iter().map(|m| m.name_any()).collect();
            names.sort();
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "pool \"{pool}\" already exists in namespace \"{ns}\" ({} member{}: {})",
                    names.len(),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ),
                format!("pick another pool name, or delete this pool first ({delete_hint})"),
            ));
        }

        let members: BTreeSet<&str> = self.members.iter().map(String::as_str).collect();
        let all = self
            .vms
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list VirtualMachines in namespace \"{ns}\""), e))?;
        let mut taken: Vec<String> = all
            .items
            .iter()
            .map(|m| m.name_any())
            .filter(|n| members.contains(n.as_str()))
            .collect();
        if !taken.is_empty() {
            taken.sort();
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "VirtualMachine \"{}\" already exists in namespace \"{ns}\" but is no member of \
                     pool \"{pool}\": the member names {pool}-1 … {} must be free",
                    taken.join("\", \""),
                    self.members.last().map(String::as_str).unwrap_or_default()
                ),
                "pick another pool name, or rename or delete those VMs",
            ));
        }

        let clones = self
            .clones
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list {CLONE_KIND}s in namespace \"{ns}\""), e))?;
        for clone in &clones.items {
            if own_run.is_some() && clone.labels().get(RUN_LABEL).map(String::as_str) == own_run {
                continue;
            }
            let name = clone.name_any();
            let target = target_of(clone);
            let member = target
                .as_deref()
                .filter(|t| members.contains(t))
                .or_else(|| {
                    name.strip_prefix(CLONE_PREFIX)
                        .filter(|m| members.contains(m))
                });
            let ours = clone.labels().get(POOL_LABEL) == Some(pool);
            if member.is_none() && !ours {
                continue;
            }
            let what = match member {
                Some(m) => format!("targets member \"{m}\""),
                None => format!("belongs to pool \"{pool}\""),
            };
            let phase = phase_of(clone);
            if matches!(phase.as_str(), "Succeeded" | "Failed") {
                // Finished, and its target is gone (a member-named VM was refused above).
                return Err(Error::rejected(
                    ErrorKind::Conflict,
                    format!(
                        "{CLONE_KIND} \"{name}\" in namespace \"{ns}\" {what} and is {}, but no \
                         such VM exists: it is debris of an earlier pool \"{pool}\" (the `corral \
                         vdi` Go CLI never deletes its clone objects, and an interrupted create \
                         can leave one)",
                        in_phase(&phase)
                    ),
                    format!(
                        "remove the debris with `{delete_hint}` (it deletes clone objects that \
                         target the pool's member names), then create the pool again"
                    ),
                ));
            }
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "{CLONE_KIND} \"{name}\" already exists in namespace \"{ns}\" and {what} \
                     ({}): another create of this pool is in progress, or an aborted one left it \
                     behind",
                    in_phase(&phase)
                ),
                format!(
                    "wait for the other create to finish (kubectl get virtualmachineclone -n {ns}); \
                     if none is running, remove the leftovers with `{delete_hint}` and try again"
                ),
            ));
        }

        let leases = self
            .leases
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list Leases in namespace \"{ns}\""), e))?;
        let wanted: BTreeSet<String> = self.members.iter().map(|m| lease_name(m)).collect();
        if let Some(lease) = leases
            .items
            .iter()
            .map(|l| l.name_any())
            .find(|n| wanted.contains(n))
        {
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "claim Lease \"{lease}\" already exists in namespace \"{ns}\": it is left over \
                     from an earlier pool \"{pool}\", and would make a new member look claimed"
                ),
                format!(
                    "remove the leftovers with `{delete_hint}` (or kubectl delete lease -n {ns} \
                     {lease}) and try again"
                ),
            ));
        }
        Ok(())
    }
}

/// A clone object this run created.
#[derive(Debug, Clone)]
struct CreatedClone {
    name: String,
    uid: Option<String>,
}

/// How waiting for one clone ended.
enum Waited {
    Succeeded,
    Failed(CloneObs),
    TimedOut(CloneObs),
    Vanished(CloneObs),
    Cancelled(CloneObs),
}

/// How one member ended.
struct Outcome {
    member: String,
    failure: Option<MemberFailure>,
    leftovers: Vec<String>,
    warnings: Vec<String>,
}

/// Everything the member tasks of one create run share.
struct Run<'a, P> {
    scope: Namespaced,
    golden: String,
    run_id: String,
    clone_api: ApiResource,
    timeout: Duration,
    api_permits: Semaphore,
    clone_slots: Semaphore,
    bounded: bool,
    started: Instant,
    progress: &'a P,
    statuses: HashMap<String, watch::Receiver<CloneObs>>,
    watch_error: Arc<Mutex<Option<String>>>,
    events: Api<KubeEvent>,
    cancel: Option<CancelHandle>,
}

impl<P: Fn(CreateProgress) + Send + Sync> Run<'_, P> {
    fn report(
        &self,
        member: &str,
        step: CreateStep,
        obs: Option<&CloneObs>,
        error: Option<String>,
    ) {
        let phase = obs.map(|o| o.phase.clone()).filter(|p| !p.is_empty());
        let message = obs.map(|o| o.message.clone()).filter(|m| !m.is_empty());
        let elapsed = u32::try_from(self.started.elapsed().as_millis()).unwrap_or(u32::MAX);
        (self.progress)(CreateProgress::Member(MemberProgress {
            member: member.to_owned(),
            clone: clone_name(member),
            step,
            phase,
            message,
            done: matches!(step, CreateStep::Done | CreateStep::Failed),
            error,
            elapsed_ms: elapsed,
        }));
    }

    fn clone_object(&self, member: &str) -> DynamicObject {
        let mut obj =
            DynamicObject::new(&clone_name(member), &self.clone_api).within(&self.scope.namespace);
        obj.metadata.labels = Some(BTreeMap::from([
            (POOL_LABEL.to_owned(), self.scope.pool.clone()),
            (MEMBER_LABEL.to_owned(), member.to_owned()),
            (RUN_LABEL.to_owned(), self.run_id.clone()),
        ]));
        obj.data = json!({
            "spec": {
                "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": self.golden },
                "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": member },
                "labelFilters": CLONE_FILTERS,
                "annotationFilters": CLONE_FILTERS,
            }
        });
        obj
    }

    async fn create_clone(&self, member: &str) -> std::result::Result<CreatedClone, kube::Error> {
        let _permit = self.api_permits.acquire().await;
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let created = self
            .scope
            .clones
            .create(&params, &self.clone_object(member))
            .await?;
        Ok(CreatedClone {
            name: created.name_any(),
            uid: created.uid(),
        })
    }

    /// Creates (unless `pre` is the member's clone already), waits, then labels or cleans up.
    async fn member(&self, member: String, pre: Option<CreatedClone>) -> Outcome {
        let clone = clone_name(&member);
        if self.bounded {
            self.report(&member, CreateStep::Queued, None, None);
        }
        let _slot = self.clone_slots.acquire().await;
        if pre.is_none() && self.cancel.as_ref().is_some_and(CancelHandle::is_cancelled) {
            return self.failed(
                &member,
                "cancelled before its clone was created".into(),
                false,
                Vec::new(),
            );
        }
        let created = match pre {
            Some(created) => created,
            None => match self.create_clone(&member).await {
                Ok(created) => created,
                Err(e) => {
                    let why = if is_status(&e, 409) {
                        format!(
                            "{CLONE_KIND} \"{clone}\" was created by someone else meanwhile; it was \
                             left untouched"
                        )
                    } else {
                        format!(
                            "could not create {CLONE_KIND} \"{clone}\": {}",
                            describe(&e)
                        )
                    };
                    return self.failed(&member, why, false, Vec::new());
                }
            },
        };
        self.report(&member, CreateStep::CloneCreated, None, None);

        match self.wait_clone(&member, &clone).await {
            Waited::Succeeded => self.finish(&member, &created).await,
            Waited::Failed(obs) => {
                let why = format!(
                    "{CLONE_KIND} \"{clone}\" failed: {}",
                    if obs.message.is_empty() {
                        "KubeVirt gave no reason"
                    } else {
                        &obs.message
                    }
                );
                // Reported at once; the cleanup follows.
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, false, leftovers)
            }
            Waited::TimedOut(obs) => {
                let mut why = format!(
                    "timed out after {} waiting for {CLONE_KIND} \"{clone}\" to produce the VM: it is \
                     still {}",
                    format_duration(self.timeout),
                    in_phase(&obs.phase)
                );
                if !obs.message.is_empty() {
                    why.push_str(&format!(" ({})", obs.message));
                }
                if let Some(event) = self.last_event(&clone).await {
                    why.push_str(&format!("; last event: {event}"));
                }
                if let Some(err) = self.watch_error.lock().ok().and_then(|e| e.clone()) {
                    why.push_str(&format!("; watching clones failed: {err}"));
                }
                why.push_str(&format!(
                    "; see kubectl get virtualmachineclone -n {} {clone} (the clone object was \
                     deleted so that it cannot produce an unlabelled VM later)",
                    self.scope.namespace
                ));
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, true, leftovers)
            }
            Waited::Cancelled(obs) => {
                let why = format!(
                    "cancelled while waiting for {CLONE_KIND} \"{clone}\" ({}); the clone object \
                     was deleted",
                    in_phase(&obs.phase)
                );
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, false, leftovers)
            }
            Waited::Vanished(obs) => {
                let why = format!(
                    "{CLONE_KIND} \"{clone}\" was deleted by someone else {}",
                    in_phase(&obs.phase)
                );
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, false, leftovers)
            }
        }
    }

    fn failed(
        &self,
        member: &str,
        why: String,
        timed_out: bool,
        leftovers: Vec<String>,
    ) -> Outcome {
        self.report(member, CreateStep::Failed, None, Some(why.clone()));
        self.outcome(member, why, timed_out, leftovers)
    }

    fn outcome(
        &self,
        member: &str,
        message: String,
        timed_out: bool,
        leftovers: Vec<String>,
    ) -> Outcome {
        Outcome {
            member: member.to_owned(),
            failure: Some(MemberFailure {
                member: member.to_owned(),
                message,
                timed_out,
            }),
            leftovers,
            warnings: Vec::new(),
        }
    }

    /// Follows the clone through the shared watch until it succeeds, fails, vanishes or runs
    /// out of time, reporting each new phase or condition message.
    async fn wait_clone(&self, member: &str, clone: &str) -> Waited {
        let Some(rx) = self.statuses.get(clone) else {
            return Waited::TimedOut(CloneObs::default());
        };
        let mut rx = rx.clone();
        let deadline = Instant::now() + self.timeout;
        let mut shown: Option<(String, String)> = None;
        loop {
            let obs = rx.borrow_and_update().clone();
            if obs.gone {
                return Waited::Vanished(obs);
            }
            if obs.seen {
                let key = (obs.phase.clone(), obs.message.clone());
                if shown.as_ref() != Some(&key) {
                    self.report(member, CreateStep::Cloning, Some(&obs), None);
                    shown = Some(key);
                }
                match obs.phase.as_str() {
                    "Succeeded" => return Waited::Succeeded,
                    "Failed" => return Waited::Failed(obs),
                    _ => {}
                }
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The watch ended (it does not, short of an abort): wait out the time.
                        tokio::time::sleep_until(deadline).await;
                        return Waited::TimedOut(rx.borrow().clone());
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    return Waited::TimedOut(rx.borrow().clone());
                }
                () = cancelled(self.cancel.as_ref()) => {
                    return Waited::Cancelled(rx.borrow().clone());
                }
            }
        }
    }

    /// The newest Event about the clone object (warnings first), as `Reason: message`.
    async fn last_event(&self, clone: &str) -> Option<String> {
        let params = ListParams::default().fields(&format!("involvedObject.name={clone}"));
        let events = self.events.list(&params).await.ok()?.items;
        let when = |e: &KubeEvent| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(e.event_time.as_ref().map(|t| t.0))
                .unwrap_or(Timestamp::UNIX_EPOCH)
        };
        let newest = events
            .iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .max_by_key(|e| when(e))
            .or_else(|| events.iter().max_by_key(|e| when(e)))?;
        Some(format!(
            "{}: {}",
            newest.reason.as_deref().unwrap_or("(no reason)"),
            newest.message.as_deref().unwrap_or("")
        ))
    }

    /// The clone succeeded: label its VM, make sure it is halted, remove the clone object.
    async fn finish(&self, member: &str, created: &CreatedClone) -> Outcome {
        self.report(member, CreateStep::Labelling, None, None);
        let ns = &self.scope.namespace;
        let vm = {
            let _permit = self.api_permits.acquire().await;
            self.scope.vms.get_opt(member).await
        };
        let vm = match vm {
            Ok(Some(vm)) => vm,
            Ok(None) => {
                let leftovers = self.clean_up(member, created).await;
                let why = format!(
                    "{CLONE_KIND} \"{}\" succeeded but VirtualMachine \"{member}\" does not exist \
                     (deleted by someone else?)",
                    created.name
                );
                return self.failed(member, why, false, leftovers);
            }
            Err(e) => {
                let leftovers = self.clean_up(member, created).await;
                let why = format!(
                    "could not read the new VirtualMachine \"{member}\": {}",
                    describe(&e)
                );
                return self.failed(member, why, false, leftovers);
            }
        };

        let label = json!({ "metadata": { "labels": { POOL_LABEL: self.scope.pool } } });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let labelled = {
            let _permit = self.api_permits.acquire().await;
            self.scope
                .vms
                .patch(member, &params, &Patch::Merge(&label))
                .await
        };
        if let Err(e) = labelled {
            // No half-labelled member: the unlabelled VM goes, or is reported exactly.
            let mut leftovers = self.delete_clone(created).await;
            let mut why = format!(
                "VirtualMachine \"{member}\" was cloned but could not be labelled: {}",
                describe(&e)
            );
            match self.delete_vm(member, vm.uid()).await {
                Ok(()) => why.push_str("; the unlabelled VM was deleted"),
                Err(del) => {
                    why.push_str("; the unlabelled VM could not be deleted either");
                    leftovers.push(format!(
                        "VirtualMachine {ns}/{member} exists without the pool label (delete refused: \
                         {}); remove it with kubectl delete vm -n {ns} {member}",
                        describe(&del)
                    ));
                }
            }
            return self.failed(member, why, false, leftovers);
        }

        let mut warnings = Vec::new();
        let halted = vm.spec.run_strategy.as_deref() == Some("Halted")
            || (vm.spec.run_strategy.is_none() && vm.spec.running != Some(true));
        if !halted {
            // KubeVirt creates clone targets halted; make sure of it without touching more.
            let halt = json!({ "spec": { "runStrategy": "Halted", "running": null } });
            let result = {
                let _permit = self.api_permits.acquire().await;
                self.scope
                    .vms
                    .patch(member, &params, &Patch::Merge(&halt))
                    .await
            };
            if let Err(e) = result {
                warnings.push(format!(
                    "member \"{member}\" could not be set to runStrategy Halted: {}; stop it with \
                     virtctl stop {member} -n {ns}",
                    describe(&e)
                ));
            }
        }
        for leftover in self.delete_clone(created).await {
            warnings.push(format!("finished {leftover}"));
        }
        self.report(member, CreateStep::Done, None, None);
        Outcome {
            member: member.to_owned(),
            failure: None,
            leftovers: Vec::new(),
            warnings,
        }
    }

    /// Deletes this run's clone object (only if it is still the one created: uid
    /// precondition); returns what could not be removed.
    async fn delete_clone(&self, created: &CreatedClone) -> Vec<String> {
        let ns = &self.scope.namespace;
        let params = DeleteParams {
            preconditions: created.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        let result = {
            let _permit = self.api_permits.acquire().await;
            self.scope.clones.delete(&created.name, &params).await
        };
        match result {
            Ok(_) => Vec::new(),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Vec::new(),
            Err(e) => vec![format!(
                "{CLONE_KIND} {ns}/{} could not be removed ({}); remove it with kubectl delete \
                 virtualmachineclone -n {ns} {}",
                created.name,
                describe(&e),
                created.name
            )],
        }
    }

    async fn delete_vm(
        &self,
        member: &str,
        uid: Option<String>,
    ) -> std::result::Result<(), kube::Error> {
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        let _permit = self.api_permits.acquire().await;
        match self.scope.vms.delete(member, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// After a member failed: delete its clone object (so it cannot produce a VM later), then a
    /// VM it produced anyway. The pool was checked free after this run took its lock, so a VM
    /// with a member's name whose clone this run created is this run's. Returns what could not
    /// be removed.
    async fn clean_up(&self, member: &str, created: &CreatedClone) -> Vec<String> {
        let ns = &self.scope.namespace;
        let mut leftovers = self.delete_clone(created).await;
        if !leftovers.is_empty() {
            leftovers.push(format!(
                "the clone object above may still create VirtualMachine {ns}/{member}; if it \
                 does, remove it with kubectl delete vm -n {ns} {member}"
            ));
        }
        // A controller that read the clone before it was deleted may still create the VM.
        for pass in 0..2 {
            if pass == 1 {
                tokio::time::sleep(CLEANUP_GRACE).await;
            }
            let vm = {
                let _permit = self.api_permits.acquire().await;
                self.scope.vms.get_opt(member).await
            };
            match vm {
                Ok(Some(vm)) => {
                    if let Err(e) = self.delete_vm(member, vm.uid()).await {
                        leftovers.push(format!(
                            "VirtualMachine {ns}/{member} exists without the pool label (delete \
                             refused: {}); remove it with kubectl delete vm -n {ns} {member}",
                            describe(&e)
                        ));
                        break;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    leftovers.push(format!(
                        "could not check whether VirtualMachine {ns}/{member} was created ({}); \
                         check with kubectl get vm -n {ns} {member}",
                        describe(&e)
                    ));
                    break;
                }
            }
        }
        leftovers
    }
}

/// A run id: 16 hex digits, random per run (a label value).
fn new_run_id() -> String {
    let seed = (Timestamp::now().as_nanosecond(), std::process::id());
    format!("{:016x}", RandomState::new().hash_one(seed))
}

/// Keeps the watch of this run's clone objects running; aborts it when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the clone objects labelled with this run's id and hands each one's state to the
/// member waiting for it.
async fn dispatch(
    api: Api<DynamicObject>,
    run_id: String,
    senders: HashMap<String, watch::Sender<CloneObs>>,
    watch_error: Arc<Mutex<Option<String>>>,
) {
    let config = watcher::Config::default().labels(&format!("{RUN_LABEL}={run_id}"));
    let mut stream = pin!(watcher::watcher(api, config).default_backoff());
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
                if let Some(tx) = senders.get(&obj.name_any()) {
                    tx.send_replace(observe(&obj));
                }
                if let Ok(mut err) = watch_error.lock() {
                    *err = None;
                }
            }
            Ok(Event::Delete(obj)) => {
                if let Some(tx) = senders.get(&obj.name_any()) {
                    let mut obs = observe(&obj);
                    obs.gone = true;
                    tx.send_replace(obs);
                }
            }
            Ok(Event::Init | Event::InitDone) => {}
            Err(e) => {
                tracing::debug!(error = %e, "watching VirtualMachineClones failed; retrying");
                if let Ok(mut err) = watch_error.lock() {
                    *err = Some(e.to_string());
                }
            }
        }
    }
}

/// Creates a pool: clones `request.size` members of the golden VM, labels them, and reports
/// each member's progress to `progress` as it happens (see the module documentation for the
/// steps, and [`CreateProgress`] for the events).
///
/// `progress` is called from the calling task, one event at a time; an mpsc sender fits
/// (`|e| { let _ = tx.send(e); }`).
///
/// Errors:
/// - [`Error::Invalid`]: bad input, refused before any request ([`validate_create`]);
/// - [`Error::Rejected`], nothing created: the namespace or golden VM does not exist
///   (`NotFound`), the golden VM cannot be cloned safely (`Invalid`, see [`golden_problems`]),
///   the pool or a member name or a claim Lease exists, a clone object targets a member, or
///   another create of the same pool got there first (`Conflict`; the message says
///   "already exists"); no VirtualMachineClone API (`NotFound`);
/// - [`Error::Kube`]: a request failed before anything was created (403, unreachable);
/// - [`Error::PoolIncomplete`]: some members failed, timed out or were cancelled
///   ([`CreateOptions::cancel`]); it lists the members that exist (labelled), each failure with
///   its clone's phase and condition message, and anything left behind that could not be
///   removed.
pub async fn create_pool<P>(
    client: &Client,
    request: &CreatePool,
    progress: P,
) -> Result<PoolCreated>
where
    P: Fn(CreateProgress) + Send + Sync,
{
    let members = validate_create(request)?;
    let started = Instant::now();
    let ns = request.namespace.clone();
    let pool = request.name.clone();

    check_namespace(client, &ns).await?;
    let clone_api = discover_clone_api(client).await?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns);
    let golden = golden_vm(&vms, &ns, &request.golden).await?;
    check_golden_membership(client, &golden, &ns, request.options.allow_member).await?;
    let problems = golden_problems(&golden, &ns, request.options.allow_running);
    if !problems.is_empty() {
        let causes: Vec<&str> = problems.iter().map(|p| p.cause.as_str()).collect();
        let fixes: Vec<&str> = problems.iter().map(|p| p.fix.as_str()).collect();
        return Err(Error::rejected(
            ErrorKind::Invalid,
            causes.join("; also, "),
            fixes.join("; "),
        ));
    }
    // SPEC step 4, capacity admission for GPUs and host devices, belongs here (before any
    // mutation) once it exists.

    let scope = Namespaced {
        namespace: ns.clone(),
        pool: pool.clone(),
        members: members.clone(),
        vms,
        clones: Api::namespaced_with(client.clone(), &ns, &clone_api.resource),
        leases: Api::namespaced(client.clone(), &ns),
    };
    scope.check_free(None).await?;

    let mut senders = HashMap::new();
    let mut statuses = HashMap::new();
    for member in &members {
        let (tx, rx) = watch::channel(CloneObs::default());
        senders.insert(clone_name(member), tx);
        statuses.insert(clone_name(member), rx);
    }
    let slots = request
        .options
        .clone_concurrency
        .unwrap_or(members.len())
        .clamp(1, members.len());
    let run = Run {
        golden: request.golden.clone(),
        run_id: new_run_id(),
        clone_api: clone_api.resource.clone(),
        timeout: request.options.timeout,
        api_permits: Semaphore::new(request.options.api_concurrency.max(1)),
        clone_slots: Semaphore::new(slots),
        bounded: slots < members.len(),
        started,
        progress: &progress,
        statuses,
        watch_error: Arc::new(Mutex::new(None)),
        events: Api::namespaced(client.clone(), &ns),
        cancel: request.options.cancel.clone(),
        scope,
    };

    if request
        .options
        .cancel
        .as_ref()
        .is_some_and(CancelHandle::is_cancelled)
    {
        return Err(Error::rejected(
            ErrorKind::Other,
            format!("pool create of \"{pool}\" was cancelled before anything was created"),
            "run it again when you are ready",
        ));
    }
    // The first member's clone is the lock: of two racing creates, one gets AlreadyExists.
    let first = &members[0];
    let lock = match run.create_clone(first).await {
        Ok(lock) => lock,
        Err(e) if is_status(&e, 409) => {
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "{CLONE_KIND} \"{}\" already exists in namespace \"{ns}\": another create of \
                     pool \"{pool}\" got there first",
                    clone_name(first)
                ),
                format!(
                    "wait for it to finish and look with corral-vdi pool list -n {ns}; nothing was \
                     created by this run"
                ),
            ));
        }
        Err(e) => {
            return Err(Error::kube(
                format!(
                    "create {CLONE_KIND} \"{}\" in namespace \"{ns}\"",
                    clone_name(first)
                ),
                e,
            ));
        }
    };
    // Holding the lock, check again: a create that finished meanwhile, or debris, shows now.
    if let Err(e) = run.scope.check_free(Some(&run.run_id)).await {
        let _ = run.delete_clone(&lock).await;
        return Err(e);
    }

    progress(CreateProgress::Started(CreateStarted {
        namespace: ns.clone(),
        pool: pool.clone(),
        golden: request.golden.clone(),
        members: members.clone(),
        clone_api_version: clone_api.version.clone(),
        run_id: run.run_id.clone(),
    }));
    let _watch = AbortOnDrop(tokio::spawn(dispatch(
        run.scope.clones.clone(),
        run.run_id.clone(),
        senders,
        run.watch_error.clone(),
    )));

    let mut lock = Some(lock);
    let outcomes = futures::future::join_all(members.iter().map(|m| {
        let pre = if m == first { lock.take() } else { None };
        run.member(m.clone(), pre)
    }))
    .await;

    let mut created = Vec::new();
    let mut failed = Vec::new();
    let mut leftovers = Vec::new();
    let mut warnings = Vec::new();
    for outcome in outcomes {
        match outcome.failure {
            None => created.push(outcome.member),
            Some(failure) => failed.push(failure),
        }
        leftovers.extend(outcome.leftovers);
        warnings.extend(outcome.warnings);
    }
    if failed.is_empty() {
        return Ok(PoolCreated {
            namespace: ns,
            name: pool,
            golden: request.golden.clone(),
            members: created,
            clone_api_version: clone_api.version,
            elapsed_ms: u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX),
            warnings,
        });
    }
    leftovers.extend(warnings);
    Err(Error::PoolIncomplete(Box::new(PoolCreateFailure {
        namespace: ns,
        pool,
        requested: request.size,
        created,
        failed,
        leftovers,
    })))
}

impl PoolCreateFailure {
    /// `Timeout` when a member ran out of time, else `Other`.
    pub fn kind(&self) -> ErrorKind {
        if self.failed.iter().any(|f| f.timed_out) {
            ErrorKind::Timeout
        } else {
            ErrorKind::Other
        }
    }

    /// How to clean up or carry on.
    pub fn suggestion(&self) -> String {
        let delete = format!("corral-vdi pool delete {} -n {}", self.pool, self.namespace);
        let mut text = if self.created.is_empty() && self.leftovers.is_empty() {
            "nothing was left behind: fix the cause above and run the same create again".to_owned()
        } else if self.created.is_empty() {
            format!(
                "remove what was left behind (listed above, or with `{delete}`), fix the cause and create again"
            )
        } else {
            format!(
                "the {} member(s) that exist form a usable pool; to start over, remove them with \
                 `{delete}`, fix the cause and create the pool again",
                self.created.len()
            )
        };
        if self.failed.iter().any(|f| f.timed_out) {
            text.push_str(&format!(
                "; a longer --timeout helps if the clones were only slow (kubectl get \
                 virtualmachineclone -n {} shows their phases)",
                self.namespace
            ));
        }
        text
    }
}

impl fmt::Display for PoolCreateFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pool, ns) = (&self.pool, &self.namespace);
        if self.created.is_empty() {
            write!(
                f,
                "pool \"{pool}\" in namespace \"{ns}\" was not created: no member was made"
            )?;
        } else {
            write!(
                f,
                "pool \"{pool}\" in namespace \"{ns}\" is incomplete: {} of {} members exist ({})",
                self.created.len(),
                self.requested,
                self.created.join(", ")
            )?;
        }
        for failure in &self.failed {
            write!(f, "; member \"{}\": {}", failure.member, failure.message)?;
        }
        if !self.leftovers.is_empty() {
            write!(f, "; left behind: {}", self.leftovers.join("; "))?;
        }
        Ok(())
    }
}

/// What to delete: `pool delete <name> [-n ns] [--force]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletePool {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub name: String,
    /// Delete assigned members too.
    pub force: bool,
}

/// Whether `name` is `<pool>-<n>` for a number n: a member name of `pool`.
fn is_member_name_of(name: &str, pool: &str) -> bool {
    name.strip_prefix(pool)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Why a member blocks a delete, or `None` if it may go: an assigned-to label, or an active
/// Lease (a claim in progress or stuck).
fn assignment(state: MemberState, holder: Option<&str>) -> Option<String> {
    let holder = holder.unwrap_or("unknown");
    match state {
        MemberState::Free | MemberState::FreeStaleLease => None,
        MemberState::Claiming => Some(format!(
            "claim in progress or stuck, Lease held by {holder}"
        )),
        MemberState::AssignedLegacy => Some(format!("assigned to {holder}, label only")),
        MemberState::Assigned => Some(format!("assigned to {holder}")),
        MemberState::AssignedLeaseExpired => Some(format!("assigned to {holder}, lease expired")),
        MemberState::Conflict => Some(format!(
            "in conflict: Lease held by {holder}, label naming someone else"
        )),
    }
}

/// Deletes a pool: its member VMs, their claim Leases (`corral-vdi-<member>`, and Leases
/// labelled with the pool), leftover clone objects (labelled with the pool, or targeting a
/// member name `<pool>-<n>`, as the Go CLI's `clone-<pool>-<n>-<time>` do) and VMs that this
/// pool's own clone objects produced but that never got the pool label. Clone objects go first, so none can make a new member meanwhile; Leases last, so no
/// one claims a member that is being deleted. Judged at the API server's time (`clock`).
///
/// Idempotent: with nothing left, it succeeds with an empty [`PoolDeleted`]. VMs already being
/// deleted are listed as deleted. It does not wait for VMs to be gone (KubeVirt first stops a
/// running VM).
///
/// Errors: [`Error::Invalid`] for a bad pool or namespace name (no request sent);
/// [`Error::Rejected`] (`Conflict`, nothing deleted) while a member is assigned (label) or
/// has an active Lease, naming each with its holder, unless `force`; [`Error::Kube`] when a
/// request fails (a later run finishes the job).
pub async fn delete_pool(
    client: &Client,
    request: &DeletePool,
    clock: &ServerClock,
) -> Result<PoolDeleted> {
    let (ns, pool) = (&request.namespace, &request.name);
    validate::pool_name(pool)?;
    validate::namespace(ns)?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut members = vms
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
        .await
        .map_err(|e| {
            Error::kube(
                format!("list VirtualMachines of pool \"{pool}\" in namespace \"{ns}\""),
                e,
            )
        })?
        .items;
    members.sort_by_cached_key(|vm| {
        let name = vm.name_any();
        let index = name
            .strip_prefix(&format!("{pool}-"))
            .and_then(|i| i.parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        (index, name)
    });
    let member_names: BTreeSet<String> = members.iter().map(|vm| vm.name_any()).collect();
    let all_leases = leases
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube(format!("list Leases in namespace \"{ns}\""), e))?
        .items;
    let lease_of: HashMap<String, &Lease> = all_leases.iter().map(|l| (l.name_any(), l)).collect();
    let doomed_leases: Vec<String> = all_leases
        .iter()
        .filter(|l| {
            l.labels().get(POOL_LABEL) == Some(pool)
                || crate::labels::member_of_lease(&l.name_any())
                    .is_some_and(|m| member_names.contains(m))
        })
        .map(|l| l.name_any())
        .collect();

    let now = clock.now();
    let mut blocked = Vec::new();
    let mut forced = Vec::new();
    for vm in &members {
        if vm.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = vm.name_any();
        let view = member_view(vm, lease_of.get(&lease_name(&name)).copied(), now);
        // Every state but free and free (stale lease) has the label or an active Lease.
        if let Some(why) = assignment(view.state, view.holder.as_deref()) {
            blocked.push(format!("{name} ({why})"));
            forced.push(format!(
                "{name} ({})",
                view.holder.as_deref().unwrap_or("unknown")
            ));
        }
    }
    if !blocked.is_empty() && !request.force {
        return Err(Error::rejected(
            ErrorKind::Conflict,
            format!(
                "pool \"{pool}\" in namespace \"{ns}\" has assigned members: {}",
                blocked.join(", ")
            ),
            format!(
                "unassign them first (corral-vdi unassign <member> -n {ns}), or pass --force to \
                 delete the pool with them"
            ),
        ));
    }

    // Leftover clone objects, so that none produces a member while the pool goes; what our own
    // clone objects produced without the pool label (an interrupted create) goes too.
    let mut clones_deleted = Vec::new();
    let mut produced = Vec::new();
    let clone_api = match discover_clone_api(client).await {
        Ok(api) => Some(api),
        Err(Error::Rejected { .. }) => None,
        Err(e) => return Err(e),
    };
    if let Some(clone_api) = clone_api {
        let clones: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &clone_api.resource);
        let list = clones
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list {CLONE_KIND}s in namespace \"{ns}\""), e))?;
        for clone in &list.items {
            let ours = clone.labels().get(POOL_LABEL) == Some(pool);
            let target = target_of(clone);
            let targets_member = target
                .as_deref()
                .is_some_and(|t| member_names.contains(t) || is_member_name_of(t, pool));
            if !(ours || targets_member) {
                continue;
            }
            let name = clone.name_any();
            match clones.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    clones_deleted.push(name);
                    if ours && let Some(target) = target {
                        produced.push(target);
                    }
                }
                Err(e) if is_status(&e, 404) => {}
                Err(e) => {
                    return Err(Error::kube(
                        format!(
                            "delete {CLONE_KIND} \"{name}\" in namespace \"{ns}\" (nothing else was deleted yet)"
                        ),
                        e,
                    ));
                }
            }
        }
    }

    let mut members_deleted = Vec::new();
    for vm in &members {
        let name = vm.name_any();
        if vm.metadata.deletion_timestamp.is_some() {
            members_deleted.push(name);
            continue;
        }
        match vms.delete(&name, &DeleteParams::default()).await {
            Ok(_) => members_deleted.push(name),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!(
                        "delete VirtualMachine \"{name}\" in namespace \"{ns}\" (deleted so far: {}; \
                         run the delete again to finish)",
                        if members_deleted.is_empty() {
                            "none".to_owned()
                        } else {
                            members_deleted.join(", ")
                        }
                    ),
                    e,
                ));
            }
        }
    }

    let mut unlabelled_deleted = Vec::new();
    for name in produced {
        if member_names.contains(&name) {
            continue;
        }
        let vm = vms.get_opt(&name).await.map_err(|e| {
            Error::kube(
                format!("read VirtualMachine \"{name}\" in namespace \"{ns}\""),
                e,
            )
        })?;
        let Some(vm) = vm.filter(|vm| !vm.labels().contains_key(POOL_LABEL)) else {
            continue;
        };
        let params = DeleteParams {
            preconditions: vm.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match vms.delete(&name, &params).await {
            Ok(_) => unlabelled_deleted.push(name),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!(
                        "delete VirtualMachine \"{name}\" in namespace \"{ns}\" (made by this pool's \
                         clone object, never labelled; run the delete again to finish)"
                    ),
                    e,
                ));
            }
        }
    }

    let mut leases_deleted = Vec::new();
    for name in doomed_leases {
        match leases.delete(&name, &DeleteParams::default()).await {
            Ok(_) => leases_deleted.push(name),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => {
                return Err(Error::kube(
                    format!(
                        "delete Lease \"{name}\" in namespace \"{ns}\" (the members are deleted; run \
                         the delete again to finish)"
                    ),
                    e,
                ));
            }
        }
    }

    Ok(PoolDeleted {
        namespace: ns.clone(),
        name: pool.clone(),
        members: members_deleted,
        leases: leases_deleted,
        clones: clones_deleted,
        unlabelled: unlabelled_deleted,
        forced: if request.force { forced } else { Vec::new() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{VirtualMachineSpec, VirtualMachineStatus};

    fn request(name: &str, size: u32) -> CreatePool {
        CreatePool {
            namespace: "corral-vms".into(),
            name: name.into(),
            golden: "golden-desktop".into(),
            size,
            options: CreateOptions::default(),
        }
    }

    /// The desktop app runs pool create in a Tauri command, which needs a `Send` future.
    #[allow(dead_code)]
    fn create_and_delete_futures_are_send(
        client: &Client,
        create: &CreatePool,
        delete: &DeletePool,
    ) {
        fn send<T: Send>(_: &T) {}
        send(&create_pool(client, create, |_| {}));
        send(&delete_pool(client, delete, &ServerClock::default()));
    }

    #[test]
    fn members_and_clones_are_named_after_the_pool() {
        assert_eq!(member_names("dev", 3), ["dev-1", "dev-2", "dev-3"]);
        assert_eq!(clone_name("dev-2"), "corral-vdi-clone-dev-2");
    }

    #[test]
    fn validation_names_the_value_and_the_fix() {
        assert_eq!(validate_create(&request("devpool", 3)).unwrap().len(), 3);
        for (name, size, needle) in [
            ("Dev_Pool", 3, "not a valid pool name"),
            ("-dev", 3, "not a valid pool name"),
            ("devpool", 0, "out of range"),
            ("devpool", MAX_POOL_SIZE + 1, "out of range"),
        ] {
            let err = validate_create(&request(name, size)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid);
            assert!(err.to_string().contains(needle), "{name}/{size}: {err}");
            assert!(err.suggestion().is_some());
        }
        // 61 characters + "-1" fits; + "-10" does not.
        let long = "a".repeat(61);
        assert!(validate_create(&request(&long, 9)).is_ok());
        let err = validate_create(&request(&long, 10)).unwrap_err();
        assert!(err.to_string().contains("64 characters"), "{err}");
        assert!(err.suggestion().unwrap().contains("at most 60"), "{err:?}");
        assert!(validate_create(&request("devpool", MAX_POOL_SIZE)).is_ok());

        let mut bad_ns = request("devpool", 1);
        bad_ns.namespace = "Bad NS".into();
        assert!(
            validate_create(&bad_ns)
                .unwrap_err()
                .to_string()
                .contains("namespace")
        );
        let mut zero = request("devpool", 1);
        zero.options.timeout = Duration::ZERO;
        assert!(validate_create(&zero).is_err());
    }

    #[tokio::test]
    async fn bad_input_is_refused_before_any_request() {
        // A client for a server that does not exist: any request would fail as Unreachable.
        let config = kube::Config::new("https://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let err = create_pool(&client, &request("Bad", 2), |_| {})
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        let delete = DeletePool {
            namespace: "corral-vms".into(),
            name: "Bad".into(),
            force: false,
        };
        let err = delete_pool(&client, &delete, &ServerClock::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    }

    #[test]
    fn clone_version_prefers_v1beta1() {
        assert_eq!(
            choose_clone_version(["v1beta1", "v1alpha1"]),
            Some("v1beta1")
        );
        assert_eq!(
            choose_clone_version(["v1alpha1", "v1beta1"]),
            Some("v1beta1")
        );
        assert_eq!(choose_clone_version(["v1alpha1"]), Some("v1alpha1"));
        assert_eq!(choose_clone_version(["v2"]), None);
        assert_eq!(choose_clone_version([]), None);
    }

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

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
    }

    #[test]
    fn a_partial_failure_says_which_members_exist() {
        let failure = PoolCreateFailure {
            namespace: "ns".into(),
            pool: "p".into(),
            requested: 3,
            created: vec!["p-1".into(), "p-3".into()],
            failed: vec![MemberFailure {
                member: "p-2".into(),
                message: "timed out".into(),
                timed_out: true,
            }],
            leftovers: Vec::new(),
        };
        let text = failure.to_string();
        assert!(text.contains("2 of 3 members exist (p-1, p-3)"), "{text}");
        assert!(text.contains("member \"p-2\": timed out"), "{text}");
        assert_eq!(failure.kind(), ErrorKind::Timeout);
        assert!(
            failure
                .suggestion()
                .contains("corral-vdi pool delete p -n ns")
        );
        let err = Error::PoolIncomplete(Box::new(failure));
        assert_eq!(err.kind(), ErrorKind::Timeout);
    }

    #[test]
    fn condition_text_prefers_ready_then_progressing() {
        let status = json!({ "conditions": [
            { "type": "Progressing", "status": "False", "reason": "Pending" },
            { "type": "Ready", "status": "False", "reason": "Virtual Machine volume rootdisk does not support snapshots" },
        ] });
        assert_eq!(
            condition_text(&status),
            "Virtual Machine volume rootdisk does not support snapshots"
        );
        assert_eq!(condition_text(&json!({})), "");
    }
}
