//! Pure rules, no I/O: a Lease's activity, a member's state (SPEC "Member state") and the
//! grouping of labelled VMs into pools. Both the one-shot listing and the live view use these,
//! so the CLI and the app always agree.
//!
//! Where a broker does the cluster's half of a claim (SPEC "Broker": it labels the VM, binds the
//! holder's access and starts it), an active claim reads as [`MemberState::Granting`] until the
//! VM shows all three; [`ClaimSide`] says which kind of cluster the members are judged for.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use crate::lease::{ClaimLease, LeaseView, lease_view};
use crate::names::{
    self, ASSIGNED_TO_LABEL, BROKER_REASON_ANNOTATION, BROKER_USER, CLAIMED_AT_ANNOTATION,
    DecodedLabel, GRANTED_TO_ANNOTATION, OWNER_ANNOTATION, POOL_LABEL, REMOVING_ANNOTATION,
    lease_name,
};
use crate::policy::DesktopPool;
use crate::policy::reclaim::ReclaimWhy;
use crate::policy::release::{ReleaseEffect, ReleaseView};
use crate::resources::VirtualMachine;

mod managed;
pub mod offers;

pub use managed::{PolicySummary, StateCounts};

/// Who does the cluster's half of a claim (labelling the VM and starting it), which decides
/// how an active claim reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClaimSide {
    /// The client, as the seed's flow has it (no broker on the cluster).
    #[default]
    Client,
    /// The cluster's broker (SPEC "Broker"): a claim is the Lease alone, and the broker
    /// labels, grants and starts.
    Broker,
}

/// What a member's VM says of the broker's half of its claim (SPEC "Broker"): whom the broker
/// bound access for and whether the VM is still to come up. Read only where a broker does that
/// half ([`Grant::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant<'a> {
    /// The VM's `corral.dev/vdi-granted-to` annotation as written (the holder encoded as the
    /// assigned-to label is), if any.
    pub granted_to: Option<&'a str>,
    /// Whether the claim still waits for the VM to run: it is not `Running` (nor `Paused`, a
    /// holder's own act) while its run strategy means it to run (the broker started it) or
    /// while the broker says why it cannot start it. A VM the holder stopped (halted, no
    /// reason) is not waited for: the claim is complete, and its power shows it stopped.
    pub coming_up: bool,
}

impl<'a> Grant<'a> {
    /// What `vm` says of its grant.
    pub fn of(vm: &'a VirtualMachine) -> Self {
        let power = vm.printable_status();
        let reason = vm.annotations().contains_key(BROKER_REASON_ANNOTATION);
        Grant {
            granted_to: vm
                .annotations()
                .get(GRANTED_TO_ANNOTATION)
                .map(String::as_str),
            coming_up: !matches!(power, "Running" | "Paused") && (!halted(vm) || reason),
        }
    }
}

/// Whether `vm` is meant to be stopped: its run strategy is `Halted` (or, without one,
/// `spec.running` is `false`). The run strategy says where the VM is going, printableStatus
/// only where it is: a VM started a moment ago still reads Stopped while its run strategy is
/// Always, and would run on, unclaimed, if that were taken for stopped.
pub fn halted(vm: &VirtualMachine) -> bool {
    match vm.spec.run_strategy.as_deref() {
        Some(strategy) => strategy == "Halted",
        None => vm.spec.running == Some(false),
    }
}

