//! Pool create and delete (SPEC "Pool create", "GPU and host-device capacity admission",
//! "Pool list / delete", "Bad input and faults").
//!
//! **Create** follows the SPEC's steps in order, one file per step, and refuses everything it
//! can before it changes anything:
//! 1. input (pool name, size, namespace, timeout) is checked without a single request
//!    ([`validate_create`], in `create_input.rs`);
//! 2. the namespace must exist; the VirtualMachineClone API version is chosen by discovery
//!    (`clone.kubevirt.io`: `v1beta1`, else `v1alpha1`; `clone.rs`); the golden VM is looked
//!    up in the target namespace only, and refused if it is an assigned pool member, or if
//!    KubeVirt would fail its clones late: a PVC/DataVolume volume without snapshot support, a
//!    persistent TPM or EFI, or a VM that is not stopped (unless
//!    [`CreateOptions::allow_running`]) ([`golden_problems`], in `golden_vm.rs`);
//! 3. refused if the pool exists, a member name is taken, a clone object already targets a
//!    member (another create in progress, or debris of an aborted one), or a claim Lease of a
//!    member is left over (`free.rs`);
//! 4. capacity admission (`capacity.rs`, arithmetic in [`crate::capacity`]): when the golden VM
//!    asks for GPUs or host devices, the cluster must be able to place all `size` members now,
//!    each with all of its devices on one schedulable node; otherwise the create is refused
//!    with a per-node table of free versus needed. A golden VM without devices skips this step
//!    without a request. **Admission is a check, not a reservation**: nothing is held for the
//!    pool, and devices free now may be taken by other VMs before its members start (assign
//!    checks again for the member it starts);
//! 5. then one `VirtualMachineClone` per member, all in flight at once (API requests bounded by
//!    [`CreateOptions::api_concurrency`]), each waited for with its own timeout while its
//!    phase and condition message are reported ([`CreateProgress`]; `clone.rs`);
//! 6. each new VM gets the pool label and [`GOLDEN_ANNOTATION`] (one merge patch of those
//!    alone, with the creation mark where the clone could not write it); KubeVirt creates
//!    clone targets with `runStrategy: Halted`, and the clone's label filters keep the golden
//!    VM's `corral.dev/vdi-*` labels and annotations off the members, so they start stopped
//!    and unassigned;
//! 7. finished clone objects are removed; a clone that fails or stalls is deleted (so it cannot
//!    produce an unlabelled VM later), as is a VM it produced that could not be labelled; the
//!    error says exactly which members exist ([`PoolCreateFailure`], `failure.rs`);
//! 8. the golden VM is labelled [`crate::names::GOLDEN_IMAGE_LABEL`] (the guard then keeps it
//!    an administrator's).
//!
//! On a cluster with a broker, the front ends create through [`crate::managed::create`],
//! which adds the pool's DesktopPool and the broker's right to act in the namespace.
//!
//! Before a create, [`golden_candidates`] (`candidates.rs`) lists the VMs of a namespace a
//! pool could be made from, each with the problems `golden_vm.rs` would refuse it for, for the
//! app's "New pool" picker.
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
//! **Creation mark.** Each clone object (`v1beta1`) carries a patch that KubeVirt applies to
//! the VM it creates: the annotation [`CREATION_MARK_ANNOTATION`] = `<clone object>/<run id>`
//! ([`creation_mark_patch`]). The label step writes it too where it is missing (`v1alpha1`
//! has no patches), in the same patch as the pool label.
//!
//! **Delete** (`delete.rs`) removes only what it can prove this product made for the pool: the
//! members (the pool label), VMs without the label that carry the creation mark of the pool's
//! clone object naming them and were created after it (an interrupted create), the
//! `corral-vdi-<member>` Leases of those, and leftover clone objects; whatever else merely
//! claims to belong (a clone object naming an older VM, a Lease labelled with the pool under
//! another name) is listed as left alone. It refuses while any member is assigned (label or
//! active Lease) unless forced. Run twice, the second run finds nothing to delete and succeeds.

mod add;
mod candidates;
mod capacity;
mod clone;
mod clone_object;
mod create_input;
mod delete;
mod failure;
mod free;
mod golden_vm;
mod members;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::Api;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

pub use crate::names::{member_name, member_names};
pub use add::add_members;
pub use candidates::{GoldenCandidate, golden_candidates};
pub use capacity::capacity_preview;
pub use clone::format_duration;
pub use clone_object::{CloneApi, choose_clone_version, clone_name, discover_clone_api};
pub use create_input::{
    CreateInput, MAX_MANAGED_NAME, check_managed_name, check_namespace, create_problems,
    validate_create,
};
pub use delete::{DeletePool, PoolDeleted, delete_pool};
pub use golden_vm::{GoldenProblem, golden_problems, mark_golden_image};
pub(crate) use golden_vm::{adopted_golden, golden_vm_in};
pub use members::{list_member_metadata, list_members};

use crate::error::Result;
use crate::resources::VirtualMachine;

