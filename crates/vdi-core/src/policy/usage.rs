//! A managed pool's usage history (issue 39 item 4): hourly buckets the broker keeps in its
//! DesktopPool's status (`status.usage`), [`KEPT_HOURS`] of them at most (seven days), oldest
//! first. Each bucket says, for one hour of the API server's clock, the most members claimed at
//! once and the fewest free at once as the broker counted them at each of its looks at the pool,
//! and how many claims were reclaimed, by why. An administrator sees when a pool runs dry
//! (lowest free 0) and whether its warm buffer is right.
//!
//! Pure: [`record`] folds one look into the history. Cluster data is untrusted: buckets written
//! by someone else with an hour that does not read, or out of order, are dropped.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp, Unit};
use serde::{Deserialize, Serialize};

/// How many hourly buckets are kept: seven days.
pub const KEPT_HOURS: usize = 7 * 24;

/// One hour of a pool's usage.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct UsageBucket {
    /// The hour's start, RFC 3339 UTC (`2026-12-07T09:00:00Z`).
    pub hour: String,
    /// The most members claimed at once in that hour.
    #[serde(default)]
    pub peak_claimed: i32,
    /// The fewest members free at once in that hour.
    #[serde(default)]
    pub lowest_free: i32,
    /// Claims reclaimed in that hour, by why (`disconnected`, `maxSession`, `idle`, `expired`,
    /// `invalid`, `unfit`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reclaims: BTreeMap<String, i32>,
}

/// What the broker saw at one look at a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Look {
    /// Members claimed now.
    pub claimed: i32,
    /// Members free now.
    pub free: i32,
    /// Claims reclaimed since the last look, by why.
    pub reclaims: BTreeMap<String, i32>,
}

/// The hour `now` falls in, as a bucket's `hour`.
pub fn hour_of(now: Timestamp) -> String {
    let start = now.round(Unit::Hour).unwrap_or(now);
    let start = if start > now {
        start - SignedDuration::from_hours(1)
    } else {
        start
    };
    crate::clock::annotation_time(start)
}

/// `history` with `look` at `now` folded in: the bucket of `now`'s hour made or updated (peak,
/// lowest, reclaims added), buckets whose hour does not read, is in the future or is more than
/// [`KEPT_HOURS`] old dropped, in order, at most [`KEPT_HOURS`] of them.
pub fn record(history: &[UsageBucket], now: Timestamp, look: &Look) -> Vec<UsageBucket> {
    let hour = hour_of(now);
    let oldest = now - SignedDuration::from_hours(KEPT_HOURS as i64);
    let mut kept: Vec<UsageBucket> = history
        .iter()
        .filter(|b| {
            b.hour
                .parse::<Timestamp>()
                .is_ok_and(|h| h > oldest && h <= now && hour_of(h) == b.hour)
        })
        .cloned()
        .collect();
    kept.sort_by(|a, b| a.hour.cmp(&b.hour));
    kept.dedup_by(|a, b| a.hour == b.hour);
    match kept.last_mut() {
        Some(last) if last.hour == hour => {
            last.peak_claimed = last.peak_claimed.max(look.claimed);
            last.lowest_free = last.lowest_free.min(look.free);
            for (why, n) in &look.reclaims {
                let count = last.reclaims.entry(why.clone()).or_default();
                *count = count.saturating_add(*n);
            }
        }
        _ => kept.push(UsageBucket {
            hour,
            peak_claimed: look.claimed,
            lowest_free: look.free,
            reclaims: look.reclaims.clone(),
        }),
    }
    let excess = kept.len().saturating_sub(KEPT_HOURS);
    kept.drain(..excess);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    fn look(claimed: i32, free: i32) -> Look {
        Look {
            claimed,
            free,
            reclaims: BTreeMap::new(),
        }
    }

    #[test]
    fn one_bucket_per_hour_keeps_the_peak_and_the_lowest() {
        let h = record(&[], at("2026-12-07T09:15:00Z"), &look(1, 3));
        let h = record(&h, at("2026-12-07T09:40:00Z"), &look(3, 0));
        let mut reclaimed = look(2, 1);
        reclaimed.reclaims.insert("expired".into(), 1);
        let h = record(&h, at("2026-12-07T09:59:59Z"), &reclaimed);
        let h = record(&h, at("2026-12-07T10:00:00Z"), &look(0, 4));
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].hour, "2026-12-07T09:00:00Z");
        assert_eq!((h[0].peak_claimed, h[0].lowest_free), (3, 0));
        assert_eq!(h[0].reclaims.get("expired"), Some(&1));
        assert_eq!(h[1].hour, "2026-12-07T10:00:00Z");
        assert_eq!((h[1].peak_claimed, h[1].lowest_free), (0, 4));
    }

    #[test]
    fn the_history_is_bounded_to_seven_days_and_ignores_hours_that_do_not_read() {
        let mut h = Vec::new();
        let start = at("2026-11-01T00:30:00Z");
        for i in 0..400 {
            h = record(&h, start + SignedDuration::from_hours(i), &look(1, 1));
        }
        assert_eq!(h.len(), KEPT_HOURS);
        let now = start + SignedDuration::from_hours(399);
        assert_eq!(h.last().unwrap().hour, hour_of(now));
        // Someone else's buckets: a bad hour, one in the future, one not on the hour.
        let mut hostile = h.clone();
        for bad in ["soon", "2099-01-01T00:00:00Z", "2026-11-17T07:30:00Z"] {
            hostile.push(UsageBucket {
                hour: bad.into(),
                peak_claimed: i32::MAX,
                ..UsageBucket::default()
            });
        }
        let cleaned = record(&hostile, now, &look(1, 1));
        assert!(
            cleaned.iter().all(|b| b.peak_claimed != i32::MAX),
            "{cleaned:?}"
        );
        assert_eq!(cleaned.len(), KEPT_HOURS);
    }
}