/// A member's state from its assigned-to label (as written on the VM), its Lease (SPEC
/// "Member state" table) and, where a broker does the cluster's half of claims, what the VM
/// says of the grant (`grant`; `None`: no broker).
///
/// A label that is not the encoding of the active Lease's holder is a conflict; a Lease that
/// cannot be judged ([`LeaseView::problem`]) is an unreadable claim, whatever the label says.
/// With a broker, an active claim is [`MemberState::Granting`] until the label and the
/// granted-to annotation both name the holder and the VM is up ([`Grant::coming_up`]); a
/// label that names someone
/// else but is the broker's own (it equals the granted-to annotation: the broker follows a
/// Lease whose holder changed) is a hand-over in progress, so granting too, not a conflict.
/// With a broker, a label without a Lease that is the broker's own grant (it equals the
/// granted-to annotation) is a claim that ended and that the broker is clearing:
/// [`MemberState::Releasing`], and so is a member with neither label nor Lease that still
/// carries the broker's grant (a reset owed: the broker keeps granted-to until it takes the
/// member); a label the broker never granted is an administrator's label-only assignment, so
/// assigned (legacy).
pub fn member_state(
    assigned_label: Option<&str>,
    lease: Option<&LeaseView>,
    grant: Option<Grant<'_>>,
) -> MemberState {
    let label = assigned_label.filter(|v| !v.is_empty());
    match (label, lease) {
        (_, Some(l)) if l.problem.is_some() => MemberState::Unreadable,
        // The label cleared but the broker's grant still marked: a reset is owed (the broker
        // keeps granted-to until it takes the member to clone it again) or the teardown is
        // half done. Not free: a claim now would get the last holder's disk.
        (None, None) if grant.is_some_and(|g| g.granted_to.is_some_and(|v| !v.is_empty())) => {
            MemberState::Releasing
        }
        (None, None) => MemberState::Free,
        (None, Some(l)) if l.active => match grant {
            Some(_) => MemberState::Granting,
            None => MemberState::Claiming,
        },
        (None, Some(_)) => MemberState::FreeStaleLease,
        (Some(label), None) if grant.is_some_and(|g| g.granted_to == Some(label)) => {
            MemberState::Releasing
        }
        (Some(_), None) => MemberState::AssignedLegacy,
        (Some(label), Some(l)) if l.active => {
            let holder = l.holder.as_deref().unwrap_or_default();
            let names_holder = |v: &str| names::label_matches_identity(v, holder);
            match grant {
                None if names_holder(label) => MemberState::Assigned,
                None => MemberState::Conflict,
                Some(g) if names_holder(label) => {
                    if g.granted_to.is_some_and(names_holder) && !g.coming_up {
                        MemberState::Assigned
                    } else {
                        MemberState::Granting
                    }
                }
                Some(g) if g.granted_to == Some(label) => MemberState::Granting,
                Some(_) => MemberState::Conflict,
            }
        }
        (Some(_), Some(_)) => MemberState::AssignedLeaseExpired,
    }
}

/// Whom an assigned-to label value names: the decoded identity, or the hashed form as written.
pub fn label_holder(label: &str) -> String {
    match names::decode_identity(label) {
        DecodedLabel::Identity(id) => id,
        DecodedLabel::Hashed(raw) => raw,
    }
}

/// A member's view from its VM and (if any) its `corral-vdi-<member>` Lease, as of `now`, on a
/// cluster without a broker ([`member_view_on`] with [`ClaimSide::Client`]).
pub fn member_view(vm: &VirtualMachine, lease: Option<&ClaimLease>, now: Timestamp) -> MemberView {
    member_view_on(vm, lease, now, ClaimSide::Client)
}

/// A member's view from its VM and (if any) its `corral-vdi-<member>` Lease, as of `now`, where
/// `side` does the cluster's half of claims.
pub fn member_view_on(
    vm: &VirtualMachine,
    lease: Option<&ClaimLease>,
    now: Timestamp,
    side: ClaimSide,
) -> MemberView {
    let lease = lease.map(|l| lease_view(l, now));
    let assigned = vm.labels().get(ASSIGNED_TO_LABEL).filter(|v| !v.is_empty());
    let grant = (side == ClaimSide::Broker).then(|| Grant::of(vm));
    let removing = removing(vm, lease.as_ref());
    let state = match removing {
        Some(_) => MemberState::Removing,
        None => member_state(assigned.map(String::as_str), lease.as_ref(), grant),
    };
    let state_label = match removing.filter(|why| !why.is_empty()) {
        Some(why) => format!("{} ({why})", state.label()),
        None => state.label().to_owned(),
    };
    let label_holder = assigned.map(|label| label_holder(label));
    // A member being removed is nobody's claim, the broker's Lease on it included; one being
    // released is its last holder's no more.
    let holder = lease
        .as_ref()
        .and_then(|l| l.holder.clone())
        .or_else(|| label_holder.clone())
        .filter(|_| !matches!(state, MemberState::Removing | MemberState::Releasing));
    MemberView {
        name: vm.name_any(),
        namespace: vm.namespace().unwrap_or_default(),
        state,
        state_label,
        claimable: state.claimable(),
        holder,
        label_holder,
        claimed_at: vm.annotations().get(CLAIMED_AT_ANNOTATION).cloned(),
        broker_reason: vm
            .annotations()
            .get(BROKER_REASON_ANNOTATION)
            .filter(|r| !r.is_empty())
            .cloned(),
        lease,
        power: vm.printable_status().to_owned(),
        reclaim_at: None,
        reclaim_why: None,
        notice: false,
        keepable: false,
        on_release: ReleaseEffect::Stop { warm: false }.into(),
        state_note: None,
        offers: None,
        owner: vm
            .annotations()
            .get(OWNER_ANNOTATION)
            .filter(|o| !o.is_empty())
            .cloned(),
    }
    .noted()
}

