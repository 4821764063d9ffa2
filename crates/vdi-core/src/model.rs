//! Views that vdi-core hands to the CLI and the desktop app, ready to show.
//!
//! The UI never derives cluster state itself: these types carry the member state, lease expiry
//! and power state already computed. TypeScript bindings are generated from them with `ts-rs`
//! (`cargo test -p vdi-core export_bindings`), into `ui/src/bindings/`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;
use ts_rs::TS;

use crate::error::ErrorView;
use crate::scope::Scope;

/// A member's claim state, derived from its VM's assigned-to label and its Lease
/// (SPEC "Member state"). Never stored anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub enum MemberState {
    /// No label, no Lease: claimable.
    Free,
    /// No label, stale Lease: claimable by replacing the Lease with its resourceVersion.
    FreeStaleLease,
    /// No label, active Lease: a claim in progress or stuck after a partial failure; only the
    /// Lease holder may retry.
    Claiming,
    /// Label, no Lease: assigned the Phase 1 way (label only).
    AssignedLegacy,
    /// Label and active Lease.
    Assigned,
    /// Label and stale Lease: an administrator may recover it.
    AssignedLeaseExpired,
    /// Label naming someone other than the active Lease's holder: another tool wrote one of
    /// them (e.g. the label-only `corral vdi` Go CLI). Not claimable, never resumed over; an
    /// administrator resolves it with unassign.
    Conflict,
    /// The Lease cannot be judged: a time beyond the calendar the product can hold, an expiry
    /// that overflows it, or a duration out of range ([`LeaseView::problem`] says which).
    /// Not claimable; its holder or an administrator releases it.
    Unreadable,
}

impl MemberState {
    /// The state's wording, as the CLI and the app print it.
    pub fn label(self) -> &'static str {
        match self {
            MemberState::Free => "free",
            MemberState::FreeStaleLease => "free (stale lease)",
            MemberState::Claiming => "claiming / stuck",
            MemberState::AssignedLegacy => "assigned (legacy, label-only)",
            MemberState::Assigned => "assigned",
            MemberState::AssignedLeaseExpired => "assigned, lease expired",
            MemberState::Conflict => "conflict (label and Lease disagree)",
            MemberState::Unreadable => "unreadable claim",
        }
    }

    /// Whether a new claimant may take this member (SPEC table, "claimable?").
    pub fn claimable(self) -> bool {
        matches!(self, MemberState::Free | MemberState::FreeStaleLease)
    }
}

