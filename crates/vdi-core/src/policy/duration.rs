//! The durations of a DesktopPool's spec (`disconnectGrace`, `maxSession`, `idleTimeout`):
//! Kubernetes' `metav1.Duration` text restricted to whole hours, minutes and seconds
//! (`"90s"`, `"15m"`, `"1h30m"`), the form the CRD's pattern admits.

use jiff::SignedDuration;

/// Parses `"1h30m"`, `"45s"`, `"8h"`: one or more `<digits><h|m|s>`, each number at most
/// 7 digits (the CRD's pattern).
///
/// Errors: a sentence naming the text and the form expected.
pub fn parse(text: &str) -> Result<SignedDuration, String> {
    let bad = || format!("\"{text}\" is not a duration like \"90s\", \"15m\" or \"1h30m\"");
    if text.is_empty() {
        return Err(bad());
    }
    let mut seconds: i64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        match c {
            '0'..='9' if digits.len() < 7 => digits.push(c),
            'h' | 'm' | 's' if !digits.is_empty() => {
                let n: i64 = digits.parse().map_err(|_| bad())?;
                let unit = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                seconds = seconds.checked_add(n * unit).ok_or_else(bad)?;
                digits.clear();
            }
            _ => return Err(bad()),
        }
    }
    if !digits.is_empty() {
        return Err(bad());
    }
    Ok(SignedDuration::from_secs(seconds))
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
    fn reads_hours_minutes_and_seconds_in_any_combination() {
        assert_eq!(parse("90s").unwrap(), SignedDuration::from_secs(90));
        assert_eq!(parse("15m").unwrap(), SignedDuration::from_secs(900));
        assert_eq!(parse("1h30m").unwrap(), SignedDuration::from_secs(5400));
        assert_eq!(parse("2h5s").unwrap(), SignedDuration::from_secs(7205));
        assert_eq!(parse("9999999h").unwrap().as_secs(), 9_999_999 * 3600);
    }

    #[test]
    fn refuses_anything_else_naming_the_text() {
        for bad in [
            "",
            "15",
            "m",
            "1.5h",
            "1d",
            "-5m",
            "15 m",
            "12345678s",
            "1h-",
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