impl MemberView {
    /// This view with its [`MemberView::state_note`] judged from the rest of it.
    pub fn noted(mut self) -> MemberView {
        let problem = self.lease.as_ref().and_then(|l| l.problem.as_deref());
        self.state_note = match (problem, &self.broker_reason) {
            (Some(problem), _) => Some(problem.to_owned()),
            (None, Some(reason)) if self.state == MemberState::Granting => Some(reason.clone()),
            _ if matches!(self.on_release.effect, ReleaseEffect::Remove { .. })
                && self.holder.is_some() =>
            {
                Some("removed when released".into())
            }
            _ => None,
        };
        self
    }
}

/// Whether the broker is removing `vm` from its pool (shrink, reset): why (the VM's
/// [`REMOVING_ANNOTATION`], `""` when only its Lease says so), or `None`. The broker writes the
/// annotation once it holds the member's Lease, which it takes as [`BROKER_USER`] first.
fn removing<'a>(vm: &'a VirtualMachine, lease: Option<&LeaseView>) -> Option<&'a str> {
    let annotated = vm
        .annotations()
        .get(REMOVING_ANNOTATION)
        .map(String::as_str)
        .filter(|why| !why.is_empty());
    let broker_holds = lease.is_some_and(|l| l.active && l.holder.as_deref() == Some(BROKER_USER));
    annotated.or(broker_holds.then_some(""))
}

/// Sort key that puts `pool-2` before `pool-10`: (numeric suffix, name).
fn member_order(name: &str) -> (u64, String) {
    let index = name
        .rsplit_once('-')
        .and_then(|(_, i)| i.parse().ok())
        .unwrap_or(u64::MAX);
    (index, name.to_owned())
}

/// [`group_pools_on`] a cluster without a broker ([`ClaimSide::Client`]).
pub fn group_pools<'a>(
    vms: impl IntoIterator<Item = &'a VirtualMachine>,
    leases: impl IntoIterator<Item = &'a ClaimLease>,
    now: Timestamp,
) -> Vec<PoolView> {
    group_pools_on(vms, leases, now, ClaimSide::Client)
}

/// Groups labelled VMs into pools by (namespace, `corral.dev/vdi-pool` value), joining each VM
/// with its Lease by name (`corral-vdi-<member>`, whatever its labels), judged at `now` where
/// `side` does the cluster's half of claims. VMs without the pool label are ignored; Leases
/// labelled with a pool that join no member of it are that pool's [`PoolView::stray_leases`].
/// Pools come sorted by (namespace, name), members by index.
pub fn group_pools_on<'a>(
    vms: impl IntoIterator<Item = &'a VirtualMachine>,
    leases: impl IntoIterator<Item = &'a ClaimLease>,
    now: Timestamp,
    side: ClaimSide,
) -> Vec<PoolView> {
    group_pools_with(vms, leases, [], now, side)
}

