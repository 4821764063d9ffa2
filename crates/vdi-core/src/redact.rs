//! Removing what looks like a credential from text that came from elsewhere (an exec credential
//! plugin's stderr) before it reaches a log line, a banner or an error.
//!
//! Our own messages carry names, never secrets; text we did not write may carry anything: a
//! plugin that echoes its refresh token, a bearer header, a PEM key. What is replaced by
//! [`REDACTED`]:
//! - the value after `Bearer`, and after a key naming a secret (`token`, `password`, `secret`,
//!   `credential`, `key`, …) followed by `=` or `:` (`access_token=…`, `"password": "…"`);
//! - a JSON Web Token (three base64url parts, the first starting `eyJ`);
//! - a run of 24 or more characters of base64 / hex / base64url with both letters and digits
//!   (how tokens and keys look; words and paths do not);
//! - everything between a PEM `-----BEGIN` and its `-----END` line.
//!
//! It errs towards redacting: a long identifier may be masked, a secret should never pass.

/// What stands in for a redacted secret.
pub const REDACTED: &str = "[redacted]";

/// Words of a key that make its value a secret (compared in lower case, as parts of the key).
const SECRET_KEYS: [&str; 9] = [
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "key",
    "authorization",
    "cookie",
    "session",
];

/// Whether `key` (e.g. `access_token`, `"client-secret"`) names a secret.
fn names_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|word| key.contains(word))
}

/// Whether `word` looks like a token or key by its characters alone.
fn looks_like_secret(word: &str) -> bool {
    let core = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if core.starts_with("eyJ") && core.split('.').count() == 3 {
        return true;
    }
    core.len() >= 24
        && core
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_' | '.'))
        && core.chars().any(|c| c.is_ascii_digit())
        && core.chars().any(|c| c.is_ascii_alphabetic())
        && !core.contains("..")
}

/// `text` with what looks like a credential replaced by [`REDACTED`] (see the module doc);
/// line breaks and the rest of the text are kept.
pub fn secrets(text: &str) -> String {
    let mut out = Vec::new();
    let mut in_pem = false;
    for line in text.lines() {
        if line.contains("-----BEGIN") {
            in_pem = !line.contains("-----END");
            out.push(REDACTED.to_owned());
            continue;
        }
        if in_pem {
            if line.contains("-----END") {
                in_pem = false;
            }
            continue;
        }
        out.push(redact_line(line));
    }
    out.join("\n")
}

/// `word` masked, keeping the quotes, brackets and punctuation around it: `"abc",` becomes
/// `"[redacted]",`.
fn mask(word: &str) -> String {
    let wrapping = |c: char| {
        matches!(
            c,
            '"' | '\'' | '(' | ')' | '[' | ']' | '{' | '}' | ',' | ';'
        )
    };
    let start = word.len() - word.trim_start_matches(wrapping).len();
    let end = word.trim_end_matches(wrapping).len().max(start);
    format!("{}{REDACTED}{}", &word[..start], &word[end..])
}

fn redact_line(line: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    // Whether the next word is a secret's value (after `Bearer`, or after `token:`).
    let mut value_next = false;
    for word in line.split(' ') {
        if word.is_empty() {
            words.push(String::new());
            continue;
        }
        if value_next {
            // `Authorization: Bearer …`: the value is the word after the scheme.
            value_next = word.eq_ignore_ascii_case("bearer");
            words.push(if value_next {
                word.to_owned()
            } else {
                mask(word)
            });
            continue;
        }
        if word.eq_ignore_ascii_case("bearer") {
            value_next = true;
            words.push(word.to_owned());
            continue;
        }
        // key=value or key:value inside one word.
        if let Some(at) = word.find(['=', ':'])
            && names_secret(&word[..at])
        {
            let value = &word[at + 1..];
            if value
                .trim_matches(|c: char| !c.is_ascii_alphanumeric())
                .is_empty()
            {
                // `"token": "…"`: the value is the next word.
                value_next = true;
                words.push(word.to_owned());
            } else {
                words.push(format!("{}{}", &word[..=at], mask(value)));
            }
            continue;
        }
        if looks_like_secret(word) {
            words.push(mask(word));
            continue;
        }
        words.push(word.to_owned());
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keys_and_bearers_are_masked_and_words_kept() {
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl";
        let text = format!(
            "error: refresh failed for alice@example.com: token {jwt} expired\n\
             Authorization: Bearer abc123\n\
             access_token=ya29.a0AfH6SMBx1234567890abcdef refresh_token=1//0gXyz\n\
             {{\"password\": \"hunter2\", \"user\": \"alice\"}}\n\
             see /home/alice/.kube/config for details"
        );
        let out = secrets(&text);
        assert!(!out.contains(jwt), "{out}");
        assert!(!out.contains("abc123"), "{out}");
        assert!(!out.contains("ya29"), "{out}");
        assert!(!out.contains("0gXyz"), "{out}");
        assert!(!out.contains("hunter2"), "{out}");
        assert!(
            out.contains("refresh failed for alice@example.com"),
            "{out}"
        );
        assert!(out.contains("\"user\": \"alice\""), "{out}");
        assert!(
            out.contains("see /home/alice/.kube/config for details"),
            "{out}"
        );
        assert_eq!(out.lines().count(), 5, "{out}");
        assert!(
            out.contains("\"password\": \"[redacted]\", \"user\""),
            "{out}"
        );
        assert_eq!(
            secrets("revoked (refresh_token=1//0gAbc123XyZ456); log in again"),
            "revoked (refresh_token=[redacted]); log in again"
        );
    }

    #[test]
    fn a_pem_block_goes_whole() {
        let text = "oops\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nabc\n-----END PRIVATE KEY-----\nafter";
        assert_eq!(secrets(text), format!("oops\n{REDACTED}\nafter"));
    }
}
