//! The reclaim rules of managed pools (a DesktopPool whose policy reads; SPEC "Pool policy and
//! lifecycle"), on top of [`vdi_core::policy::reclaim::due`], the rule the clients show too.
//!
//! The broker acts on a disconnect its reclaim margin after the Lease's expiry (as in an
//! unmanaged pool), and on `maxSession` and `idleTimeout` at their time. The holder is told
//! [`vdi_core::policy::reclaim::notice_lead`] before (five minutes, or half the rule's own
//! duration when that is shorter: a 20 s `maxSession` is announced at 10 s, not at its start),
//! the same lead the clients show.

use jiff::{SignedDuration, Timestamp};
use vdi_core::lease::LeaseView;
use vdi_core::policy::reclaim::{
    ClaimTimes, ReclaimDue, ReclaimWhy, WrittenTimes, due, trusted_times,
};
use vdi_core::policy::{Policy, duration};

/// VM annotation the broker writes on a claimed member of a managed pool once its next
/// reclaim's notice time passed: `<why> <at>` (`maxSession 2026-12-04T10:30:00Z`), the reclaim
/// it announced with an Event `ReclaimSoon`; removed when the claim ends. One notice per
/// reclaim, level-based: a new notice is given only when the announced reclaim changes (a Keep
/// moved it).
pub const NOTICE_ANNOTATION: &str = "corral.dev/vdi-reclaim-notice";

/// The next reclaim of a claim written as `written` as the broker acts on it, as of `now`:
/// the times [`trusted_times`] believes, the disconnect (and its notice) moved by `margin`.
pub fn next_reclaim(
    policy: &Policy,
    written: &WrittenTimes<'_>,
    now: Timestamp,
    margin: SignedDuration,
) -> Option<ReclaimDue> {
    let mut times = trusted_times(policy, written, now);
    times.expires_at = times
        .expires_at
        .map(|end| end.checked_add(margin).unwrap_or(end));
    due(policy, &times)
}

/// Why `reclaim` is due, as a sentence for the Event; `times` are the claim's as
/// [`trusted_times`] believes them (its start, and an expiry no later than `disconnectGrace`
/// after the last renewal), so the sentence names what the broker acted on.
pub fn explain(
    policy: &Policy,
    lease: &LeaseView,
    times: &ClaimTimes,
    reclaim: &ReclaimDue,
) -> String {
    let at = vdi_core::clock::annotation_time(reclaim.at);
    let since =
        |t: Option<Timestamp>| t.map_or_else(|| "?".into(), vdi_core::clock::annotation_time);
    match reclaim.why {
        ReclaimWhy::MaxSession => format!(
            "maxSession {} since its start {} passed at {at}",
            policy
                .max_session
                .map_or_else(String::new, duration::format),
            since(times.acquired_at)
        ),
        ReclaimWhy::Idle => format!(
            "no user logged in to the guest for idleTimeout {} (reached at {at})",
            policy
                .idle_timeout
                .map_or_else(String::new, duration::format)
        ),
        ReclaimWhy::Disconnected => format!(
            "disconnected: its Lease was not renewed after {} and expired at {}",
            since(lease.renewed_at.or(lease.acquired_at)),
            since(times.expires_at)
        ),
    }
}

/// The notice annotation's value for `reclaim`.
pub fn notice_value(reclaim: &ReclaimDue) -> String {
    format!(
        "{} {}",
        reclaim.why.as_str(),
        vdi_core::clock::annotation_time(reclaim.at)
    )
}
