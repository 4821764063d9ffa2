//! A managed pool's rules, without a request (SPEC "Pool policy and lifecycle"): what one
//! pool's members, as they are now, ask the broker to do, and so what a resize will do. The
//! broker's pool loop acts on [`plan`]; the app's settings dialog and `corral-vdi pool resize`
//! say what it will do with [`resize_preview`] over the same [`Seen`] ([`PoolObjects::seen`]):
//! one rule, read by all three. Level-based: the plan depends only on the state now, so a
//! broker that restarts halfway through anything plans the rest of it.
//!
//! Members are `<pool>-<index>`, index 1 ..= size ([`member_name`]). With `size`
//! and `warm` from the pool's [`super::Policy`]:
//! - **Finish removals** (a member marked [`Removal`] whose Lease is the
//!   broker's): delete its VM; once the VM is gone, delete the Lease. A broker Lease on a VM
//!   without the mark (a crash between the two writes) is left [`SETTLE`] for the mark to
//!   land, then given back (deleted) when the member is within size, and the member marked
//!   when it is above. A mark whose Lease is gone is
//!   taken again; a mark whose Lease someone else holds actively is removed (the claim won).
//! - **Shrink**: every free member above `size` (no Lease, or one expired past the margin; no
//!   assigned-to label) is taken for removal, highest first. A claimed or claiming member above
//!   `size` stays until released, then goes. A free member within `size` is never removed.
//! - **Grow**: every index within `size` with neither VM nor claim Lease is cloned from the
//!   golden VM (also how a reset member comes back). A Lease without a VM and without an active
//!   holder is deleted first; an active one blocks its index (reported).
//! - **Warm**: of the free members within `size`, `warm` should run: the lowest-index stopped
//!   ones are started, extra running ones (highest first) stopped, so the lowest running ones
//!   stay. Claimed members are never started or stopped here; a member whose claim ends while
//!   the buffer wants it ([`stays_warm`]) is restarted by the broker rather than stopped.

use std::collections::HashMap;
use std::ops::Deref;

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::lease::{ClaimLease, lease_view};
use crate::names::{
    ASSIGNED_TO_LABEL, BROKER_USER, OWNER_ANNOTATION, POOL_LABEL, REMOVING_ANNOTATION, member_name,
    member_of_lease,
};
use crate::resources::{VirtualMachine, runs};

/// How long after a claim Lease's expiry the broker waits before it counts the claim as gone
/// (a free member, a reclaim), unless started with another `--reclaim-margin-seconds`: 30 s,
/// room for a holder's renewal that is late by a loaded machine or a slow network.
pub const DEFAULT_RECLAIM_MARGIN: SignedDuration = SignedDuration::from_secs(30);

/// Why a member is removed: the value of [`REMOVING_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Removal {
    /// Its index is above the pool's size: deleted for good.
    Shrink,
    /// Released in a pool with `onRelease: reset`: deleted, then cloned again under the same
    /// name from the golden VM.
    Reset,
}

impl Removal {
    /// The annotation's value: `shrink`, `reset`.
    pub fn as_str(self) -> &'static str {
        match self {
            Removal::Shrink => "shrink",
            Removal::Reset => "reset",
        }
    }

    /// Reads an annotation's value; `None` for anything else.
    pub fn parse(value: &str) -> Option<Removal> {
        match value {
            "shrink" => Some(Removal::Shrink),
            "reset" => Some(Removal::Reset),
            _ => None,
        }
    }
}

/// What the loop reads of a member's claim Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseSeen {
    /// No Lease.
    None,
    /// A Lease no one holds actively: no holder, or expired past the reclaim margin.
    Idle,
    /// A holder other than the broker, active (or unreadable, or being deleted: hands off).
    Claimed,
    /// Held by the broker ([`BROKER_USER`]): a removal under way.
    Broker,
    /// Held by the broker for less than [`SETTLE`]: a removal just begun, whose mark may still
    /// be on its way (the broker writes the Lease, then the mark), so an unmarked member
    /// is left alone rather than given back.
    Taking,
}

/// How long a broker Lease on an unmarked member is left for its mark to land before it is
/// taken for a crash between the two writes and given back (30 s).
pub const SETTLE: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// What the loop reads of a member's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VmSeen {
    /// KubeVirt's printableStatus says it runs or is on its way ([`runs`]).
    pub running: bool,
    /// printableStatus `Stopped`: it can be started.
    pub stopped: bool,
    /// The assigned-to label is set (a claim, or an administrator's assignment).
    pub labelled: bool,
    /// [`REMOVING_ANNOTATION`], read.
    pub removing: Option<Removal>,
    /// A deletionTimestamp is set.
    pub deleting: bool,
    /// Someone owns it ([`crate::names::OWNER_ANNOTATION`], a dedicated pool's): never removed
    /// by a shrink.
    pub owned: bool,
}

