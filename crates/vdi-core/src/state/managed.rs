//! What a managed pool (one with a `DesktopPool`, [`crate::policy`]) adds to the pools view:
//! its policy or the policy's problem, counts per state (the warm buffer among them), and for
//! each held member when and why it will be reclaimed ([`crate::policy::reclaim::due`], the
//! rule the broker acts on), so the holder's countdown and notice never disagree with it.
//!
//! Pure: no request. The views are filled by [`super::group_pools_with`].

use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use super::{MemberState, MemberView};
use crate::lease::ClaimLease;
use crate::names::{
    CLAIMED_AT_ANNOTATION, GRANTED_TO_ANNOTATION, IDLE_SINCE_ANNOTATION, KEPT_AT_ANNOTATION,
};
use crate::policy::reclaim::{ClaimTimes, WrittenTimes, due, recorded_start, trusted_times};
use crate::policy::{Assignment, DesktopPool, OnRelease, Policy, duration};
use crate::resources::VirtualMachine;

/// A managed pool's policy as the views show it: durations in the spec's own text (`"15m"`,
/// [`duration::format`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PolicySummary {
    /// The golden VM members are cloned from.
    pub golden: String,
    /// Members wanted.
    pub size: u32,
    /// Free members kept running.
    pub warm: u32,
    /// The claim Lease's duration: how long a claim outlives its last session.
    pub disconnect_grace: String,
    /// The longest claim, from its Lease's `acquireTime`; `None`: no limit.
    pub max_session: Option<String>,
    /// How long the guest may have no logged-in user; `None`: never reclaimed for it.
    pub idle_timeout: Option<String>,
    /// What a release does to the member.
    pub on_release: OnRelease,
    /// How members are handed out: floating, or dedicated to their first holder.
    pub assignment: Assignment,
}

impl From<&Policy> for PolicySummary {
    fn from(p: &Policy) -> Self {
        PolicySummary {
            golden: p.golden.clone(),
            size: p.size,
            warm: p.warm,
            disconnect_grace: duration::format(p.disconnect_grace),
            max_session: p.max_session.map(duration::format),
            idle_timeout: p.idle_timeout.map(duration::format),
            on_release: p.on_release,
            assignment: p.assignment,
        }
    }
}

/// Members of a pool per state, as the pool's head shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct StateCounts {
    /// Claimable members (free, or with a stale Lease).
    pub free: u32,
    /// Claimable members that run now: the warm buffer (a claim gets one at once).
    pub warm: u32,
    /// Members someone holds or is claiming (assigned, label-only, expired but labelled,
    /// claiming).
    pub claimed: u32,
    /// Claims the broker is still granting.
    pub granting: u32,
    /// Members whose claim ended and that the broker is clearing (a moment, then free or
    /// removing).
    pub releasing: u32,
    /// Members the broker is removing (shrink, reset).
    pub removing: u32,
    /// Members in conflict or with an unreadable claim: an administrator's to look at.
    pub problems: u32,
    /// Members being cloned, as the DesktopPool's status says (0 for an unmanaged pool).
    pub creating: u32,
}

impl StateCounts {
    /// The counts of `members`, with `creating` as given.
    pub fn of(members: &[MemberView], creating: u32) -> Self {
        let mut counts = StateCounts {
            creating,
            ..StateCounts::default()
        };
        for m in members {
            match m.state {
                MemberState::Free | MemberState::FreeStaleLease => {
                    counts.free += 1;
                    if m.power == "Running" {
                        counts.warm += 1;
                    }
                }
                MemberState::Claiming
                | MemberState::AssignedLegacy
                | MemberState::Assigned
                | MemberState::AssignedLeaseExpired => counts.claimed += 1,
                MemberState::Granting => counts.granting += 1,
                MemberState::Releasing => counts.releasing += 1,
                MemberState::Removing => counts.removing += 1,
                MemberState::Conflict | MemberState::Unreadable => counts.problems += 1,
            }
        }
        counts
    }
}

