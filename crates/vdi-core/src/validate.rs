//! Input rules, in one place for the CLI and the app: every name, number and namespace is
//! checked here before a single request is sent, and a refusal names the value and the fix.
//!
//! Name rules are Kubernetes' own (`k8s.io/apimachinery/pkg/util/validation`): namespaces and
//! pool names are DNS-1123 labels, other object names DNS-1123 subdomains. Pool members are
//! `<pool>-<i>`, so they are DNS-1123 labels too.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::names::is_dns1123_label;
use crate::scope::Scope;

/// Shortest claim Lease a claim may ask for, in seconds (the API requires more than zero).
pub const MIN_LEASE_SECONDS: i64 = 1;
/// Longest claim Lease a claim may ask for, in seconds (seven days): a desktop claimed for
/// longer is better released and claimed again.
pub const MAX_LEASE_SECONDS: i64 = 7 * 24 * 3600;
/// Longest per-member clone timeout of a pool create (24 hours).
pub const MAX_CLONE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Shortest per-member clone timeout of a pool create (one second).
pub const MIN_CLONE_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest identity accepted, in bytes. Kubernetes sets no limit; this one only catches
/// mistakes (a pasted token, a file).
pub const MAX_IDENTITY_BYTES: usize = 1024;
/// Longest guest login accepted for SSH ([`guest_login`]), in bytes. Guests allow fewer
/// (Linux's useradd 32, Windows 20 plus a domain); this one only catches mistakes.
pub const MAX_GUEST_LOGIN_BYTES: usize = 256;

/// Whether `name` is a DNS-1123 subdomain (the rule for most object names): at most 253
/// characters, dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns1123_label)
}

/// A namespace name: a DNS-1123 label, never empty (an empty namespace would mean "all
/// namespaces" to the API).
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn namespace(ns: &str) -> Result<()> {
    if is_dns1123_label(ns) {
        return Ok(());
    }
    let shown = if ns.is_empty() {
        "namespace \"\" (empty)".to_owned()
    } else {
        format!("namespace \"{ns}\"")
    };
    Err(Error::invalid(
        format!(
            "{shown} is not a valid namespace name (lower-case letters, digits and '-', at most 63 characters)"
        ),
        "pass -n with an existing namespace (kubectl get namespaces), or -A for all namespaces",
    ))
}

/// A scope's namespace name ([`namespace`]); an empty one would mean "all namespaces" to the
/// API. [`Scope::All`] passes.
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn scope(scope: &Scope) -> Result<()> {
    match scope {
        Scope::Namespace(ns) => namespace(ns),
        Scope::All => Ok(()),
    }
}

/// A pool name: a DNS-1123 label.
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn pool_name(pool: &str) -> Result<()> {
    if is_dns1123_label(pool) {
        return Ok(());
    }
    Err(Error::invalid(
        format!(
            "\"{pool}\" is not a valid pool name (a DNS-1123 label: lower-case letters, digits and \
             '-', starting and ending with a letter or digit, at most 63 characters)"
        ),
        "use lower-case letters, digits and '-' (e.g. dev-pool); existing pools are listed by \
         `corral-vdi pool list`",
    ))
}

/// A pool member's name (`<pool>-<i>`): a DNS-1123 label, so `alpha-3/status` or `../x` never
/// reach a URL.
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn member_name(member: &str) -> Result<()> {
    if is_dns1123_label(member) {
        return Ok(());
    }
    Err(Error::invalid(
        format!(
            "\"{}\" is not a valid member name (members are named <pool>-<n>: lower-case letters, \
             digits and '-')",
            member.escape_debug()
        ),
        "check the name with `corral-vdi pool list`",
    ))
}

/// A VirtualMachine name (a golden VM): a DNS-1123 subdomain.
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn vm_name(name: &str) -> Result<()> {
    if is_dns1123_subdomain(name) {
        return Ok(());
    }
    Err(Error::invalid(
        format!(
            "\"{}\" is not a valid VirtualMachine name",
            name.escape_debug()
        ),
        "pass the name of an existing VirtualMachine (kubectl get vm -n <namespace>)",
    ))
}