#[cfg(doc)]
use crate::error::{Error, PoolCreateFailure};

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
/// Annotation our clone step writes on every VM it makes, the *creation mark*:
/// [`creation_mark`] of the clone object that made it. Pool delete removes a VM without the
/// pool label only when it carries the mark of the clone object naming it, and was created
/// after that object (`delete.rs`). One of the `corral.dev/vdi-*` keys that [`CLONE_FILTERS`]
/// keep from being copied, so a golden VM's own mark never reaches its clones.
pub const CREATION_MARK_ANNOTATION: &str = "corral.dev/vdi-cloned-by";
/// Annotation the label step writes on every member it makes: the golden VM it was cloned
/// from, so that `pool adopt` can name it in the pool's DesktopPool
/// ([`crate::managed::ops::adopt`]). A `corral.dev/vdi-*` key, so [`CLONE_FILTERS`] keep it off
/// clones of a member.
pub const GOLDEN_ANNOTATION: &str = "corral.dev/vdi-golden";
/// Label and annotation filters of every clone: copy everything from the golden VM except
/// Corral's own keys (pool, assignment, claimed-at), so members start unassigned. KubeVirt's
/// filter rules: `*` only at the end, `!` only at the start.
pub const CLONE_FILTERS: [&str; 2] = ["*", "!corral.dev/vdi-*"];
/// Field manager of the patches pool create makes.
pub const FIELD_MANAGER: &str = "corral-vdi";

/// The creation mark of a VM made by clone object `clone` of the create run `run_id` (the
/// clone object's [`RUN_LABEL`], random per run): `<clone>/<run id>`, e.g.
/// `corral-vdi-clone-devpool-1/9f86d081884c7d65`.
pub fn creation_mark(clone: &str, run_id: &str) -> String {
    format!("{clone}/{run_id}")
}

