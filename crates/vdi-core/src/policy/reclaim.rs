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
//!   [`crate::labels::IDLE_SINCE_ANNOTATION`]) for `idleTimeout`, counted from that reading or
//!   from the holder's last **Keep** ([`crate::labels::KEPT_AT_ANNOTATION`] on the Lease) or
//!   from `acquireTime` (a reading before this claim began is another claim's), whichever is
//!   latest.
//!
//! The holder is told [`notice_lead`] before ([`NOTICE`], five minutes, or half the rule's own
//! duration when that is shorter, so a 20 s `maxSession` is announced at 10 s rather than at its
//! start; the app's notice with **Keep**): Keep renews the Lease
//! and records the time it was pressed, which postpones a disconnect or idle reclaim but never
//! a `maxSession` one.

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::Policy;

/// How long before a reclaim the holder is told (five minutes).
pub const NOTICE: SignedDuration = SignedDuration::from_secs(300);

/// Why a claim is (to be) reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, specta::Type)]
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
    /// The VM annotation [`crate::labels::IDLE_SINCE_ANNOTATION`]: since when the guest has
    /// reported no logged-in user; `None` while someone is logged in (or never read).
    pub idle_since: Option<Timestamp>,
    /// The Lease annotation [`crate::labels::KEPT_AT_ANNOTATION`]: the holder's last Keep.
    pub kept_at: Option<Timestamp>,
}

/// The next reclaim of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimDue {
    /// When (the API server's clock; the broker adds its margin to a disconnect).
    #[specta(type = String)]
    pub at: Timestamp,
    /// Why.
    pub why: ReclaimWhy,
    /// Whether Keep postpones it (not a `maxSession` end).
    pub keepable: bool,
    /// When the holder is told: `at` less [`notice_lead`].
    #[specta(type = String)]
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

    #[test]
    fn nothing_known_is_nothing_due() {
        assert_eq!(
            due(&policy(Some("1h"), Some("1h")), &ClaimTimes::default()),
            None
        );
    }
}