/// Whether `identity` may hold a claim: any user name but Kubernetes' own `system:` names
/// (`system:anonymous`, `system:kube-controller-manager`, `system:node:…`; reserved for the
/// cluster's components, Kubernetes "Authenticating"), except service accounts
/// (`system:serviceaccount:<namespace>:<name>`), which kiosks and robots run as. The guard
/// refuses claim Leases naming another holder and the broker never binds one.
pub fn can_be_a_person(identity: &str) -> bool {
    !identity.starts_with("system:") || identity.starts_with("system:serviceaccount:")
}

/// A user's identity as the cluster knows it (`alice`, `alice@example.com`,
/// `system:serviceaccount:ns:sa`): not empty, no control characters (a newline would forge a
/// second line in every log and table), no surrounding spaces, one that may hold a claim
/// ([`can_be_a_person`]), at most [`MAX_IDENTITY_BYTES`].
///
/// Errors: [`Error::Invalid`] naming the value.
pub fn identity(user: &str) -> Result<()> {
    let fix = "name the user exactly as the cluster knows them (kubectl auth whoami shows yours)";
    if user.trim().is_empty() {
        return Err(Error::invalid("no user given: the user name is empty", fix));
    }
    if user.chars().any(char::is_control) {
        return Err(Error::invalid(
            format!(
                "user \"{}\" contains a control character (a newline, tab or similar)",
                user.escape_debug()
            ),
            fix,
        ));
    }
    if user.trim() != user {
        return Err(Error::invalid(
            format!("user \"{user}\" starts or ends with a space"),
            fix,
        ));
    }
    if !can_be_a_person(user) {
        return Err(Error::invalid(
            format!(
                "user \"{user}\" is one of Kubernetes' own identities (system:…), which no \
                 person or robot signs in as: no desktop is claimed for it"
            ),
            "name a user, or a service account (system:serviceaccount:<namespace>:<name>)",
        ));
    }
    if user.len() > MAX_IDENTITY_BYTES {
        return Err(Error::invalid(
            format!(
                "user name of {} bytes is longer than {MAX_IDENTITY_BYTES}",
                user.len()
            ),
            fix,
        ));
    }
    Ok(())
}

/// The characters OpenSSH's client refuses in a login given on its command line (`ssh.c`,
/// `valid_ruser` in `misc.c`: shell metacharacters, as the login may reach a `%u` expansion).
const SSH_REFUSED_IN_LOGIN: &str = "'`\";&<>|(){}";

/// A login on a desktop's guest, for SSH (`alice`, `Administrator`, `first.last`,
/// `CORP\alice`): ssh takes it as `LOGIN@127.0.0.1` or `-l LOGIN`. Not empty, at most
/// [`MAX_GUEST_LOGIN_BYTES`]; no whitespace or control characters (the line to copy would
/// split into words or lines); no `@` (ssh splits `LOGIN@HOST` there: a domain account is
/// `DOMAIN\user`); not starting with `-` (ssh would read `-oProxyCommand=…@127.0.0.1` as an
/// option); none of the characters OpenSSH itself refuses in a login, and no `\` at the end
/// (OpenSSH's `valid_ruser`). Not a cluster identity ([`identity`]): the guest has its own
/// accounts.
///
/// Errors: [`Error::Invalid`] naming the value (escaped) and what to write instead.
pub fn guest_login(login: &str) -> Result<()> {
    let fix = "type the account name you log in to the desktop's guest with (like alice, \
               Administrator or DOMAIN\\user)";
    let shown = login.escape_debug();
    let why = if login.is_empty() {
        "no guest login given: the login is empty".to_owned()
    } else if login.len() > MAX_GUEST_LOGIN_BYTES {
        format!(
            "a guest login of {} bytes is longer than {MAX_GUEST_LOGIN_BYTES}",
            login.len()
        )
    } else if login.chars().any(|c| c.is_whitespace() || c.is_control()) {
        format!("guest login \"{shown}\" contains a space or a control character")
    } else if login.starts_with('-') {
        format!("guest login \"{shown}\" starts with '-': ssh would read it as an option")
    } else if login.contains('@') {
        format!(
            "guest login \"{shown}\" contains '@': ssh would split it there (write a domain \
             account as DOMAIN\\user)"
        )
    } else if let Some(c) = login.chars().find(|c| SSH_REFUSED_IN_LOGIN.contains(*c)) {
        format!("guest login \"{shown}\" contains '{c}', which ssh refuses in a login")
    } else if login.ends_with('\\') {
        format!("guest login \"{shown}\" ends with '\\', which ssh refuses in a login")
    } else {
        return Ok(());
    };
    Err(Error::invalid(why, fix))
}