/// A pool's DesktopPool read for the views: its policy, or why it cannot be read.
pub(super) struct Managed {
    pub(super) policy: Result<Policy, crate::policy::PolicyError>,
    pub(super) creating: u32,
    /// Its hourly usage history, as the broker keeps it in the status (the last
    /// [`crate::policy::usage::KEPT_HOURS`] buckets at most).
    pub(super) usage: Vec<crate::policy::usage::UsageBucket>,
}

impl Managed {
    /// What `pool` says.
    pub(super) fn of(pool: &DesktopPool) -> Self {
        Managed {
            policy: pool.policy(),
            creating: pool
                .status
                .as_ref()
                .and_then(|s| u32::try_from(s.creating).ok())
                .unwrap_or(0),
            usage: pool.status.as_ref().map_or_else(Vec::new, |s| {
                let kept = crate::policy::usage::KEPT_HOURS;
                s.usage[s.usage.len().saturating_sub(kept)..].to_vec()
            }),
        }
    }
}

/// An RFC 3339 annotation of `meta` read as an instant; absent or unreadable: `None`.
fn instant(
    annotations: &std::collections::BTreeMap<String, String>,
    key: &str,
) -> Option<Timestamp> {
    annotations.get(key).and_then(|v| v.parse().ok())
}

/// The times of `view`'s claim that the reclaim rule believes as of `now`
/// ([`trusted_times`]): its Lease's (as judged in the view), the claimed-at the broker recorded
/// for its holder on the VM, the VM's idle-since annotation and the Lease's kept-at annotation.
fn claim_times(
    policy: &Policy,
    view: &MemberView,
    vm: &VirtualMachine,
    lease: Option<&ClaimLease>,
    now: Timestamp,
) -> Option<ClaimTimes> {
    let judged = view.lease.as_ref()?;
    let annotation = |key: &str| vm.annotations().get(key).map(String::as_str);
    let written = WrittenTimes {
        lease: judged,
        recorded_start: judged.holder.as_deref().and_then(|holder| {
            recorded_start(
                annotation(GRANTED_TO_ANNOTATION),
                annotation(CLAIMED_AT_ANNOTATION),
                holder,
            )
        }),
        kept_at: lease.and_then(|l| instant(l.annotations(), KEPT_AT_ANNOTATION)),
        idle_since: instant(vm.annotations(), IDLE_SINCE_ANNOTATION),
    };
    Some(trusted_times(policy, &written, now))
}