/// [`group_pools_on`], with the namespaces' `DesktopPool`s (`policies`): a pool with one of its
/// name is managed ([`PoolView::managed`]) and shows its policy or the policy's problem, and
/// each of its held members when and why it will be reclaimed ([`MemberView::reclaim_at`]).
pub fn group_pools_with<'a>(
    vms: impl IntoIterator<Item = &'a VirtualMachine>,
    leases: impl IntoIterator<Item = &'a ClaimLease>,
    policies: impl IntoIterator<Item = &'a DesktopPool>,
    now: Timestamp,
    side: ClaimSide,
) -> Vec<PoolView> {
    let managed_pools: HashMap<(String, String), managed::Managed> = policies
        .into_iter()
        .map(|p| {
            (
                (p.namespace().unwrap_or_default(), p.name_any()),
                managed::Managed::of(p),
            )
        })
        .collect();
    let leases: HashMap<(String, String), &ClaimLease> = leases
        .into_iter()
        .map(|l| ((l.namespace().unwrap_or_default(), l.name_any()), l))
        .collect();
    let mut pools: BTreeMap<(String, String), Vec<MemberView>> = BTreeMap::new();
    for vm in vms {
        let Some(pool) = vm.labels().get(POOL_LABEL) else {
            continue;
        };
        let ns = vm.namespace().unwrap_or_default();
        let lease = leases
            .get(&(ns.clone(), lease_name(&vm.name_any())))
            .copied();
        let key = (ns, pool.clone());
        let mut view = member_view_on(vm, lease, now, side);
        if let Some(Ok(policy)) = managed_pools.get(&key).map(|m| &m.policy) {
            managed::fill_reclaim(&mut view, vm, lease, policy, now);
            view.on_release = ReleaseEffect::of(Some(policy), pool, &view.name).into();
            view = view.noted();
        }
        pools.entry(key).or_default().push(view);
    }
    // Leases labelled with a pool that joined none of its members.
    let mut strays: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for ((ns, lease), l) in &leases {
        let Some(pool) = l.labels().get(POOL_LABEL) else {
            continue;
        };
        let joined = names::member_of_lease(lease).is_some_and(|m| {
            pools
                .get(&(ns.clone(), pool.clone()))
                .is_some_and(|members| members.iter().any(|v| v.name == m))
        });
        if !joined {
            strays
                .entry((ns.clone(), pool.clone()))
                .or_default()
                .push(lease.clone());
        }
    }
    pools
        .into_iter()
        .map(|(key, mut members)| {
            let mut stray_leases = strays.remove(&key).unwrap_or_default();
            stray_leases.sort();
            let policy = managed_pools.get(&key);
            let (namespace, name) = key;
            members.sort_by_cached_key(|m| member_order(&m.name));
            let mut counts = PoolCounts {
                total: members.len() as u32,
                ..PoolCounts::default()
            };
            for m in &members {
                if m.claimable {
                    counts.free += 1;
                } else if m.holder.is_some() {
                    counts.claimed += 1;
                }
            }
            let size = policy.and_then(|m| m.policy.as_ref().ok()).map(|p| p.size);
            PoolView {
                resize_note: size.and_then(|size| resize_note(size, &members)),
                offer: None,
                namespace,
                name,
                state_counts: StateCounts::of(&members, policy.map_or(0, |m| m.creating)),
                members,
                counts,
                stray_leases,
                managed: policy.is_some(),
                policy: policy.and_then(|m| m.policy.as_ref().ok().map(PolicySummary::from)),
                usage: policy.map_or_else(Vec::new, |m| m.usage.clone()),
                policy_problem: policy
                    .and_then(|m| m.policy.as_ref().err().map(ToString::to_string)),
            }
        })
        .collect()
}

/// What a managed pool's head says while it has more members than its `size` (a shrink the
/// broker is carrying out): "resizing to 2: dev-4 is being removed; dev-3 goes when released".
/// `None` once it has no member above the size.
fn resize_note(size: u32, members: &[MemberView]) -> Option<String> {
    let above: Vec<&MemberView> = members
        .iter()
        .filter(|m| matches!(m.on_release.effect, ReleaseEffect::Remove { .. }))
        .collect();
    if above.is_empty() {
        return None;
    }
    let names = |held: bool| {
        above
            .iter()
            .filter(|m| m.holder.is_some() == held)
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
    };
    let (waiting, going) = (names(true), names(false));
    let mut parts = Vec::new();
    if !going.is_empty() {
        let verb = if going.len() == 1 { "is" } else { "are" };
        parts.push(format!("{} {verb} being removed", going.join(", ")));
    }
    if !waiting.is_empty() {
        let verb = if waiting.len() == 1 { "goes" } else { "go" };
        parts.push(format!("{} {verb} when released", waiting.join(", ")));
    }
    Some(format!("resizing to {size}: {}", parts.join("; ")))
}