/// One index of the pool as the loop sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The member's index (`<pool>-<index>`), from 1.
    pub index: u32,
    /// Its VM, if one exists.
    pub vm: Option<VmSeen>,
    /// Its claim Lease.
    pub lease: LeaseSeen,
}

/// What to do with the pool now (indices; every list in the order to act).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Delete these VMs (marked, Lease the broker's).
    pub delete_vms: Vec<u32>,
    /// Delete these Leases (the broker's on a gone or unmarked member; idle ones of gone
    /// members).
    pub delete_leases: Vec<u32>,
    /// Take these for removal (the broker's Lease, then the mark).
    pub take: Vec<(u32, Removal)>,
    /// Remove the removing mark (a claim won the member).
    pub unmark: Vec<u32>,
    /// Clone these from the golden VM.
    pub clone: Vec<u32>,
    /// Start these (warm buffer).
    pub start: Vec<u32>,
    /// Stop these (warm buffer).
    pub stop: Vec<u32>,
    /// Free members within size that run and stay running (warm buffer), lowest first.
    pub kept_warm: Vec<u32>,
    /// Indices within size that a claim Lease without a VM keeps from being cloned.
    pub blocked: Vec<u32>,
    /// Claimed members above size: removed once released.
    pub waiting: Vec<u32>,
    /// Owned members above size (a dedicated pool's): never removed by a shrink; an
    /// administrator frees them first.
    pub owned_above: Vec<u32>,
    /// The counts for the status.
    pub counts: Counts,
}

/// The status' counts ([`super::DesktopPoolStatus`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// VMs of the pool.
    pub members: i32,
    /// Members no one holds (not being removed).
    pub free: i32,
    /// Members with a claim (active Lease or assigned-to label).
    pub claimed: i32,
    /// Free members running.
    pub warm: i32,
    /// Members to be cloned.
    pub creating: i32,
    /// Members being removed.
    pub removing: i32,
}

impl Seen {
    /// Claimed: an active holder other than the broker, or the assigned-to label.
    fn claimed(&self) -> bool {
        self.lease == LeaseSeen::Claimed || self.vm.is_some_and(|v| v.labelled)
    }
}

/// Plans pool work for `size` and `warm` over `members` (any order; one entry per index that
/// has a VM or a Lease).
pub fn plan(size: u32, warm: u32, members: &[Seen]) -> Plan {
    let mut members = members.to_vec();
    members.sort_by_key(|m| m.index);
    let mut plan = Plan::default();
    let mut free_stopped = Vec::new();
    let mut free_running = Vec::new();
    for m in &members {
        let within = m.index >= 1 && m.index <= size;
        let Some(vm) = m.vm else {
            match m.lease {
                LeaseSeen::Broker | LeaseSeen::Taking | LeaseSeen::Idle => {
                    plan.delete_leases.push(m.index)
                }
                LeaseSeen::Claimed if within => plan.blocked.push(m.index),
                LeaseSeen::Claimed | LeaseSeen::None => {}
            }
            continue;
        };
        plan.counts.members += 1;
        if vm.deleting {
            plan.counts.removing += 1;
            continue;
        }
        match (vm.removing, m.lease) {
            (Some(_), LeaseSeen::Broker | LeaseSeen::Taking) => {
                plan.counts.removing += 1;
                plan.delete_vms.push(m.index);
                continue;
            }
            (Some(why), LeaseSeen::None | LeaseSeen::Idle) if !vm.labelled => {
                plan.counts.removing += 1;
                plan.take.push((m.index, why));
                continue;
            }
            (Some(_), _) => plan.unmark.push(m.index),
            (None, LeaseSeen::Taking) => {
                plan.counts.removing += 1;
                continue;
            }
            (None, LeaseSeen::Broker) if within => plan.delete_leases.push(m.index),
            (None, LeaseSeen::Broker) => {
                plan.counts.removing += 1;
                plan.take.push((m.index, Removal::Shrink));
                continue;
            }
            (None, _) => {}
        }
        if !within && vm.owned {
            plan.owned_above.push(m.index);
        }
        if m.claimed() {
            plan.counts.claimed += 1;
            if !within && !vm.owned {
                plan.waiting.push(m.index);
            }
            continue;
        }
        if !within && vm.owned {
            plan.counts.free += 1;
            continue;
        }
        if !within {
            plan.counts.removing += 1;
            plan.take.push((m.index, Removal::Shrink));
            continue;
        }
        plan.counts.free += 1;
        if vm.running {
            plan.counts.warm += 1;
            free_running.push(m.index);
        } else if vm.stopped && !matches!(m.lease, LeaseSeen::Broker | LeaseSeen::Taking) {
            free_stopped.push(m.index);
        }
    }
    // Shrink highest first.
    plan.take.sort_by_key(|t| std::cmp::Reverse(t.0));
    let taken: Vec<u32> = members.iter().map(|m| m.index).collect();
    plan.clone = (1..=size).filter(|i| !taken.contains(i)).collect();
    plan.counts.creating = plan.clone.len() as i32;
    let warm = warm as usize;
    if free_running.len() < warm {
        plan.start = free_stopped
            .into_iter()
            .take(warm - free_running.len())
            .collect();
    } else {
        plan.stop = free_running.split_off(warm).into_iter().rev().collect();
    }
    plan.kept_warm = free_running;
    plan
}

