//! When a managed pool's claim is reclaimed, and why (SPEC "Pool policy and lifecycle"): the
//! one rule the broker acts on and the clients show as a countdown, so they never disagree.
//!
//! A claim is reclaimed at the earliest of:
//! - **disconnected**: its Lease expired (`renewTime + leaseDurationSeconds`, the pool's
//!   `disconnectGrace`); clients renew while the holder has a session open, so this is
//!   `disconnectGrace` after the last session closed. The broker acts its reclaim margin later
//!   (clock skew between the renewing client and the API server);
//! - **maxSession**: `acquireTime + maxSession`; nothing extends it;
//! - **idle**: the guest reported no logged-in user (KubeVirt's `userlist` subresource, read by
//!   the broker, which records the first such reading as the VM annotation
//!   [`crate::names::IDLE_SINCE_ANNOTATION`]) for `idleTimeout`, counted from that reading or
//!   from the holder's last **Keep** ([`crate::names::KEPT_AT_ANNOTATION`] on the Lease) or
//!   from `acquireTime` (a reading before this claim began is another claim's), whichever is
//!   latest.
//!
//! **What counts** ([`trusted_times`], SPEC "Pool policy and lifecycle"): every time above but
//! the idle reading is written by the holder on their own Lease, so each is read as the holder
//! could have bent it, and only a bend that *shortens* the claim is believed:
//! - the claim's start is the earlier of the Lease's `acquireTime` and the claimed-at time the
//!   broker recorded on the member when it first granted this holder (its own clock; the guard
//!   lets only the broker and administrators write it, and the broker never moves it forward
//!   for the same holder), so an `acquireTime` rewritten into the future moves nothing;
//! - a `leaseDurationSeconds` longer than the pool's `disconnectGrace` counts as
//!   `disconnectGrace`;
//! - a Keep time ahead of the API server's clock (by more than
//!   [`crate::lease::FUTURE_TOLERANCE`]) is no Keep.
//!
//! The holder is told [`notice_lead`] before ([`NOTICE`], five minutes, or half the rule's own
//! duration when that is shorter, so a 20 s `maxSession` is announced at 10 s rather than at its
//! start; the app's notice with **Keep**): Keep renews the Lease
//! and records the time it was pressed, which postpones a disconnect or idle reclaim but never
//! a `maxSession` one.

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::Policy;
use crate::lease::{FUTURE_TOLERANCE, LeaseView};
use crate::names::encode_identity;

/// How long before a reclaim the holder is told (five minutes).
pub const NOTICE: SignedDuration = SignedDuration::from_secs(300);

/// Why a claim is (to be) reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum ReclaimWhy {
    /// The Lease expired: no session renewed it for `disconnectGrace`.
    Disconnected,
    /// `maxSession` since `acquireTime` passed.
    MaxSession,
    /// No user was logged in to the guest for `idleTimeout`.
    Idle,
}

impl ReclaimWhy {
    /// The Event's and the audit's word: `disconnected`, `maxSession`, `idle`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimWhy::Disconnected => "disconnected",
            ReclaimWhy::MaxSession => "maxSession",
            ReclaimWhy::Idle => "idle",
        }
    }
}

/// The times of one claim that the rule reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimTimes {
    /// The Lease's `acquireTime`.
    pub acquired_at: Option<Timestamp>,
    /// The Lease's `renewTime + leaseDurationSeconds`.
    pub expires_at: Option<Timestamp>,
    /// The VM annotation [`crate::names::IDLE_SINCE_ANNOTATION`]: since when the guest has
    /// reported no logged-in user; `None` while someone is logged in (or never read).
    pub idle_since: Option<Timestamp>,
    /// The Lease annotation [`crate::names::KEPT_AT_ANNOTATION`]: the holder's last Keep.
    pub kept_at: Option<Timestamp>,
}

/// A claim's times as they are written on the cluster, before [`trusted_times`] reads them.
#[derive(Debug, Clone, Copy)]
pub struct WrittenTimes<'a> {
    /// The claim Lease, read with [`crate::lease::lease_view`] (the holder writes its times and
    /// duration).
    pub lease: &'a LeaseView,
    /// When the broker first granted this holder ([`recorded_start`]): the claimed-at time it
    /// wrote on the member, in its own clock.
    pub recorded_start: Option<Timestamp>,
    /// The Lease annotation [`crate::names::KEPT_AT_ANNOTATION`], as the holder wrote it.
    pub kept_at: Option<Timestamp>,
    /// The VM annotation [`crate::names::IDLE_SINCE_ANNOTATION`] (the broker's reading).
    pub idle_since: Option<Timestamp>,
}