/// What the member's ownership Lease (`corral-vdi-<member>`) says.
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct LeaseView {
    /// `spec.holderIdentity`: the full identity of the holder.
    pub holder: Option<String>,
    /// `spec.acquireTime`.
    pub acquired_at: Option<Timestamp>,
    /// `spec.renewTime`.
    pub renewed_at: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`, in seconds.
    pub duration_seconds: Option<i32>,
    /// `renewTime + leaseDurationSeconds`.
    pub expires_at: Option<Timestamp>,
    /// Active: a holder, and the expiry is in the future by the API server's clock.
    pub active: bool,
    /// `renewTime` lies in the future by the API server's clock: reported, never trusted.
    pub renew_time_in_future: bool,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// `metadata.resourceVersion`, which a takeover must carry.
    pub resource_version: Option<String>,
    /// Why the Lease cannot be judged ("renewTime 9999-12-31T23:59:59.000000Z is out of
    /// range"), if it cannot: then it is not active and its times are absent
    /// ([`crate::lease::lease_view`]).
    pub problem: Option<String>,
}

/// One pool member, ready to show.
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct MemberView {
    /// VirtualMachine name, `<pool>-<i>`.
    pub name: String,
    /// Namespace of the VM and its Lease.
    pub namespace: String,
    /// Claim state.
    pub state: MemberState,
    /// The state's wording ([`MemberState::label`]).
    pub state_label: String,
    /// Whether a new claimant may take it.
    pub claimable: bool,
    /// Who holds it: the Lease's holderIdentity, else the decoded assigned-to label.
    pub holder: Option<String>,
    /// Whom the VM's assigned-to label names (decoded; a hashed form as written), if it has
    /// one. Differs from `holder` only in the conflict state.
    pub label_holder: Option<String>,
    /// `corral.dev/vdi-claimed-at` annotation, as written (RFC 3339 UTC).
    pub claimed_at: Option<String>,
    /// The ownership Lease, if any.
    pub lease: Option<LeaseView>,
    /// The VM's `status.printableStatus` as the cluster says it (`Stopped`, `Running`, …);
    /// `Unknown` when the VM has no status yet.
    pub power: String,
}

/// Member counts of a pool, by claimability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PoolCounts {
    /// Members a new claimant may take.
    pub free: u32,
    /// Members with a user (label or active Lease).
    pub taken: u32,
    /// All members.
    pub total: u32,
}

/// A pool: the VMs labelled `corral.dev/vdi-pool=<name>` in one namespace.
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PoolView {
    /// Namespace the pool lives in.
    pub namespace: String,
    /// Pool name (the label's value).
    pub name: String,
    /// Members sorted by their index (`<pool>-1`, `<pool>-2`, …), then by name.
    pub members: Vec<MemberView>,
    /// Counts by claimability.
    pub counts: PoolCounts,
    /// Leases labelled with this pool whose name is no member's claim (`corral-vdi-<member>`):
    /// never joined to a member, never deleted with the pool; shown so that an administrator
    /// can look at them.
    pub stray_leases: Vec<String>,
}

/// The live view's state of its connection to the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[ts(export)]
pub enum FeedStatus {
    /// The first full list has not arrived yet.
    Syncing,
    /// In sync; changes arrive as they happen.
    Live,
    /// The last request failed; the watcher retries with backoff and keeps the last data.
    Failing {
        /// Why, with a fix.
        error: ErrorView,
    },
}

/// Everything the pools view shows at one moment (the CLI's view; the app gets
/// [`PoolsUpdate`]s made from these).
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PoolsSnapshot {
    /// Namespaces covered.
    pub scope: Scope,
    /// Connection state.
    pub status: FeedStatus,
    /// Pools sorted by (namespace, name).
    pub pools: Vec<PoolView>,
    /// API server's time at which the states were judged.
    pub judged_at: Timestamp,
}

/// Names one pool: its namespace and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PoolKey {
    /// Namespace the pool lives in.
    pub namespace: String,
    /// Pool name.
    pub name: String,
}

/// What changed in the pools view since the previous update of the same feed: the desktop app
/// sends these instead of whole [`PoolsSnapshot`]s, so that one member's change costs one
/// pool's worth of serialization and re-rendering, not 10,000 members'.
///
/// A receiver keeps the pools of the last `full` update of a feed and applies each later
/// update of that feed in order: drop `removed`, replace or insert `changed`.
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PoolsUpdate {
    /// Which feed this is (a new one per session); updates of another feed do not apply.
    pub feed: u32,
    /// Namespaces covered.
    pub scope: Scope,
    /// Connection state.
    pub status: FeedStatus,
    /// `true`: `changed` holds every pool and replaces whatever the receiver had.
    pub full: bool,
    /// Pools new or different since the previous update, sorted by (namespace, name).
    pub changed: Vec<PoolView>,
    /// Pools gone since the previous update.
    pub removed: Vec<PoolKey>,
    /// API server's time at which the states were judged.
    pub judged_at: Timestamp,
}

/// Turns the successive snapshots of one feed into [`PoolsUpdate`]s: the first is full, each
/// later one carries only the pools that differ (compared by value).
#[derive(Debug)]
pub struct PoolsDiff {
    feed: u32,
    last: Option<BTreeMap<PoolKey, PoolView>>,
}

impl PoolsDiff {
    /// A diff for feed number `feed`; its first update is full.
    pub fn new(feed: u32) -> Self {
        PoolsDiff { feed, last: None }
    }

    /// The update that takes a receiver from the previous snapshot to `snapshot`.
    pub fn update(&mut self, snapshot: &PoolsSnapshot) -> PoolsUpdate {
        let key = |p: &PoolView| PoolKey {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        };
        let next: BTreeMap<PoolKey, PoolView> =
            snapshot.pools.iter().map(|p| (key(p), p.clone())).collect();
        let (full, changed, removed) = match self.last.take() {
            None => (true, snapshot.pools.clone(), Vec::new()),
            Some(last) => {
                let changed = next
                    .iter()
                    .filter(|(k, p)| last.get(k) != Some(p))
                    .map(|(_, p)| p.clone())
                    .collect();
                let removed = last.into_keys().filter(|k| !next.contains_key(k)).collect();
                (false, changed, removed)
            }
        };
        self.last = Some(next);
        PoolsUpdate {
            feed: self.feed,
            scope: snapshot.scope.clone(),
            status: snapshot.status.clone(),
            full,
            changed,
            removed,
            judged_at: snapshot.judged_at,
        }
    }
}

/// The authenticated user of a kubeconfig context, as the API server reports it
/// (SelfSubjectReview, authentication.k8s.io/v1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct Identity {
    /// `status.userInfo.username`.
    pub username: String,
    /// `status.userInfo.groups`.
    pub groups: Vec<String>,
}

/// A kubeconfig context the user can pick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct ContextInfo {
    /// Context name.
    pub name: String,
    /// Cluster name it points at.
    pub cluster: String,
    /// The context's default namespace, if it sets one.
    pub namespace: Option<String>,
    /// The namespace the console opens this context in: the context's own (trimmed) when it
    /// sets a non-blank one, else [`FALLBACK_NAMESPACE`].
    pub start_namespace: String,
}

/// The namespace the console opens a context in when the context names none (the sandbox's
/// and the SPEC's pool namespace).
pub const FALLBACK_NAMESPACE: &str = "corral-vms";

impl ContextInfo {
    /// The context `name` on `cluster` with default namespace `namespace`.
    pub fn new(name: String, cluster: String, namespace: Option<String>) -> Self {
        let start_namespace = namespace
            .as_deref()
            .map(str::trim)
            .filter(|ns| !ns.is_empty())
            .unwrap_or(FALLBACK_NAMESPACE)
            .to_owned();
        ContextInfo {
            name,
            cluster,
            namespace,
            start_namespace,
        }
    }
}

/// The kubeconfig files were written: what the desktop app tells its window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct KubeconfigChanged {
    /// Contexts whose definition changed (server, CA, credentials, namespace), appeared or
    /// disappeared, sorted by name; the window reconnects when its own is among them. Empty
    /// when the files could not be read (the window reads them again and shows why).
    pub changed_contexts: Vec<String>,
}

/// The kubeconfig's contexts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct Contexts {
    /// All contexts, in file order.
    pub contexts: Vec<ContextInfo>,
    /// `current-context`, if set.
    pub current: Option<String>,
}

/// What the desktop app shows about itself in its footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct AppInfo {
    /// The app's version.
    pub version: String,
    /// The log file being written.
    pub log_path: String,
    /// The kubeconfig files in use.
    pub kubeconfig_paths: Vec<String>,
}

/// What connecting to a cluster reached: the context, who you are there, the scope, the guard.
#[derive(Debug, Clone, PartialEq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct ClusterInfo {
    /// The context asked for (`null`: the current context).
    pub context: Option<String>,
    /// Who the API server says you are (SelfSubjectReview); `null` if it could not say.
    pub identity: Option<Identity>,
    /// Why the identity is unknown.
    pub identity_error: Option<ErrorView>,
    /// The namespaces the live view covers.
    pub scope: Scope,
    /// Whether the cluster has Corral VDI's server-side guard; `null` if it could not be read.
    pub guard: Option<crate::guard::GuardStatus>,
}

// --- pool create / delete (pool.rs) ---

/// Where one member of a pool being created stands (SPEC "Pool create" steps 5–7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[ts(export)]
pub enum CreateProgress {
    /// Every check passed; the members' clones are being created.
    Started(CreateStarted),
    /// A member moved on.
    Member(MemberProgress),
}

/// What a pool create is about to do, once every check has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
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
}

/// What a pool delete removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PoolDeleted {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub name: String,
    /// Member VMs deleted (or already being deleted), in index order.
    pub members: Vec<String>,
    /// Claim Leases (`corral-vdi-<member>`) deleted.
    pub leases: Vec<String>,
    /// VirtualMachineClone objects deleted (left from an aborted or failed create, or by the Go
    /// CLI, which never deletes them).
    pub clones: Vec<String>,
    /// VMs that this pool's own clone objects produced but that never got the pool label (an
    /// interrupted create), deleted.
    pub unlabelled: Vec<String>,
    /// Members that were assigned and deleted anyway because of `force`, with their holder.
    pub forced: Vec<String>,
    /// What claims to belong to the pool but that delete cannot prove this product made, and
    /// so left alone, each with why: `VirtualMachine golden-desktop (named by clone object
    /// "x", but created before it …)`, `Lease other (labelled with the pool, but no member's
    /// claim Lease)`.
    pub left_alone: Vec<String>,
}

impl PoolDeleted {
    /// Whether there was nothing to delete.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
            && self.leases.is_empty()
            && self.clones.is_empty()
            && self.unlabelled.is_empty()
    }
}

