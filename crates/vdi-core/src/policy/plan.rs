//! The pool loop's rules, without a request: what one managed pool's members, as they are now,
//! ask the broker to do. Level-based like [`crate::decide`]: the plan depends only on the state
//! now, so a broker that restarts halfway through anything plans the rest of it.
//!
//! Members are `<pool>-<index>`, index 1 ..= size ([`vdi_core::pool::member_name`]). With `size`
//! and `warm` from the pool's [`vdi_core::policy::Policy`]:
//! - **Finish removals** (a member marked [`super::take::Removal`] whose Lease is the
//!   broker's): delete its VM; once the VM is gone, delete the Lease. A broker Lease on a VM
//!   without the mark (a crash between the two writes) is left [`SETTLE`] for the mark to
//!   land, then given back (deleted) when the member is within size, and the member marked
//!   when it is above. A mark whose Lease is gone is
//!   taken again; a mark whose Lease someone else holds actively is removed (the claim won).
//! - **Shrink**: every free member above `size` (no Lease, or one expired past the margin; no
//!   assigned-to label) is taken for removal, highest first. A claimed or claiming member above
//!   `size` stays until released, then goes.
//! - **Grow**: every index within `size` with neither VM nor claim Lease is cloned from the
//!   golden VM (also how a reset member comes back). A Lease without a VM and without an active
//!   holder is deleted first; an active one blocks its index (reported).
//! - **Warm**: of the free members within `size`, `warm` should run: the lowest-index stopped
//!   ones are started, extra running ones (highest first) stopped. Claimed members are never
//!   started or stopped here.

use super::take::Removal;

/// What the loop reads of a member's claim Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseSeen {
    /// No Lease.
    None,
    /// A Lease no one holds actively: no holder, or expired past the reclaim margin.
    Idle,
    /// A holder other than the broker, active (or unreadable, or being deleted: hands off).
    Claimed,
    /// Held by the broker ([`vdi_core::labels::BROKER_USER`]): a removal under way.
    Broker,
    /// Held by the broker for less than [`SETTLE`]: a removal just begun, whose mark may still
    /// be on its way (take_for_removal writes the Lease, then the mark), so an unmarked member
    /// is left alone rather than given back.
    Taking,
}

/// How long a broker Lease on an unmarked member is left for its mark to land before it is
/// taken for a crash between the two writes and given back (30 s).
pub const SETTLE: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// What the loop reads of a member's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VmSeen {
    /// KubeVirt's printableStatus says it runs or is on its way ([`vdi_core::claim::runs`]).
    pub running: bool,
    /// printableStatus `Stopped`: it can be started.
    pub stopped: bool,
    /// The assigned-to label is set (a claim, or an administrator's assignment).
    pub labelled: bool,
    /// [`vdi_core::labels::REMOVING_ANNOTATION`], read.
    pub removing: Option<Removal>,
    /// A deletionTimestamp is set.
    pub deleting: bool,
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
    /// Take these for removal ([`super::take::take_for_removal`]).
    pub take: Vec<(u32, Removal)>,
    /// Remove the removing mark (a claim won the member).
    pub unmark: Vec<u32>,
    /// Clone these from the golden VM.
    pub clone: Vec<u32>,
    /// Start these (warm buffer).
    pub start: Vec<u32>,
    /// Stop these (warm buffer).
    pub stop: Vec<u32>,
    /// Indices within size that a claim Lease without a VM keeps from being cloned.
    pub blocked: Vec<u32>,
    /// Claimed members above size: removed once released.
    pub waiting: Vec<u32>,
    /// The counts for the status.
    pub counts: Counts,
}

/// The status' counts ([`vdi_core::policy::DesktopPoolStatus`]).
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
        if m.claimed() {
            plan.counts.claimed += 1;
            if !within {
                plan.waiting.push(m.index);
            }
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
        plan.stop = free_running.into_iter().skip(warm).rev().collect();
    }
    plan
}

#[cfg(test)]
mod tests;