/// The earliest moment after `now` at which the views of `pools` change without a watch
/// event: an active Lease expires, a reclaim comes due, or its notice begins
/// ([`crate::policy::reclaim::NOTICE`] before it).
pub fn next_expiry(pools: &[PoolView], now: Timestamp) -> Option<Timestamp> {
    let members = pools.iter().flat_map(|p| &p.members);
    let expiries = members
        .clone()
        .filter_map(|m| m.lease.as_ref())
        .filter(|l| l.active)
        .filter_map(|l| l.expires_at);
    let reclaims = members
        .filter_map(|m| m.reclaim_at.as_deref()?.parse::<Timestamp>().ok())
        .flat_map(|at| {
            [
                Some(at),
                at.checked_sub(crate::policy::reclaim::NOTICE).ok(),
            ]
        })
        .flatten();
    expiries.chain(reclaims).filter(|at| *at > now).min()
}

/// A member's claim state, derived from its VM's assigned-to label and its Lease
/// (SPEC "Member state"). Never stored anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
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
    /// With a broker (SPEC "Broker"): an active Lease whose grant is not complete yet — the
    /// VM's assigned-to label or its granted-to annotation does not name the holder yet (a
    /// new claim, or a hand-over to a new holder), or the VM does not run yet. Not claimable;
    /// the broker's reason ([`MemberView::broker_reason`]) says why it cannot finish, if it
    /// cannot.
    Granting,
    /// With a broker (SPEC "Broker"): the claim ended (its Lease is gone) and the broker is
    /// clearing the member (revoking access, applying `onRelease`): its granted-to annotation
    /// still names the last holder (and its assigned-to label, until the broker clears it; a
    /// reset keeps granted-to until the member is taken to be cloned again). Nobody's claim
    /// and not claimable for that moment; a claim that finds no free member waits for it.
    Releasing,
    /// A managed pool's member the broker is removing (shrink, or a reset to the golden VM):
    /// its VM carries [`REMOVING_ANNOTATION`], or the broker ([`BROKER_USER`]) holds its
    /// Lease. Not claimable, and not anyone's claim.
    Removing,
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
            MemberState::Granting => "granting",
            MemberState::Releasing => "releasing",
            MemberState::Removing => "removing",
        }
    }

    /// Whether a new claimant may take this member (SPEC table, "claimable?").
    pub fn claimable(self) -> bool {
        matches!(self, MemberState::Free | MemberState::FreeStaleLease)
    }
}

/// One pool member, ready to show.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
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
    /// The broker's `corral.dev/vdi-broker-reason` annotation: one sentence saying why it
    /// cannot finish this member's claim (shown beside "granting"); `None` when it has none.
    pub broker_reason: Option<String>,
    /// The ownership Lease, if any.
    pub lease: Option<LeaseView>,
    /// The VM's `status.printableStatus` as the cluster says it (`Stopped`, `Running`, …);
    /// `Unknown` when the VM has no status yet.
    pub power: String,
    /// A held member of a managed pool: when its claim will be reclaimed (RFC 3339, the API
    /// server's time; [`crate::policy::reclaim::due`]), else `None`. For a disconnect it is
    /// the Lease's end (the broker acts its skew margin later).
    pub reclaim_at: Option<String>,
    /// Why it will be reclaimed then (`disconnected`, `maxSession`, `idle`).
    pub reclaim_why: Option<ReclaimWhy>,
    /// Whether the holder should be told now: the reclaim is at most
    /// [`crate::policy::reclaim::NOTICE`] (five minutes) away.
    pub notice: bool,
    /// Whether Keep postpones that reclaim (not a `maxSession` end).
    pub keepable: bool,
    /// What a release of it does to its VM, by its pool's policy (stop in an unmanaged pool;
    /// removed for good when the pool was made smaller than its index).
    pub on_release: ReleaseView,
    /// What its state says beyond its label, shown beside it by every front end: why its Lease
    /// cannot be read (its problem), why the broker cannot finish granting it, or that it goes
    /// when released (its pool was made smaller). `None` when there is nothing more.
    pub state_note: Option<String>,
    /// What its row offers the identity a cluster link acts as (judged by
    /// [`crate::claim::offers`] where the link forwards its views); `None` elsewhere.
    pub offers: Option<offers::MemberOffers>,
    /// Its owner in a dedicated pool ([`OWNER_ANNOTATION`], a full identity): only they claim
    /// it.
    pub owner: Option<String>,
}