// --- GPU and host-device capacity (capacity/) ---

/// How KubeVirt hands a device resource (an extended resource name such as
/// `nvidia.com/GA102GL_A10`) to VMs, read from the KubeVirt CR's
/// `spec.configuration.permittedHostDevices` (REFERENCE "Host-device capacity"; KubeVirt
/// `staging/src/kubevirt.io/api/core/v1/types.go`, `PermittedHostDevices`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub enum DeviceClass {
    /// A `pciHostDevices` entry, advertised by KubeVirt's own device plugin: a whole PCI device
    /// (a GPU) passed through to one VM at a time, so a pool of N needs N of them.
    PciPassthrough,
    /// A `mediatedDevices` entry: a mediated device (a vGPU profile such as `GRID T4-1Q`).
    /// Several VMs share one card, up to the profile's limit, which the node reports as the
    /// resource's allocatable count.
    Mediated,
    /// A `usb` entry: a USB device of the node passed through to one VM.
    Usb,
    /// An entry with `externalResourceProvider: true`: a device plugin outside KubeVirt (an
    /// NVIDIA vGPU or SR-IOV plugin) advertises the resource. Also what every resource is when
    /// the KubeVirt CR sets no `permittedHostDevices` at all, since KubeVirt then checks no
    /// permit.
    External,
    /// Not listed, while `permittedHostDevices` is set: KubeVirt refuses to render the launcher
    /// pod of a VM asking for it ("… is not permitted in permittedHostDevices configuration"),
    /// so such a VM never starts.
    NotPermitted,
    /// The KubeVirt CR could not be read (RBAC), so the class is not known.
    Unknown,
}