/// Whether member `index`, once its claim ends, is one the warm buffer keeps running: [`plan`]
/// over `seen` with that member free and running (no Lease, no label) keeps it
/// ([`Plan::kept_warm`]). The broker then restarts a member released with `onRelease: keep` (a fresh boot, every
/// stream of the last holder ended, its disk kept) instead of stopping it and starting it again
/// as the warm one; since the warm buffer keeps the lowest free members that run, a released
/// member below the running warm ones stays and the highest extra is stopped.
pub fn stays_warm(size: u32, warm: u32, seen: &[Seen], index: u32) -> bool {
    let freed: Vec<Seen> = seen
        .iter()
        .map(|s| match s.vm {
            Some(vm) if s.index == index => Seen {
                index,
                vm: Some(VmSeen {
                    running: true,
                    stopped: false,
                    labelled: false,
                    ..vm
                }),
                lease: LeaseSeen::None,
            },
            _ => *s,
        })
        .collect();
    plan(size, warm, &freed).kept_warm.contains(&index)
}

/// The index of `name` in `pool` (`<pool>-<index>`, written as [`member_name`] writes it).
pub fn index_of(pool: &str, name: &str) -> Option<u32> {
    let index: u32 = name.strip_prefix(pool)?.strip_prefix('-')?.parse().ok()?;
    (index >= 1 && member_name(pool, index) == name).then_some(index)
}

/// The index of the member of `pool` whose claim Lease is named `lease`
/// (`corral-vdi-<pool>-<index>`), or `None` when it is no claim Lease of `pool`: one rule for
/// the broker's pool loop, pool create (which refuses such a Lease as a leftover) and pool
/// delete (which removes it). `vm_pool` is what the VM named like that member says: `None` when
/// no such VM exists, `Some(label)` with its pool label (`Some(None)`: a VM in no pool). A
/// Lease named for a VM outside the pool is that VM's, never the pool's.
pub fn claim_of_pool(pool: &str, lease: &str, vm_pool: Option<Option<&str>>) -> Option<u32> {
    let index = index_of(pool, member_of_lease(lease)?)?;
    match vm_pool {
        None => Some(index),
        Some(Some(p)) if p == pool => Some(index),
        Some(_) => None,
    }
}

/// What the loop reads of a claim Lease at `now`, counting an active holder's claim as gone
/// `margin` after its expiry (see [`LeaseSeen`]).
pub fn lease_seen(lease: &ClaimLease, now: Timestamp, margin: SignedDuration) -> LeaseSeen {
    if lease.metadata.deletion_timestamp.is_some() {
        return LeaseSeen::Claimed;
    }
    let view = lease_view(lease, now);
    match view.holder.as_deref() {
        None => LeaseSeen::Idle,
        Some(BROKER_USER)
            if view
                .renewed_at
                .or(view.acquired_at)
                .and_then(|at| at.checked_add(SETTLE).ok())
                .is_some_and(|settled| settled > now) =>
        {
            LeaseSeen::Taking
        }
        Some(BROKER_USER) => LeaseSeen::Broker,
        Some(_) if view.problem.is_some() => LeaseSeen::Claimed,
        Some(_) => match view.expires_at.and_then(|e| e.checked_add(margin).ok()) {
            Some(end) if end <= now => LeaseSeen::Idle,
            _ => LeaseSeen::Claimed,
        },
    }
}

