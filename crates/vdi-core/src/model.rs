//! Views that vdi-core hands to the CLI and the desktop app, ready to show.
//!
//! The UI never derives cluster state itself: these types carry the member state, lease expiry
//! and power state already computed. TypeScript bindings are generated from them with `ts-rs`
//! (`cargo test -p vdi-core export_bindings`), into `ui/src/bindings/`.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// A member's claim state, derived from its VM's assigned-to label and its Lease
/// (SPEC "Member state"). Never stored anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
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
        }
    }

    /// Whether a new claimant may take this member (SPEC table, "claimable?").
    pub fn claimable(self) -> bool {
        matches!(self, MemberState::Free | MemberState::FreeStaleLease)
    }
}

/// What the member's ownership Lease (`corral-vdi-<member>`) says.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
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
}

/// One pool member, ready to show.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, TS)]
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
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
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
}

/// Which namespaces a view covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "camelCase", tag = "kind", content = "namespace")]
#[ts(export)]
pub enum Scope {
    /// One namespace.
    Namespace(String),
    /// Every namespace the identity may list.
    All,
}

impl Scope {
    /// Checks the namespace name ([`crate::validate::namespace`]); an empty one would mean
    /// "all namespaces" to the API.
    ///
    /// Errors: [`crate::Error::Invalid`] naming the value.
    pub fn validate(&self) -> crate::Result<()> {
        match self {
            Scope::Namespace(ns) => crate::validate::namespace(ns),
            Scope::All => Ok(()),
        }
    }

    /// The namespace, or `None` for all namespaces.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::Namespace(ns) => Some(ns),
            Scope::All => None,
        }
    }
}

/// The live view's state of its connection to the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
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

/// Everything the pools view shows, sent whole on every change.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
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

/// The authenticated user of a kubeconfig context, as the API server reports it
/// (SelfSubjectReview, authentication.k8s.io/v1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct Identity {
    /// `status.userInfo.username`.
    pub username: String,
    /// `status.userInfo.groups`.
    pub groups: Vec<String>,
}

/// A kubeconfig context the user can pick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct ContextInfo {
    /// Context name.
    pub name: String,
    /// Cluster name it points at.
    pub cluster: String,
    /// The context's default namespace, if it sets one.
    pub namespace: Option<String>,
}

/// The kubeconfig's contexts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct Contexts {
    /// All contexts, in file order.
    pub contexts: Vec<ContextInfo>,
    /// `current-context`, if set.
    pub current: Option<String>,
}

/// Kinds of failure, so that callers can react without parsing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub enum ErrorKind {
    /// The input was refused before anything was sent.
    Invalid,
    /// The kubeconfig could not be read or used.
    Config,
    /// The API server could not be reached.
    Unreachable,
    /// The credentials were refused (401).
    Unauthorized,
    /// RBAC denied the request (403).
    Forbidden,
    /// The object does not exist (404).
    NotFound,
    /// Another writer won (409).
    Conflict,
    /// A wait ran out.
    Timeout,
    /// A claim rule said no (no free member; another holder).
    Refused,
    /// Someone else is using it right now (a VNC console being viewed): the caller may offer
    /// to take over.
    Busy,
    /// Part of an operation succeeded; the message says what state was left.
    Partial,
    /// Anything else.
    Other,
}

/// An error as the UI shows it: what happened, naming the object, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct ErrorView {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// One sentence naming the object.
    pub message: String,
    /// What to do about it, if known.
    pub suggestion: Option<String>,
    /// Whether trying again unchanged may work.
    pub retryable: bool,
}

/// What the desktop app shows about itself in its footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
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

/// What opening a session connected to.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct SessionInfo {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[ts(export)]
pub enum CreateProgress {
    /// Every check passed; the members' clones are being created.
    Started(CreateStarted),
    /// A member moved on.
    Member(MemberProgress),
}

/// What a pool create is about to do, once every check has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
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

/// Why one member of a pool create failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct MemberFailure {
    /// The member that does not exist.
    pub member: String,
    /// What went wrong, naming the clone object, its phase and condition message.
    pub message: String,
    /// Whether it ran out of time (rather than failing outright).
    pub timed_out: bool,
}

/// A pool create that did not finish for every member: exactly what exists afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct PoolCreateFailure {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// Members asked for.
    pub requested: u32,
    /// Members that exist, labelled, stopped and unassigned, in index order.
    pub created: Vec<String>,
    /// Members that do not exist, with the reason.
    pub failed: Vec<MemberFailure>,
    /// Objects this run made that it could not remove (each with the command that does), e.g.
    /// an unlabelled VM whose label patch and delete were both refused. Empty when the run left
    /// nothing behind but `created`.
    pub leftovers: Vec<String>,
}

/// What a pool delete removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, TS)]
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