impl DeviceClass {
    /// The class as the CLI and the app print it.
    pub fn label(self) -> &'static str {
        match self {
            DeviceClass::PciPassthrough => "PCI passthrough",
            DeviceClass::Mediated => "mediated (vGPU)",
            DeviceClass::Usb => "USB",
            DeviceClass::External => "external device plugin",
            DeviceClass::NotPermitted => "not permitted",
            DeviceClass::Unknown => "unknown",
        }
    }
}

/// One device resource a VM asks for: the `deviceName`s of its
/// `spec.template.spec.domain.devices.gpus[]` and `.hostDevices[]` entries, counted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct DeviceNeed {
    /// The extended-resource name (`deviceName`), e.g. `nvidia.com/TU104GL_Tesla_T4`.
    pub resource: String,
    /// How many of it one VM needs: one per entry naming it.
    pub per_vm: u32,
    /// How KubeVirt hands it out.
    pub class: DeviceClass,
    /// The entries asking for it, as `gpus/<name>` or `hostDevices/<name>`.
    pub entries: Vec<String>,
}

/// One device resource on one node, for one VM's needs: the rows of the per-node table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct NodeDeviceRow {
    /// The extended-resource name.
    pub resource: String,
    /// How KubeVirt hands it out.
    pub class: DeviceClass,
    /// The node's `status.capacity[resource]` (devices present), if it reports the resource.
    pub capacity: Option<u32>,
    /// The node's `status.allocatable[resource]` (devices the scheduler may hand out); 0 when
    /// the node does not report the resource.
    pub allocatable: u32,
    /// Devices held on the node now: launcher pods that are not Succeeded or Failed (migration
    /// targets included), or, without a visible launcher pod, running VMIs placed there.
    pub held: u32,
    /// `allocatable - held`, never below 0.
    pub free: u32,
    /// How many one VM needs.
    pub per_vm: u32,
    /// How many the whole request needs: `per_vm` × the number of VMs asked for.
    pub needed: u32,
}