/// A claim Lease duration, in seconds: [`MIN_LEASE_SECONDS`] ..= [`MAX_LEASE_SECONDS`].
/// Returns it as the API's `int32`.
///
/// Errors: [`Error::Invalid`] naming the value and the range.
pub fn lease_seconds(seconds: i64) -> Result<i32> {
    if (MIN_LEASE_SECONDS..=MAX_LEASE_SECONDS).contains(&seconds) {
        // The range lies inside i32.
        return Ok(seconds as i32);
    }
    Err(Error::invalid(
        format!(
            "a Lease of {seconds} seconds is out of range: claims last {MIN_LEASE_SECONDS} to \
             {MAX_LEASE_SECONDS} seconds (7 days)"
        ),
        "pass --lease-seconds between 1 and 604800, or leave it out for one hour (3600)",
    ))
}

/// A per-member clone timeout: [`MIN_CLONE_TIMEOUT`] ..= [`MAX_CLONE_TIMEOUT`].
///
/// Errors: [`Error::Invalid`] naming the value and the range.
pub fn clone_timeout(timeout: Duration) -> Result<()> {
    if (MIN_CLONE_TIMEOUT..=MAX_CLONE_TIMEOUT).contains(&timeout) {
        return Ok(());
    }
    Err(Error::invalid(
        format!(
            "a clone timeout of {} s is out of range: 1 s to 24 h",
            timeout.as_secs()
        ),
        "pass --timeout like 120s, 5m or 1h",
    ))
}

/// The one duration grammar of every input, a pool's policy (`disconnectGrace`, …) and the
/// CLI's flags (`--timeout`, `--since`) alike: `<digits><unit>` parts, the units `h`, `m`, `s`
/// and `ms`, each at most once and largest first (`1h30m`, `90s`, `500ms`). No bare numbers, no
/// fractions, no repeated unit (`1h1h`, `1m1h` are refused, not summed). Returns milliseconds.
///
/// Errors: a sentence naming the text and how to write it; a value beyond 584 million years
/// is "too long", not wrapped.
pub fn duration_millis(text: &str) -> std::result::Result<u64, String> {
    const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    let bad = |why: &str| {
        format!(
            "\"{text}\" is not a duration{why}: write it like 90s, 15m or 1h30m (h, m, s and ms, \
             each once, largest first)"
        )
    };
    let too_long = || format!("\"{text}\" is too long a duration");
    if text.is_empty() {
        return Err(bad(""));
    }
    let (mut total, mut rest, mut smallest_yet) = (0u64, text, 0usize);
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad(""));
        }
        if digits == rest.len() {
            return Err(bad(" (a number needs its unit)"));
        }
        let value: u64 = rest[..digits].parse().map_err(|_| too_long())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let Some(unit) = UNITS.iter().position(|(u, _)| *u == &rest[..unit_len]) else {
            return Err(bad(""));
        };
        if unit < smallest_yet {
            return Err(bad(" (each unit once, largest first)"));
        }
        smallest_yet = unit + 1;
        total = value
            .checked_mul(UNITS[unit].1)
            .and_then(|part| total.checked_add(part))
            .ok_or_else(too_long)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// A duration in the one grammar ([`duration_millis`]), e.g. `120s`, `2m`, `1m30s`, `500ms`;