/// When the broker first granted `holder` the member: the VM's claimed-at annotation
/// (`claimed_at`, as written) when the VM's granted-to annotation (`granted_to`) names
/// `holder` (encoded as the assigned-to label, [`encode_identity`]), i.e. when the broker wrote
/// it for this holder's grant; `None` otherwise (not granted yet, granted to someone else, or
/// not a time).
pub fn recorded_start(
    granted_to: Option<&str>,
    claimed_at: Option<&str>,
    holder: &str,
) -> Option<Timestamp> {
    (granted_to == Some(encode_identity(holder).as_str()))
        .then_some(claimed_at)
        .flatten()
        .and_then(|c| c.parse().ok())
}

/// The times of a claim that the reclaim rule may believe, as of `now` (the API server's time),
/// in a pool with `policy` (see the module doc, "What counts"): the start is the earlier of
/// `acquireTime` and [`WrittenTimes::recorded_start`]; the expiry is the Lease's own
/// (`renewTime`, else `acquireTime`, plus its duration) but no later than `disconnectGrace`
/// after that time; a Keep later than `now` plus
/// [`FUTURE_TOLERANCE`] is dropped. The broker, the views' countdowns and Keep all read a claim
/// through this, so none of them can be told a longer claim than another.
pub fn trusted_times(policy: &Policy, written: &WrittenTimes<'_>, now: Timestamp) -> ClaimTimes {
    let lease = written.lease;
    let acquired_at = match (lease.acquired_at, written.recorded_start) {
        (Some(a), Some(r)) => Some(a.min(r)),
        (a, r) => a.or(r),
    };
    // The Lease's own expiry (crate::lease::lease_view), no later than disconnectGrace after
    // the time it counts from.
    let cap = lease.renewed_at.or(lease.acquired_at).map(|last| {
        last.checked_add(policy.disconnect_grace)
            .unwrap_or(Timestamp::MAX)
    });
    let expires_at = lease
        .expires_at
        .map(|end| cap.map_or(end, |cap| end.min(cap)));
    let latest_keep = now.checked_add(FUTURE_TOLERANCE).unwrap_or(Timestamp::MAX);
    ClaimTimes {
        acquired_at,
        expires_at,
        idle_since: written.idle_since,
        kept_at: written.kept_at.filter(|k| *k <= latest_keep),
    }
}

/// The next reclaim of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ReclaimDue {
    /// When (the API server's clock; the broker adds its margin to a disconnect).
    #[cfg_attr(feature = "bindings", specta(type = String))]
    pub at: Timestamp,
    /// Why.
    pub why: ReclaimWhy,
    /// Whether Keep postpones it (not a `maxSession` end).
    pub keepable: bool,
    /// When the holder is told: `at` less [`notice_lead`].
    #[cfg_attr(feature = "bindings", specta(type = String))]
    pub notice_at: Timestamp,
}

impl ReclaimDue {
    /// Whether the holder should be told now: `now` is at or past [`ReclaimDue::notice_at`].
    pub fn notice_due(&self, now: Timestamp) -> bool {
        now >= self.notice_at
    }
}

/// How long before a reclaim for `why` its holder is told: [`NOTICE`], or half the rule's own
/// duration in `policy` (`disconnectGrace` for a disconnect) when that is shorter.
pub fn notice_lead(policy: &Policy, why: ReclaimWhy) -> SignedDuration {
    let limit = match why {
        ReclaimWhy::Disconnected => Some(policy.disconnect_grace),
        ReclaimWhy::MaxSession => policy.max_session,
        ReclaimWhy::Idle => policy.idle_timeout,
    };
    limit.map_or(NOTICE, |l| NOTICE.min(l / 2))
}