/// One node in a capacity plan: its rows, whether the VM may be scheduled there, and how many
/// whole VMs it can hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct NodePlan {
    /// Node name.
    pub node: String,
    /// Why the VM cannot be scheduled on this node (cordoned, an untolerated taint, a
    /// nodeSelector or required node affinity that does not match); `null` when it can.
    pub excluded: Option<String>,
    /// One row per resource the VM needs.
    pub rows: Vec<NodeDeviceRow>,
    /// Whole VMs this node can hold now, all of each VM's devices on it (0 when excluded).
    pub fits: u32,
    /// How many of the VMs asked for the plan puts on this node.
    pub planned: u32,
}

/// Whether `size` VMs like one golden VM (or one pool member) can be placed now, node by node
/// (SPEC "GPU and host-device capacity admission"). A check, not a reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct CapacityPlan {
    /// Namespace of the VM.
    pub namespace: String,
    /// The VM whose devices are counted (the golden VM of a pool, or the member to start).
    pub vm: String,
    /// How many VMs like it are asked for.
    pub size: u32,
    /// What one VM asks for; empty when it asks for no device (then nothing is read from the
    /// cluster and it is admitted).
    pub needs: Vec<DeviceNeed>,
    /// Every node, sorted by name; empty when `needs` is.
    pub nodes: Vec<NodePlan>,
    /// How many such VMs the schedulable nodes can hold now (the sum of each node's whole-VM
    /// count; exact for identical VMs, see [`crate::capacity`]).
    pub placeable: u32,
    /// `min(placeable, size)`: how many of the VMs asked for fit.
    pub fits: u32,
    /// Whether at least one such VM can start now.
    pub fits_one: bool,
    /// Whether all `size` fit and every resource is permitted.
    pub admitted: bool,
    /// Resources the VM asks for that the KubeVirt CR does not permit.
    pub not_permitted: Vec<String>,
    /// What the numbers could not take into account (a list RBAC refused, an affinity term
    /// that is not a plain label match), each as a sentence.
    pub notes: Vec<String>,
}

/// A resource the KubeVirt CR permits (`spec.configuration.permittedHostDevices`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PermittedDevice {
    /// The extended-resource name (`resourceName`).
    pub resource: String,
    /// Its class.
    pub class: DeviceClass,
    /// What selects the devices: `pciVendorSelector` (`10DE:1EB8`), `mdevNameSelector`
    /// (`GRID T4-1Q`) or the USB selectors, as written.
    pub selector: Option<String>,
}

/// Who holds devices on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct DeviceHolder {
    /// Namespace of the VM.
    pub namespace: String,
    /// The VM (its VMI's name).
    pub vm: String,
    /// The pool the VM belongs to (its `corral.dev/vdi-pool` label), if any and readable.
    pub pool: Option<String>,
    /// How many of the resource it holds.
    pub count: u32,
    /// The virt-launcher pod that holds them; `null` when counted from the VMI (no launcher
    /// pod visible).
    pub pod: Option<String>,
    /// Whether the pod is a live-migration target (it holds devices on its node while the
    /// source still holds its own).
    pub migration_target: bool,
}

