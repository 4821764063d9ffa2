//! The durations of a DesktopPool's spec (`disconnectGrace`, `maxSession`, `idleTimeout`):
//! Kubernetes' `metav1.Duration` text restricted to whole hours, minutes and seconds, each unit
//! once and largest first (`"90s"`, `"15m"`, `"1h30m"`), the form the CRD's pattern admits.

use jiff::SignedDuration;

/// Parses `"1h30m"`, `"45s"`, `"8h"`: the one duration grammar
/// ([`crate::validate::duration_millis`]) in whole seconds, as the CRD's pattern admits it.
///
/// Errors: a sentence naming the text and the form expected.
pub fn parse(text: &str) -> Result<SignedDuration, String> {
    let millis = crate::validate::duration_millis(text)?;
    if millis % 1000 != 0 {
        return Err(format!(
            "\"{text}\" is not whole seconds: a pool's durations are written in h, m and s"
        ));
    }
    i64::try_from(millis / 1000)
        .map(SignedDuration::from_secs)
        .map_err(|_| format!("\"{text}\" is too long a duration"))
}

/// `d` in the form [`parse`] reads, largest units first and zero parts left out
/// (`5400 s` → `"1h30m"`, `0` → `"0s"`). Negative durations are shown as `"0s"`.
pub fn format(d: SignedDuration) -> String {
    let total = d.as_secs().max(0);
    let (h, m, s) = (total / 3600, total % 3600 / 60, total % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hours_minutes_and_seconds_largest_first() {
        assert_eq!(parse("90s").unwrap(), SignedDuration::from_secs(90));
        assert_eq!(parse("15m").unwrap(), SignedDuration::from_secs(900));
        assert_eq!(parse("1h30m").unwrap(), SignedDuration::from_secs(5400));
        assert_eq!(parse("2h5s").unwrap(), SignedDuration::from_secs(7205));
        assert_eq!(parse("9999999h").unwrap().as_secs(), 9_999_999 * 3600);
        // Too many digits for the CRD's pattern is a matter of range, which the policy's bounds
        // say ("out of range (10s to 168h)"), not of form.
        assert_eq!(parse("12345678s").unwrap().as_secs(), 12_345_678);
        assert_eq!(parse("2s0ms").unwrap().as_secs(), 2);
    }

    #[test]
    fn refuses_anything_else_naming_the_text() {
        for bad in [
            "", "15", "m", "1.5h", "1d", "-5m", "15 m", "1h-", "1h1h", "1m1h", "1500ms",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(&format!("\"{bad}\"")), "{bad}: {err}");
        }
    }

    #[test]
    fn formats_what_it_reads() {
        for secs in [0, 1, 59, 60, 61, 3600, 5400, 7205, 86_400 * 3] {
            let d = SignedDuration::from_secs(secs);
            assert_eq!(parse(&format(d)).unwrap(), d, "{secs}");
        }
        assert_eq!(format(SignedDuration::from_secs(5400)), "1h30m");
        assert_eq!(format(SignedDuration::from_secs(-5)), "0s");
    }
}