/// The `spec.patches` entry of a VirtualMachineClone (`v1beta1`; `v1alpha1` has no patches)
/// that writes [`creation_mark`] onto the target VM as KubeVirt creates it: a JSON patch (RFC
/// 6902) `add` of [`CREATION_MARK_ANNOTATION`]. KubeVirt applies a clone's patches to the
/// target VM manifest before creating it, after its own filter patches, and the restore always
/// writes an annotation first, so `/metadata/annotations` exists (kubevirt
/// `pkg/storage/snapshot/restore.go`, `patchVM`, `setLastRestoreAnnotation`).
pub fn creation_mark_patch(clone: &str, run_id: &str) -> String {
    let path = format!(
        "/metadata/annotations/{}",
        CREATION_MARK_ANNOTATION
            .replace('~', "~0")
            .replace('/', "~1")
    );
    serde_json::json!({ "op": "add", "path": path, "value": creation_mark(clone, run_id) })
        .to_string()
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
pub(super) async fn cancelled(cancel: Option<&CancelHandle>) {
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

/// Creates a pool: clones `request.size` members of the golden VM, labels them, and reports
/// each member's progress to `progress` as it happens (see the module documentation for the
/// steps, and [`CreateProgress`] for the events).
///
/// `progress` is called from the calling task, one event at a time; an mpsc sender fits
/// (`|e| { let _ = tx.send(e); }`).
///
/// Errors:
/// - [`Error::Invalid`]: bad input, refused before any request ([`validate_create`]);
/// - [`Error::Rejected`], nothing created: RBAC does not let the caller create clone objects
///   in the namespace (`Forbidden`, [`crate::identity::require`]; a label patch that RBAC
///   refuses is found at the label step, and its VM removed, as any label failure); the namespace
///   or golden VM does not exist
///   (`NotFound`), the golden VM cannot be cloned safely (`Invalid`, see [`golden_problems`]),
///   the pool or a member name or a claim Lease exists, a clone object targets a member, or
///   another create of the same pool got there first (`Conflict`; the message says
///   "already exists"); no VirtualMachineClone API (`NotFound`); the golden VM asks for a
///   device the KubeVirt CR does not permit, or the schedulable nodes cannot hold all members
///   with their devices (`Refused`, the message ending in the per-node table; see
///   [`crate::capacity`]); the capacity cannot be judged because RBAC forbids reading nodes
///   or what holds their devices (`Forbidden`);
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
    // 1. Input, without a request.
    let members = validate_create(request)?;
    let started = Instant::now();
    let ns = &request.namespace;

    // 2. The namespace, the clone API, the golden VM.
    create_input::check_namespace(client, ns, create_input::GOLDEN_NAMESPACE_FIX).await?;
    crate::identity::require(
        client,
        ns,
        &[crate::identity::CREATE_CLONES],
        &format!("create pool \"{}\"", request.name),
    )
    .await?;
    let clone_api = discover_clone_api(client).await?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let golden = golden_vm::check_golden(client, &vms, request).await?;

    // 3. The pool's names are free.
    let scope = free::Namespaced {
        namespace: ns.clone(),
        pool: request.name.clone(),
        members,
        vms,
        clones: Api::namespaced_with(client.clone(), ns, &clone_api.resource),
        leases: Api::namespaced(client.clone(), ns),
        existing: false,
    };
    scope.check_free(None).await?;

    // 4. Capacity admission for GPUs and host devices: a check, not a reservation.
    capacity::admit(client, &golden, request).await?;

    // 5–7. The clones, the labels, the cleanup; what the golden VM's userData shows to every
    // reader of the namespace said first.
    let secrets = golden_vm::secrets_in_user_data(&golden);
    let mut created =
        clone::clone_members(client, request, scope, clone_api, started, progress).await?;
    created.warnings.splice(0..0, secrets);
    // 8. The golden VM is marked as one (the guard keeps it an administrator's).
    created
        .warnings
        .extend(golden_vm::mark_golden_image(client, ns, &golden).await);
    Ok(created)
}

/// Pool create's capacity admission (step 4) for `extra` more members of `pool`, cloned from
/// `golden` in `namespace` (a managed pool's growth, which the broker then clones). A check,
/// not a reservation.
///
/// Errors: those of [`golden_vm_in`]; the refusal pool create gives ([`Error::Rejected`]
/// `Refused`, with the per-node table) or its reads' errors.
pub(crate) async fn admit_growth(
    client: &Client,
    namespace: &str,
    pool: &str,
    golden: &str,
    extra: u32,
) -> Result<()> {
    let vm = golden_vm_in(client, namespace, golden).await?;
    let request = CreatePool {
        namespace: namespace.to_owned(),
        name: pool.to_owned(),
        golden: golden.to_owned(),
        size: extra,
        options: CreateOptions::default(),
    };
    capacity::admit(client, &vm, &request).await.map(|_| ())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::clock::ServerClock;
    use crate::error::ErrorKind;

    /// A request for `size` clones of golden-desktop in corral-vms, default options.
    pub(in crate::pool) fn request(name: &str, size: u32) -> CreatePool {
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
    fn the_creation_mark_patch_adds_the_annotation_with_its_slash_escaped() {
        let patch: serde_json::Value =
            serde_json::from_str(&creation_mark_patch("corral-vdi-clone-p-1", "00ff")).unwrap();
        assert_eq!(
            patch,
            serde_json::json!({
                "op": "add",
                "path": "/metadata/annotations/corral.dev~1vdi-cloned-by",
                "value": "corral-vdi-clone-p-1/00ff",
            })
        );
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
}

/// Where one member of a pool being created stands (SPEC "Pool create" steps 5–7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum CreateStep {
    /// Waiting for a free slot (only when the number of clones in flight is bounded).
    Queued,
    /// Its VirtualMachineClone was created; KubeVirt has not reported progress yet.
    CloneCreated,
    /// KubeVirt reports the clone's progress: see `phase` and `message`.
    Cloning,
    /// The target VM exists; the pool label is being applied.
    Labelling,
    /// Labelled, stopped and unassigned; its clone object was removed.
    Done,
    /// It failed: `error` says why, naming the clone object.
    Failed,
}

/// One progress report about one member of a pool being created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct MemberProgress {
    /// The member (VirtualMachine name), `<pool>-<i>`.
    pub member: String,
    /// Name of the member's VirtualMachineClone object.
    pub clone: String,
    /// Where the member stands.
    pub step: CreateStep,
    /// The clone's `status.phase` as KubeVirt reports it (`SnapshotInProgress`,
    /// `RestoreInProgress`, `CreatingTargetVM`, `Succeeded`, `Failed`); `null` before it has
    /// one.
    pub phase: Option<String>,
    /// The clone's condition message (Ready, else Progressing), if any.
    pub message: Option<String>,
    /// Whether this member is finished, one way or the other.
    pub done: bool,
    /// Why it failed (set only with step `failed`).
    pub error: Option<String>,
    /// Milliseconds since the pool create started.
    pub elapsed_ms: u32,
}

/// Progress of a pool create, in the order it happens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum CreateProgress {
    /// Every check passed; the members' clones are being created.
    Started(CreateStarted),
    /// A member moved on.
    Member(MemberProgress),
}

/// What a pool create is about to do, once every check has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct CreateStarted {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// The golden VM cloned.
    pub golden: String,
    /// The members to be made, `<pool>-1` … `<pool>-<N>`.
    pub members: Vec<String>,
    /// The VirtualMachineClone API version chosen by discovery (`v1beta1` or `v1alpha1`).
    pub clone_api_version: String,
    /// Identifies this run: the value of the `corral.dev/vdi-create-run` label on its clone
    /// objects.
    pub run_id: String,
}

/// A pool that was created whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolCreated {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub name: String,
    /// The golden VM the members were cloned from.
    pub golden: String,
    /// Members, in index order; each labelled, stopped and unassigned.
    pub members: Vec<String>,
    /// The VirtualMachineClone API version used.
    pub clone_api_version: String,
    /// Milliseconds the create took.
    pub elapsed_ms: u32,
    /// Things that did not stop the pool from being made but deserve a look (e.g. a finished
    /// clone object that could not be removed).
    pub warnings: Vec<String>,
    /// Who may claim from it, a sentence each ([`crate::entitlement::entitle`]'s; written by
    /// [`crate::managed::create::create`], empty where only the members were made).
    pub entitled: Vec<String>,
}