/// One device resource on one node, cluster-wide: what is there and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct NodeResource {
    /// The extended-resource name.
    pub resource: String,
    /// How KubeVirt hands it out.
    pub class: DeviceClass,
    /// `status.capacity[resource]`, if reported.
    pub capacity: Option<u32>,
    /// `status.allocatable[resource]` (0 when not reported).
    pub allocatable: u32,
    /// Held now (see [`NodeDeviceRow::held`]).
    pub held: u32,
    /// `allocatable - held`, never below 0.
    pub free: u32,
    /// Who holds them, largest first.
    pub holders: Vec<DeviceHolder>,
}

/// One node's devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct NodeCapacity {
    /// Node name.
    pub node: String,
    /// `spec.unschedulable`: nothing new is scheduled there.
    pub cordoned: bool,
    /// Taints with effect `NoSchedule` or `NoExecute`, as `key[=value]:Effect`.
    pub taints: Vec<String>,
    /// Whether the node carries `kubevirt.io/schedulable=true` (virt-handler runs there and
    /// takes VMs).
    pub kubevirt_schedulable: bool,
    /// Its device resources (permitted ones, and other extended resources it reports or that
    /// are held there), sorted by name; nodes without any have none.
    pub resources: Vec<NodeResource>,
}

/// The cluster's devices, node by node, and who holds them: the Capacity view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct ClusterCapacity {
    /// Every node, sorted by name.
    pub nodes: Vec<NodeCapacity>,
    /// What the KubeVirt CR permits; empty when it permits nothing or could not be read.
    pub permitted: Vec<PermittedDevice>,
    /// What the numbers could not take into account, each as a sentence.
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_starts_in_its_own_namespace_else_the_fallback() {
        let start = |ns: Option<&str>| {
            ContextInfo::new("c".into(), "k".into(), ns.map(str::to_owned)).start_namespace
        };
        assert_eq!(start(Some("team-a")), "team-a");
        assert_eq!(start(Some(" team-a ")), "team-a");
        assert_eq!(start(Some("  ")), FALLBACK_NAMESPACE);
        assert_eq!(start(None), "corral-vms");
    }

    fn pool(name: &str, free: u32) -> PoolView {
        PoolView {
            namespace: "vdi".into(),
            name: name.into(),
            members: Vec::new(),
            counts: PoolCounts {
                free,
                taken: 0,
                total: free,
            },
            stray_leases: Vec::new(),
        }
    }

    fn snapshot(pools: Vec<PoolView>) -> PoolsSnapshot {
        PoolsSnapshot {
            scope: Scope::Namespace("vdi".into()),
            status: FeedStatus::Live,
            pools,
            judged_at: Timestamp::UNIX_EPOCH,
        }
    }

    fn key(name: &str) -> PoolKey {
        PoolKey {
            namespace: "vdi".into(),
            name: name.into(),
        }
    }

    #[test]
    fn first_update_is_full_then_only_what_changed() {
        let mut diff = PoolsDiff::new(7);
        let first = diff.update(&snapshot(vec![pool("a", 1), pool("b", 2)]));
        assert!(first.full);
        assert_eq!(first.feed, 7);
        assert_eq!(first.changed, vec![pool("a", 1), pool("b", 2)]);

        let same = diff.update(&snapshot(vec![pool("a", 1), pool("b", 2)]));
        assert!(!same.full);
        assert!(same.changed.is_empty() && same.removed.is_empty());

        let one = diff.update(&snapshot(vec![pool("a", 0), pool("b", 2), pool("c", 3)]));
        assert_eq!(one.changed, vec![pool("a", 0), pool("c", 3)]);
        assert!(one.removed.is_empty());

        let gone = diff.update(&snapshot(vec![pool("c", 3)]));
        assert!(gone.changed.is_empty());
        assert_eq!(gone.removed, vec![key("a"), key("b")]);
    }

    #[test]
    fn a_status_change_alone_is_sent() {
        let mut diff = PoolsDiff::new(1);
        diff.update(&snapshot(vec![pool("a", 1)]));
        let mut failing = snapshot(vec![pool("a", 1)]);
        failing.status = FeedStatus::Syncing;
        let update = diff.update(&failing);
        assert_eq!(update.status, FeedStatus::Syncing);
        assert!(update.changed.is_empty());
    }
}