/// The next reclaim of a claim with `times` in a pool with `policy`: the earliest of the three
/// rules above (a tie goes to `maxSession`, which Keep cannot move); `None` when no rule
/// applies (no expiry known and no limits).
pub fn due(policy: &Policy, times: &ClaimTimes) -> Option<ReclaimDue> {
    let reclaim = |at: Timestamp, why: ReclaimWhy| ReclaimDue {
        at,
        why,
        keepable: why != ReclaimWhy::MaxSession,
        notice_at: at.checked_sub(notice_lead(policy, why)).unwrap_or(at),
    };
    let max_session = policy
        .max_session
        .zip(times.acquired_at)
        .and_then(|(limit, at)| at.checked_add(limit).ok())
        .map(|at| reclaim(at, ReclaimWhy::MaxSession));
    let idle = policy
        .idle_timeout
        .zip(times.idle_since)
        .and_then(|(limit, since)| {
            let from = [Some(since), times.kept_at, times.acquired_at]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(since);
            from.checked_add(limit).ok()
        })
        .map(|at| reclaim(at, ReclaimWhy::Idle));
    let disconnected = times
        .expires_at
        .map(|at| reclaim(at, ReclaimWhy::Disconnected));
    [max_session, idle, disconnected]
        .into_iter()
        .flatten()
        .min_by_key(|d| d.at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DesktopPoolSpec, OnRelease};

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn policy(max_session: Option<&str>, idle: Option<&str>) -> Policy {
        DesktopPoolSpec {
            golden: "g".into(),
            size: 1,
            max_session: max_session.map(Into::into),
            idle_timeout: idle.map(Into::into),
            on_release: Some(OnRelease::Keep),
            ..Default::default()
        }
        .policy()
        .unwrap()
    }

    #[test]
    fn an_expiring_lease_alone_is_a_disconnect() {
        let times = ClaimTimes {
            acquired_at: Some(t("2026-12-04T10:00:00Z")),
            expires_at: Some(t("2026-12-04T11:00:00Z")),
            ..Default::default()
        };
        let d = due(&policy(None, None), &times).unwrap();
        assert_eq!(d.why, ReclaimWhy::Disconnected);
        assert_eq!(d.at, t("2026-12-04T11:00:00Z"));
        assert!(d.keepable);
        assert!(!d.notice_due(t("2026-12-04T10:54:59Z")));
        assert!(d.notice_due(t("2026-12-04T10:55:00Z")));
    }

    #[test]
    fn max_session_wins_when_earlier_or_tied_and_cannot_be_kept() {
        let times = ClaimTimes {
            acquired_at: Some(t("2026-12-04T10:00:00Z")),
            expires_at: Some(t("2026-12-04T11:00:00Z")),
            ..Default::default()
        };
        let d = due(&policy(Some("30m"), None), &times).unwrap();
        assert_eq!((d.why, d.keepable), (ReclaimWhy::MaxSession, false));
        assert_eq!(d.at, t("2026-12-04T10:30:00Z"));
        let d = due(&policy(Some("1h"), None), &times).unwrap();
        assert_eq!(d.why, ReclaimWhy::MaxSession);
    }

    #[test]
    fn idle_counts_from_the_later_of_the_reading_and_the_last_keep() {
        let mut times = ClaimTimes {
            acquired_at: Some(t("2026-12-04T10:00:00Z")),
            expires_at: Some(t("2026-12-04T12:00:00Z")),
            idle_since: Some(t("2026-12-04T10:10:00Z")),
            kept_at: None,
        };
        let p = policy(None, Some("30m"));
        let d = due(&p, &times).unwrap();
        assert_eq!((d.why, d.at), (ReclaimWhy::Idle, t("2026-12-04T10:40:00Z")));
        times.kept_at = Some(t("2026-12-04T10:36:00Z"));
        assert_eq!(due(&p, &times).unwrap().at, t("2026-12-04T11:06:00Z"));
        times.kept_at = Some(t("2026-12-04T09:00:00Z"));
        assert_eq!(due(&p, &times).unwrap().at, t("2026-12-04T10:40:00Z"));
        times.idle_since = Some(t("2026-12-04T09:30:00Z"));
        assert_eq!(
            due(&p, &times).unwrap().at,
            t("2026-12-04T10:30:00Z"),
            "an idle reading from before acquireTime counts from acquireTime"
        );
        times.idle_since = None;
        assert_eq!(due(&p, &times).unwrap().why, ReclaimWhy::Disconnected);
    }

    #[test]
    fn the_notice_comes_five_minutes_or_half_a_shorter_rule_before() {
        let times = ClaimTimes {
            acquired_at: Some(t("2026-12-04T10:00:00Z")),
            expires_at: Some(t("2026-12-04T12:00:00Z")),
            ..Default::default()
        };
        let d = due(&policy(Some("20s"), None), &times).unwrap();
        assert_eq!(d.notice_at, t("2026-12-04T10:00:10Z"));
        assert!(!d.notice_due(t("2026-12-04T10:00:09Z")));
        assert!(d.notice_due(t("2026-12-04T10:00:10Z")));
        let d = due(&policy(Some("1h"), None), &times).unwrap();
        assert_eq!(d.notice_at, t("2026-12-04T10:55:00Z"));
        let p = policy(None, Some("1h"));
        assert_eq!(notice_lead(&p, ReclaimWhy::Idle), NOTICE);
        assert_eq!(notice_lead(&p, ReclaimWhy::MaxSession), NOTICE, "no limit");
    }

    fn judged(acquired: &str, renewed: &str, seconds: i32) -> LeaseView {
        LeaseView {
            holder: Some("alice".into()),
            acquired_at: Some(t(acquired)),
            renewed_at: Some(t(renewed)),
            duration_seconds: Some(seconds),
            expires_at: t(renewed)
                .checked_add(SignedDuration::from_secs(i64::from(seconds)))
                .ok(),
            ..Default::default()
        }
    }

    #[test]
    fn only_what_shortens_a_claim_is_believed_of_what_its_holder_wrote() {
        let now = t("2026-12-04T12:00:00Z");
        let p = DesktopPoolSpec {
            golden: "g".into(),
            size: 1,
            disconnect_grace: Some("10m".into()),
            max_session: Some("1h".into()),
            idle_timeout: Some("30m".into()),
            ..Default::default()
        }
        .policy()
        .unwrap();
        let lease = judged("8999-01-01T00:00:00Z", "2026-12-04T11:59:00Z", 604_800);
        let written = WrittenTimes {
            lease: &lease,
            recorded_start: Some(t("2026-12-04T11:30:00Z")),
            kept_at: Some(t("2027-01-01T00:00:00Z")),
            idle_since: Some(t("2026-12-04T11:40:00Z")),
        };
        let times = trusted_times(&p, &written, now);
        assert_eq!(times.acquired_at, Some(t("2026-12-04T11:30:00Z")));
        assert_eq!(times.expires_at, Some(t("2026-12-04T12:09:00Z")));
        assert_eq!(times.kept_at, None, "a Keep ahead of the clock");
        assert_eq!(times.idle_since, Some(t("2026-12-04T11:40:00Z")));
        // An earlier acquireTime than the record shortens the claim: believed.
        let early = judged("2026-12-04T11:00:00Z", "2026-12-04T11:59:00Z", 60);
        let times = trusted_times(
            &p,
            &WrittenTimes {
                lease: &early,
                kept_at: Some(t("2026-12-04T12:00:04Z")),
                ..written
            },
            now,
        );
        assert_eq!(times.acquired_at, Some(t("2026-12-04T11:00:00Z")));
        assert_eq!(times.expires_at, Some(t("2026-12-04T12:00:00Z")));
        assert_eq!(
            times.kept_at,
            Some(t("2026-12-04T12:00:04Z")),
            "within the tolerance"
        );
        // No record yet (not granted): the Lease's own start.
        let times = trusted_times(
            &p,
            &WrittenTimes {
                lease: &early,
                recorded_start: None,
                ..written
            },
            now,
        );
        assert_eq!(times.acquired_at, Some(t("2026-12-04T11:00:00Z")));
    }

    #[test]
    fn the_recorded_start_is_the_holders_only_when_the_broker_granted_them() {
        let at = Some("2026-12-04T11:30:00Z");
        assert_eq!(
            recorded_start(Some("alice"), at, "alice"),
            Some(t("2026-12-04T11:30:00Z"))
        );
        assert_eq!(recorded_start(Some("bob"), at, "alice"), None);
        assert_eq!(recorded_start(None, at, "alice"), None);
        assert_eq!(recorded_start(Some("alice"), Some("soon"), "alice"), None);
        let sa = "system:serviceaccount:corral-vms:dave";
        assert!(recorded_start(Some(&encode_identity(sa)), at, sa).is_some());
    }

    #[test]
    fn nothing_known_is_nothing_due() {
        assert_eq!(
            due(&policy(Some("1h"), Some("1h")), &ClaimTimes::default()),
            None
        );
    }
}