/// surrounding spaces ignored.
///
/// Errors: those of [`duration_millis`].
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    duration_millis(text.trim()).map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(namespace("corral-vms").is_ok());
        for bad in ["", "Bad_NS", "a/b", "-x", &"n".repeat(64)] {
            let err = namespace(bad).unwrap_err();
            assert!(
                err.to_string().contains("not a valid namespace name"),
                "{err}"
            );
        }
        assert!(member_name("alpha-3").is_ok());
        for bad in ["alpha-3/status", "../x", "Alpha-3", "", "a b"] {
            assert!(member_name(bad).is_err(), "{bad}");
        }
        assert!(pool_name("dev").is_ok() && pool_name("Dev").is_err());
        assert!(vm_name("golden.v2").is_ok() && vm_name("golden/x").is_err());
    }

    #[test]
    fn identities() {
        for good in [
            "alice",
            "alice@example.com",
            "system:serviceaccount:ns:sa",
            "Ünï",
        ] {
            assert!(identity(good).is_ok(), "{good}");
        }
        for bad in ["", " ", "alice\nbob", "alice\t", " alice", "x\u{7}"] {
            assert!(identity(bad).is_err(), "{bad:?}");
        }
        assert!(identity(&"a".repeat(MAX_IDENTITY_BYTES + 1)).is_err());
        let err = identity("alice\nroot").unwrap_err().to_string();
        assert!(err.contains("alice\\nroot"), "shown escaped: {err}");
    }

    #[test]
    fn guest_logins_are_what_guests_use() {
        for good in [
            "alice",
            "Administrator",
            "CORP\\alice",
            "first.last",
            "svc_backup-2",
            "user$",
            "Ünï",
            &"a".repeat(MAX_GUEST_LOGIN_BYTES),
        ] {
            assert!(guest_login(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn guest_logins_ssh_would_misread_are_refused_naming_the_value() {
        let refused = |login: &str, says: &str| {
            let err = guest_login(login).unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{login:?}: {err:?}");
            let text = err.to_string();
            assert!(text.contains(says), "{login:?}: {text}");
            assert!(
                err.suggestion().is_some_and(|s| s.contains("DOMAIN\\user")),
                "{login:?}: the fix is given"
            );
        };
        refused("", "the login is empty");
        refused(&"a".repeat(MAX_GUEST_LOGIN_BYTES + 1), "257 bytes");
        refused("al ice", "\"al ice\" contains a space");
        refused(" alice", "\" alice\" contains a space");
        refused("alice\t", "\"alice\\t\" contains a space");
        refused("alice\nroot", "\"alice\\nroot\" contains a space");
        refused("al\u{a0}ice", "contains a space");
        refused(
            "x\u{7}",
            "\"x\\u{7}\" contains a space or a control character",
        );
        refused("-oProxyCommand=x", "\"-oProxyCommand=x\" starts with '-'");
        refused("-l", "starts with '-'");
        refused("alice@corp.example", "\"alice@corp.example\" contains '@'");
        refused("@", "contains '@'");
        for c in SSH_REFUSED_IN_LOGIN.chars() {
            refused(&format!("al{c}ice"), &format!("contains '{c}'"));
        }
        refused("CORP\\", "ends with '\\'");
    }

    #[test]
    fn lease_seconds_are_bounded() {
        assert_eq!(lease_seconds(3600).unwrap(), 3600);
        assert_eq!(lease_seconds(1).unwrap(), 1);
        for bad in [0, -1, 604_801, 2_147_483_647, i64::MAX] {
            let err = lease_seconds(bad).unwrap_err();
            assert!(err.to_string().contains("out of range"), "{err}");
        }
    }

    #[test]
    fn durations_parse_and_are_bounded() {
        assert_eq!(parse_duration("120s"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        // One grammar: no bare number, no fraction, each unit once and largest first.
        for bad in [
            "90", "1h30", "0.5h", "1h1h", "1m1h", "30s1m", "1ms1s", "h", "1d", "1 h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(
            parse_duration("1m1h")
                .unwrap_err()
                .contains("each unit once, largest first")
        );
        assert_eq!(
            parse_duration("1h2m3s4ms"),
            Ok(Duration::from_millis(3_723_004))
        );
        assert!(parse_duration("18446744073709551615h").is_err());
        assert!(parse_duration("99999999999999999999").is_err());
        assert!(parse_duration("5x").is_err() && parse_duration("").is_err());
        let huge = parse_duration("5000000000h").unwrap();
        assert!(clone_timeout(huge).is_err());
        assert!(clone_timeout(Duration::ZERO).is_err());
        assert!(clone_timeout(Duration::from_secs(120)).is_ok());
    }
}