/// What the loop reads of a member's VM.
pub fn vm_seen(vm: &VirtualMachine) -> VmSeen {
    let power = vm.printable_status();
    VmSeen {
        running: runs(power),
        stopped: power == "Stopped",
        labelled: vm
            .labels()
            .get(ASSIGNED_TO_LABEL)
            .is_some_and(|l| !l.is_empty()),
        removing: vm
            .annotations()
            .get(REMOVING_ANNOTATION)
            .and_then(|w| Removal::parse(w)),
        deleting: vm.metadata.deletion_timestamp.is_some(),
        owned: vm
            .annotations()
            .get(OWNER_ANNOTATION)
            .is_some_and(|o| !o.is_empty()),
    }
}

/// One pool's member VMs and claim Leases, by index: what [`PoolObjects::gather`] finds of it
/// among the objects a caller holds (the broker's stores, the app's feed, a list). `V` and `L`
/// are whatever points at them (`&VirtualMachine`, `Arc<ClaimLease>`).
#[derive(Debug, Clone)]
pub struct PoolObjects<V, L> {
    /// The pool's members (labelled with its name, named `<pool>-<index>`).
    pub vms: HashMap<u32, V>,
    /// Their claim Leases (and those of indices without a VM).
    pub leases: HashMap<u32, L>,
}

impl<V, L> PoolObjects<V, L>
where
    V: Deref<Target = VirtualMachine>,
    L: Deref<Target = ClaimLease>,
{
    /// Finds pool `pool` of namespace `namespace` among `vms` (pool members, any pool and
    /// namespace: those labelled [`POOL_LABEL`]) and `leases` (any). A Lease counts for an
    /// index by [`claim_of_pool`].
    pub fn gather(
        namespace: &str,
        pool: &str,
        vms: impl IntoIterator<Item = V>,
        leases: impl IntoIterator<Item = L>,
    ) -> Self {
        let ns = Some(namespace);
        // Every VM's pool label by name, for the Leases named like one.
        let mut pools: HashMap<String, Option<String>> = HashMap::new();
        let mut members = HashMap::new();
        for vm in vms {
            if vm.metadata.namespace.as_deref() != ns {
                continue;
            }
            let label = vm.labels().get(POOL_LABEL).cloned();
            let ours = label.as_deref() == Some(pool);
            pools.insert(vm.name_any(), label);
            if ours && let Some(i) = index_of(pool, &vm.name_any()) {
                members.insert(i, vm);
            }
        }
        let mut claims = HashMap::new();
        for lease in leases {
            if lease.metadata.namespace.as_deref() != ns {
                continue;
            }
            let name = lease.name_any();
            let vm_pool = member_of_lease(&name)
                .and_then(|m| pools.get(m))
                .map(Option::as_deref);
            if let Some(i) = claim_of_pool(pool, &name, vm_pool) {
                claims.insert(i, lease);
            }
        }
        PoolObjects {
            vms: members,
            leases: claims,
        }
    }

    /// Each index that has a VM or a Lease, as [`plan`] reads it at `now`, an active holder's
    /// claim counted as gone `margin` after its expiry.
    pub fn seen(&self, now: Timestamp, margin: SignedDuration) -> Vec<Seen> {
        let mut indices: Vec<u32> = self.vms.keys().chain(self.leases.keys()).copied().collect();
        indices.sort_unstable();
        indices.dedup();
        indices
            .into_iter()
            .map(|index| Seen {
                index,
                vm: self.vms.get(&index).map(|vm| vm_seen(vm)),
                lease: self
                    .leases
                    .get(&index)
                    .map_or(LeaseSeen::None, |l| lease_seen(l, now, margin)),
            })
            .collect()
    }
}

/// What a resize of a pool to a new size does to its members, by name, highest index first:
/// what the app's settings dialog and `pool resize` say before the write, from [`plan`], the
/// broker's own rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizePreview {
    /// Free members above the size: the broker removes them now.
    pub now: Vec<String>,
    /// Claimed members above the size: removed once released (they stay until then).
    pub once_released: Vec<String>,
    /// Indices to clone (growth): `<pool>-<index>` names, lowest first.
    pub cloned: Vec<String>,
}

/// What resizing `pool` to `size` does, with its members `seen` as they are now ([`plan`] with
/// the size asked for; warm does not change what is removed).
pub fn resize_preview(pool: &str, size: u32, seen: &[Seen]) -> ResizePreview {
    let planned = plan(size, 0, seen);
    let name = |i: &u32| member_name(pool, *i);
    ResizePreview {
        now: planned
            .take
            .iter()
            .filter(|(i, why)| *why == Removal::Shrink && *i > size)
            .map(|(i, _)| name(i))
            .collect(),
        once_released: planned.waiting.iter().rev().map(name).collect(),
        cloned: planned.clone.iter().map(name).collect(),
    }
}

#[cfg(test)]
mod tests;
