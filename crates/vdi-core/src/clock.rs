//! Time as the cluster tells it: the API server's clock ([`ServerClock`]), by which every expiry
//! is judged, and instants worded the same way in every message and table
//! ([`exact_instant`], [`describe_instant`]).
//!
//! A bottom module: it imports nothing of the crate but [`crate::error`].

use jiff::{SignedDuration, Timestamp};
use kube::Client;

use crate::error::{Error, Result};

/// The API server's clock relative to ours: `server_now ≈ Utc::now() + offset`.
///
/// Read from the `Date` header of a `/version` response (one-second resolution, and the
/// request's round trip is split evenly). Rules that judge expiry use server time so that a
/// skewed workstation neither steals a live claim nor keeps a dead one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerClock {
    /// Server time minus local time.
    pub offset: SignedDuration,
    /// How wrong this machine's clock is taken to be; zero except when tests simulate a
    /// skewed workstation ([`ServerClock::measure_skewed`]).
    local_skew: SignedDuration,
}

impl ServerClock {
    /// Measures the offset against the API server.
    ///
    /// Errors: the server is unreachable, or sends no `Date` header.
    pub async fn measure(client: &Client) -> Result<Self> {
        Self::measure_skewed(client, SignedDuration::ZERO).await
    }

    /// Like [`ServerClock::measure`] on a machine whose clock is off by `skew`: shows that the
    /// rules judged with [`ServerClock::now`] do not depend on the local clock.
    pub async fn measure_skewed(client: &Client, skew: SignedDuration) -> Result<Self> {
        let request = http::Request::get("/version")
            .body(kube::client::Body::empty())
            .map_err(|e| Error::Config(format!("build /version request: {e}")))?;
        let sent = Timestamp::now() + skew;
        let response = client
            .send(request)
            .await
            .map_err(|e| Error::kube("read the API server's clock (GET /version)", e))?;
        let received = Timestamp::now() + skew;
        let date = response
            .headers()
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
            .map(|d| d.timestamp())
            .ok_or_else(|| Error::Config("the API server sent no Date header".into()))?;
        let midpoint = sent + received.duration_since(sent) / 2;
        // The header truncates to whole seconds: its true value lies in [date, date + 1 s).
        // Checked: the header is the server's word, and a date at the end of the calendar must
        // not panic the client.
        let mut offset = date
            .checked_add(SignedDuration::from_millis(500))
            .unwrap_or(date)
            .duration_since(midpoint);
        // Within the header's resolution the clocks agree as far as can be told: keep the
        // local clock's sub-second precision rather than a ±0.5 s guess.
        if offset.abs() <= SignedDuration::from_secs(1) {
            offset = SignedDuration::ZERO;
        }
        Ok(ServerClock {
            offset,
            local_skew: skew,
        })
    }

    /// The API server's current time, as best known.
    pub fn now(&self) -> Timestamp {
        // Saturating: an offset measured from a server whose clock says the end of the
        // calendar is its problem, not a panic here.
        let ahead = self.local_skew.saturating_add(self.offset);
        Timestamp::now()
            .checked_add(ahead)
            .unwrap_or(if ahead.is_negative() {
                Timestamp::MIN
            } else {
                Timestamp::MAX
            })
    }
}

/// An instant as the product writes it in annotations (claimed-at, idle-since, the broker's
/// marks): RFC 3339 UTC to the nearest second (`2026-12-03T19:07:22Z`), the form the guard
/// checks a claimed-at against.
pub fn annotation_time(at: Timestamp) -> String {
    at.round(jiff::Unit::Second).unwrap_or(at).to_string()
}

/// An instant to the nearest second with its zone, as every message and table gives it:
/// "2026-12-01 12:10:04 UTC" (the app's tables give the same, in the local zone).
pub fn exact_instant(at: Timestamp) -> String {
    at.round(jiff::Unit::Second)
        .unwrap_or(at)
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

/// An instant as every message says it: UTC to the second with its zone, and how far it is
/// from `now` in one unit — "2026-12-01 12:10:04 UTC (in 57m)", "… (3m ago)", "… (now)" —
/// counted in whole seconds, a future instant's rounded up (as the app's countdowns count).
pub fn describe_instant(at: Timestamp, now: Timestamp) -> String {
    let exact = exact_instant(at);
    // Whole seconds, rounded up for a future instant and down for a past one, as the app's
    // countdowns do: an hour's Lease read 0.3 s after it was written is "in 1h" in both.
    let millis = at.duration_since(now).as_millis();
    let seconds = if millis > 0 {
        (millis + 999) / 1000
    } else {
        millis / 1000
    };
    let magnitude = seconds.unsigned_abs();
    let unit = match magnitude {
        0..60 => format!("{magnitude}s"),
        60..3600 => format!("{}m", magnitude / 60),
        3600..86400 => format!("{}h", magnitude / 3600),
        _ => format!("{}d", magnitude / 86400),
    };
    match seconds {
        -4..=4 => format!("{exact} (now)"),
        s if s > 0 => format!("{exact} (in {unit})"),
        _ => format!("{exact} ({unit} ago)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_the_same_everywhere() {
        let now: Timestamp = "2026-12-01T11:13:04.123456Z".parse().unwrap();
        let later: Timestamp = "2026-12-01T12:10:04.6Z".parse().unwrap();
        assert_eq!(
            describe_instant(later, now),
            "2026-12-01 12:10:05 UTC (in 57m)"
        );
        let before: Timestamp = "2026-12-01T11:10:00Z".parse().unwrap();
        assert_eq!(
            describe_instant(before, now),
            "2026-12-01 11:10:00 UTC (3m ago)"
        );
        assert_eq!(describe_instant(now, now), "2026-12-01 11:13:04 UTC (now)");
        // An hour's Lease read 0.3 s after it was written: "in 1h", as the app's countdown
        // says (never "in 59m" in one place and "in 1h" in another).
        let hour = now + jiff::SignedDuration::from_millis(3_599_700);
        assert_eq!(
            describe_instant(hour, now),
            "2026-12-01 12:13:04 UTC (in 1h)"
        );
        let days: Timestamp = "2026-12-03T11:13:04Z".parse().unwrap();
        assert_eq!(
            describe_instant(days, now),
            "2026-12-03 11:13:04 UTC (in 2d)"
        );
    }
}