/// Fills `view`'s reclaim fields when its member is held (an active Lease) in a pool with
/// `policy`, as of `now` (the API server's time).
pub(super) fn fill_reclaim(
    view: &mut MemberView,
    vm: &VirtualMachine,
    lease: Option<&ClaimLease>,
    policy: &Policy,
    now: Timestamp,
) {
    let held = view.lease.as_ref().is_some_and(|l| l.active)
        && !matches!(view.state, MemberState::Removing | MemberState::Unreadable);
    if !held {
        return;
    }
    let times = claim_times(policy, view, vm, lease, now);
    if let Some(next) = times.and_then(|times| due(policy, &times)) {
        view.reclaim_at = Some(next.at.to_string());
        view.reclaim_why = Some(next.why);
        view.notice = next.notice_due(now);
        view.keepable = next.keepable;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ClaimSide, PoolView, group_pools_with, next_expiry};
    use super::*;
    use crate::names::{BROKER_USER, POOL_LABEL, REMOVING_ANNOTATION};
    use crate::policy::DesktopPoolSpec;
    use crate::policy::reclaim::ReclaimWhy;
    use crate::policy::release::ReleaseEffect;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-12-04T12:00:00Z".parse().unwrap()
    }

    fn vm(name: &str, power: &str, annotations: serde_json::Value) -> VirtualMachine {
        let mut vm = VirtualMachine::new(name, Default::default());
        vm.metadata.namespace = Some("ns".into());
        vm.metadata.labels = Some([(POOL_LABEL.to_owned(), "p".to_owned())].into());
        vm.metadata.annotations = Some(serde_json::from_value(annotations).unwrap());
        vm.status = Some(crate::resources::VirtualMachineStatus {
            printable_status: Some(power.into()),
            ..Default::default()
        });
        vm
    }

    fn lease(
        member: &str,
        holder: &str,
        acquired: &str,
        annotations: serde_json::Value,
    ) -> ClaimLease {
        serde_json::from_value(json!({
            "metadata": { "name": format!("corral-vdi-{member}"), "namespace": "ns",
                          "annotations": annotations },
            "spec": { "holderIdentity": holder, "acquireTime": acquired,
                      "renewTime": "2026-12-04T11:59:00Z", "leaseDurationSeconds": 120 },
        }))
        .unwrap()
    }

    fn desktop_pool(spec: DesktopPoolSpec) -> DesktopPool {
        let mut pool = DesktopPool::new("p", spec);
        pool.metadata.namespace = Some("ns".into());
        pool
    }

    fn spec(max_session: Option<&str>, idle: Option<&str>) -> DesktopPoolSpec {
        DesktopPoolSpec {
            golden: "gold".into(),
            size: 5,
            warm: Some(1),
            disconnect_grace: Some("2m".into()),
            max_session: max_session.map(Into::into),
            idle_timeout: idle.map(Into::into),
            ..Default::default()
        }
    }

    fn group(vms: &[VirtualMachine], leases: &[ClaimLease], pools: &[DesktopPool]) -> PoolView {
        let mut all = group_pools_with(vms, leases, pools, now(), ClaimSide::Client);
        assert_eq!(all.len(), 1);
        all.remove(0)
    }

    #[test]
    fn a_held_member_of_a_managed_pool_shows_its_next_reclaim_and_the_notice() {
        let vms = [
            vm("p-1", "Running", json!({})),
            vm(
                "p-2",
                "Running",
                json!({ IDLE_SINCE_ANNOTATION: "2026-12-04T11:30:00Z" }),
            ),
        ];
        let leases = [
            lease("p-1", "alice", "2026-12-04T11:00:00Z", json!({})),
            lease(
                "p-2",
                "bob",
                "2026-12-04T11:00:00Z",
                json!({ KEPT_AT_ANNOTATION: "2026-12-04T11:40:00Z" }),
            ),
        ];
        let pool = group(
            &vms,
            &leases,
            &[desktop_pool(spec(Some("1h3m"), Some("30m")))],
        );
        assert!(pool.managed && pool.policy_problem.is_none());
        let policy = pool.policy.as_ref().unwrap();
        assert_eq!((policy.size, policy.warm), (5, 1));
        assert_eq!(policy.disconnect_grace, "2m");
        // alice: maxSession (12:03) before the Lease's end (12:01)? No: the Lease ends first.
        let alice = &pool.members[0];
        assert_eq!(alice.reclaim_why, Some(ReclaimWhy::Disconnected));
        assert_eq!(alice.reclaim_at.as_deref(), Some("2026-12-04T12:01:00Z"));
        assert!(alice.notice && alice.keepable);
        // bob: idle since 11:30, kept at 11:40, so idle until 12:10 — after the Lease's end.
        let bob = &pool.members[1];
        assert_eq!(bob.reclaim_why, Some(ReclaimWhy::Disconnected));
        // The next change of the view: the Lease's end (12:01) is the earliest.
        assert_eq!(
            next_expiry(std::slice::from_ref(&pool), now()),
            Some("2026-12-04T12:01:00Z".parse().unwrap())
        );
        // Unmanaged, the same members show no reclaim.
        let plain = group(&vms, &leases, &[]);
        assert!(!plain.managed && plain.policy.is_none());
        assert!(
            plain
                .members
                .iter()
                .all(|m| m.reclaim_at.is_none() && !m.notice)
        );
    }

    #[test]
    fn a_held_member_above_a_smaller_size_is_removed_when_released_and_says_so() {
        let vms = [
            vm("p-1", "Running", json!({})),
            vm("p-6", "Running", json!({})),
            vm("p-7", "Stopped", json!({})),
        ];
        let leases = [lease("p-6", "alice", "2026-12-04T11:00:00Z", json!({}))];
        // spec(..) has size 5: p-6 and p-7 are above it.
        let pool = group(&vms, &leases, &[desktop_pool(spec(None, None))]);
        let note = |name: &str| {
            let m = pool.members.iter().find(|m| m.name == name).unwrap();
            (m.on_release.effect, m.state_note.as_deref())
        };
        assert_eq!(
            note("p-6"),
            (
                ReleaseEffect::Remove { size: 5 },
                Some("removed when released")
            )
        );
        // Free: it goes now, nobody to tell. Within the size: no note.
        assert_eq!(note("p-7"), (ReleaseEffect::Remove { size: 5 }, None));
        assert_eq!(note("p-1").1, None);
        assert_eq!(
            pool.resize_note.as_deref(),
            Some("resizing to 5: p-7 is being removed; p-6 goes when released")
        );
        // Unmanaged, nothing is removed.
        let plain = group(&vms, &leases, &[]);
        assert!(plain.members.iter().all(|m| m.state_note.is_none()));
        assert_eq!(plain.resize_note, None);
    }

    #[test]
    fn max_session_is_not_keepable() {
        let vms = [vm("p-1", "Running", json!({}))];
        let leases = [lease("p-1", "alice", "2026-12-04T11:00:00Z", json!({}))];
        let pool = group(&vms, &leases, &[desktop_pool(spec(Some("1h"), None))]);
        let m = &pool.members[0];
        assert_eq!(m.reclaim_why, Some(ReclaimWhy::MaxSession));
        assert_eq!(m.reclaim_at.as_deref(), Some("2026-12-04T12:00:00Z"));
        assert!(m.notice && !m.keepable);
    }

    #[test]
    fn removing_members_are_nobodys_and_counted_apart_with_the_warm_buffer() {
        let vms = [
            vm("p-1", "Running", json!({})),
            vm("p-2", "Stopped", json!({})),
            vm("p-3", "Running", json!({ REMOVING_ANNOTATION: "shrink" })),
            vm("p-4", "Stopped", json!({})),
            vm("p-5", "Running", json!({})),
        ];
        let leases = [
            lease("p-4", BROKER_USER, "2026-12-04T11:59:00Z", json!({})),
            lease("p-5", "alice", "2026-12-04T11:59:00Z", json!({})),
        ];
        let mut bad = spec(None, None);
        bad.size = 0;
        let pool = group(&vms, &leases, &[desktop_pool(bad)]);
        assert!(pool.managed && pool.policy.is_none());
        assert_eq!(
            pool.policy_problem.as_deref(),
            Some("spec.size: 0 is out of range (1 to 500)")
        );
        let (shrink, broker) = (&pool.members[2], &pool.members[3]);
        assert_eq!(
            (shrink.state, shrink.state_label.as_str()),
            (MemberState::Removing, "removing (shrink)")
        );
        assert_eq!(
            (broker.state, broker.state_label.as_str()),
            (MemberState::Removing, "removing")
        );
        assert!(!shrink.claimable && shrink.holder.is_none() && broker.holder.is_none());
        assert_eq!(
            pool.state_counts,
            StateCounts {
                free: 2,
                warm: 1,
                claimed: 1,
                granting: 0,
                releasing: 0,
                removing: 2,
                problems: 0,
                creating: 0
            }
        );
        assert_eq!(pool.counts.claimed, 1, "the broker's Lease is no claim");
    }
}