/// Member counts of a pool, by claimability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PoolCounts {
    /// Members a new claimant may take.
    pub free: u32,
    /// Members with a user (label or active Lease).
    pub claimed: u32,
    /// All members.
    pub total: u32,
}

/// A pool: the VMs labelled `corral.dev/vdi-pool=<name>` in one namespace.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
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
    /// Whether the pool is managed: a `DesktopPool` of its name in its namespace
    /// ([`crate::policy`]).
    pub managed: bool,
    /// A managed pool's policy, when it can be read.
    pub policy: Option<PolicySummary>,
    /// Why a managed pool's policy cannot be read ("spec.size: 0 is out of range (1 to
    /// 500)"): the broker leaves such a pool as it is.
    pub policy_problem: Option<String>,
    /// Members per state, the warm buffer among them.
    pub state_counts: StateCounts,
    /// While a managed pool has members above its size (a shrink under way), what is left to
    /// do: "resizing to 2: dev-4 is being removed; dev-3 goes when released".
    pub resize_note: Option<String>,
    /// What "Get a desktop" offers the identity a cluster link acts as (judged by
    /// [`crate::claim::offers::fill`] where the link forwards its views); `None` elsewhere.
    pub offer: Option<offers::PoolOffer>,
    /// A managed pool's hourly usage, oldest first, as the broker keeps it in its DesktopPool's
    /// status ([`crate::policy::usage`]); empty for a label-only pool or before the broker's
    /// first look.
    pub usage: Vec<crate::policy::usage::UsageBucket>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    fn now() -> Timestamp {
        "2026-11-30T12:00:00Z".parse().unwrap()
    }

    fn lease(member: &str, holder: Option<&str>, renewed_ago_secs: i64) -> ClaimLease {
        let renew = now() - SignedDuration::from_secs(renewed_ago_secs);
        ClaimLease::from(Lease {
            metadata: ObjectMeta {
                name: Some(lease_name(member)),
                namespace: Some("ns".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                acquire_time: Some(MicroTime(renew)),
                renew_time: Some(MicroTime(renew)),
                lease_duration_seconds: Some(3600),
                lease_transitions: Some(1),
                ..Default::default()
            }),
        })
    }

    fn vm(name: &str, pool: &str, assigned: Option<&str>, power: Option<&str>) -> VirtualMachine {
        let mut vm = VirtualMachine::new(name, Default::default());
        vm.metadata.namespace = Some("ns".into());
        let labels = vm.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(POOL_LABEL.into(), pool.into());
        if let Some(a) = assigned {
            labels.insert(ASSIGNED_TO_LABEL.into(), a.into());
        }
        vm.status = power.map(|p| crate::resources::VirtualMachineStatus {
            printable_status: Some(p.into()),
            ..Default::default()
        });
        vm
    }

    #[test]
    fn every_row_of_the_state_table() {
        let active = lease_view(&lease("m", Some("alice"), 10), now());
        let stale = lease_view(&lease("m", Some("alice"), 7200), now());
        assert!(active.active && !stale.active);
        assert_eq!(member_state(None, None, None), MemberState::Free);
        assert_eq!(
            member_state(None, Some(&stale), None),
            MemberState::FreeStaleLease
        );
        assert_eq!(
            member_state(None, Some(&active), None),
            MemberState::Claiming
        );
        assert_eq!(
            member_state(Some("alice"), None, None),
            MemberState::AssignedLegacy
        );
        assert_eq!(
            member_state(Some("alice"), Some(&active), None),
            MemberState::Assigned
        );
        assert_eq!(
            member_state(Some("alice"), Some(&stale), None),
            MemberState::AssignedLeaseExpired
        );
        assert_eq!(
            member_state(Some("bob"), Some(&active), None),
            MemberState::Conflict,
            "label bob, active Lease alice"
        );
        assert_eq!(
            member_state(Some("bob"), Some(&stale), None),
            MemberState::AssignedLeaseExpired
        );
        assert!(MemberState::Free.claimable() && MemberState::FreeStaleLease.claimable());
        assert!(!MemberState::Conflict.claimable());
        assert!(!MemberState::Claiming.claimable() && !MemberState::Assigned.claimable());
    }

    #[test]
    fn with_a_broker_an_active_claim_is_granting_until_label_grant_and_power_agree() {
        let active = lease_view(&lease("m", Some("alice"), 10), now());
        let stale = lease_view(&lease("m", Some("alice"), 7200), now());
        let grant = |granted_to: Option<&'static str>, running: bool| {
            Some(Grant {
                granted_to,
                coming_up: !running,
            })
        };
        // The rows without an active claim read as without a broker.
        assert_eq!(
            member_state(None, None, grant(None, false)),
            MemberState::Free
        );
        assert_eq!(
            member_state(None, Some(&stale), grant(None, false)),
            MemberState::FreeStaleLease
        );
        // The Lease gone, the broker's own grant still on the VM: it is being released (with
        // its label, or without it while a reset is owed); an administrator's label the broker
        // never granted is assigned the label-only way.
        assert_eq!(
            member_state(None, None, grant(Some("alice"), false)),
            MemberState::Releasing
        );
        assert_eq!(
            member_state(Some("alice"), None, grant(Some("alice"), true)),
            MemberState::Releasing
        );
        assert!(!MemberState::Releasing.claimable());
        assert_eq!(
            member_state(Some("alice"), None, grant(None, true)),
            MemberState::AssignedLegacy
        );
        assert_eq!(
            member_state(Some("alice"), None, grant(Some("bob"), true)),
            MemberState::AssignedLegacy
        );
        assert_eq!(
            member_state(Some("alice"), Some(&stale), grant(Some("alice"), true)),
            MemberState::AssignedLeaseExpired
        );
        // The Lease alone: the broker has not labelled it yet.
        assert_eq!(
            member_state(None, Some(&active), grant(None, false)),
            MemberState::Granting
        );
        // Labelled, not bound yet; bound, not running yet; all three: assigned.
        assert_eq!(
            member_state(Some("alice"), Some(&active), grant(None, true)),
            MemberState::Granting
        );
        assert_eq!(
            member_state(Some("alice"), Some(&active), grant(Some("alice"), false)),
            MemberState::Granting
        );
        assert_eq!(
            member_state(Some("alice"), Some(&active), grant(Some("alice"), true)),
            MemberState::Assigned
        );
        // A VM its holder stopped (halted, no reason): the claim is complete.
        let mut stopped = vm("dev-1", "dev", Some("alice"), Some("Stopped"));
        stopped.spec.run_strategy = Some("Halted".into());
        stopped.metadata.annotations = Some(BTreeMap::from([(
            GRANTED_TO_ANNOTATION.to_owned(),
            "alice".to_owned(),
        )]));
        assert!(!Grant::of(&stopped).coming_up);
        assert_eq!(
            member_state(Some("alice"), Some(&active), Some(Grant::of(&stopped))),
            MemberState::Assigned
        );
        // Started by the broker, not running yet: still coming up; a reason keeps it so too.
        stopped.spec.run_strategy = Some("Always".into());
        assert!(Grant::of(&stopped).coming_up);
        stopped.spec.run_strategy = Some("Halted".into());
        stopped.metadata.annotations.get_or_insert_default().insert(
            BROKER_REASON_ANNOTATION.to_owned(),
            "start refused".to_owned(),
        );
        assert!(Grant::of(&stopped).coming_up);
        // The grant still names the previous holder: a hand-over in progress.
        assert_eq!(
            member_state(Some("alice"), Some(&active), grant(Some("bob"), true)),
            MemberState::Granting
        );
        // The broker's own label (equal to its grant) follows a Lease whose holder changed.
        assert_eq!(
            member_state(Some("bob"), Some(&active), grant(Some("bob"), true)),
            MemberState::Granting
        );
        // A label someone else wrote (not the broker's grant) is a conflict still.
        assert_eq!(
            member_state(Some("bob"), Some(&active), grant(None, true)),
            MemberState::Conflict
        );
        assert_eq!(
            member_state(Some("bob"), Some(&active), grant(Some("alice"), true)),
            MemberState::Conflict
        );
        assert!(!MemberState::Granting.claimable());
        assert_eq!(MemberState::Granting.label(), "granting");
    }

    #[test]
    fn a_granting_members_view_carries_the_brokers_reason() {
        let mut labelled = vm("dev-1", "dev", Some("alice"), Some("Stopped"));
        let reason = "no node has a free nvidia.com/GA102 for dev-1";
        labelled.metadata.annotations = Some(BTreeMap::from([
            (GRANTED_TO_ANNOTATION.to_owned(), "alice".to_owned()),
            (BROKER_REASON_ANNOTATION.to_owned(), reason.to_owned()),
        ]));
        let held = lease("dev-1", Some("alice"), 10);
        let view = member_view_on(&labelled, Some(&held), now(), ClaimSide::Broker);
        assert_eq!(view.state, MemberState::Granting);
        assert_eq!(view.state_label, "granting");
        assert_eq!(view.broker_reason.as_deref(), Some(reason));
        assert_eq!(view.holder.as_deref(), Some("alice"));
        // The same VM on a cluster without a broker: assigned, as the SPEC's table says.
        let client = member_view(&labelled, Some(&held), now());
        assert_eq!(client.state, MemberState::Assigned);
        labelled.status = Some(crate::resources::VirtualMachineStatus {
            printable_status: Some("Running".into()),
            ..Default::default()
        });
        let pools = group_pools_on([&labelled], [&held], now(), ClaimSide::Broker);
        assert_eq!(pools[0].members[0].state, MemberState::Assigned);
        assert_eq!(pools[0].counts.claimed, 1);
    }

    #[test]
    fn a_lease_without_holder_is_stale_and_expiry_is_exact() {
        let l = lease_view(&lease("m", None, 0), now());
        assert!(!l.active);
        let l = lease_view(&lease("m", Some("bob"), 3600), now());
        assert!(!l.active, "expiring exactly now is no longer active");
        assert_eq!(l.expires_at, Some(now()));
        let l = lease_view(&lease("m", Some("bob"), 3599), now());
        assert!(l.active);
    }

    #[test]
    fn a_renew_time_in_the_future_is_reported() {
        let l = lease_view(&lease("m", Some("bob"), -600), now());
        assert!(l.renew_time_in_future);
        let l = lease_view(&lease("m", Some("bob"), -2), now());
        assert!(!l.renew_time_in_future, "clock resolution is tolerated");
    }

    #[test]
    fn grouping_joins_leases_and_orders_members() {
        let vms = [
            vm("dev-10", "dev", None, Some("Stopped")),
            vm("dev-2", "dev", Some("alice"), Some("Running")),
            vm("dev-1", "dev", None, None),
            vm("other-1", "other", Some("b32.mfwgsy3f"), None),
        ];
        let leases = [lease("dev-2", Some("alice"), 60)];
        let pools = group_pools(&vms, &leases, now());
        assert_eq!(pools.len(), 2);
        let dev = &pools[0];
        assert_eq!(dev.name, "dev");
        let names: Vec<_> = dev.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["dev-1", "dev-2", "dev-10"]);
        assert_eq!(dev.members[0].power, "Unknown");
        assert_eq!(dev.members[1].state, MemberState::Assigned);
        assert_eq!(dev.members[1].holder.as_deref(), Some("alice"));
        assert_eq!(
            dev.counts,
            PoolCounts {
                free: 2,
                claimed: 1,
                total: 3
            }
        );
        let other = &pools[1];
        assert_eq!(other.members[0].state, MemberState::AssignedLegacy);
        assert_eq!(other.members[0].holder.as_deref(), Some("alice"));
        assert_eq!(
            next_expiry(&pools, now()),
            Some(now() + SignedDuration::from_secs(3540))
        );
    }
}
