//! The audit trail (SPEC "Audit"): every claim, release, reclaim, force release, resize and
//! reset is an Event (events.k8s.io/v1) on the member VM (a resize: on the DesktopPool), whose
//! `related` object is the pool's DesktopPool (named even for an unmanaged pool), and a line in
//! the broker's log with the same fields.
//!
//! An Event has no field for who was served or why, so its `note` starts with them as one JSON
//! object, then the sentence for people: `{"user":"alice","pool":"lab","why":"maxSession"}
//! reclaimed: maxSession 8h since 2026-12-04T08:00:00Z passed`. [`note`] writes it and
//! [`parse_note`] reads it back; a note written by anyone else reads as text alone.
//!
//! Events live only as long as the API server's event TTL (`--event-ttl`, one hour by
//! default): [`TTL_NOTICE`] says so wherever history is shown.
//!
//! [`record()`] writes one act as the broker does (the client's own: a force release);
//! [`list()`] reads the trail of a namespace, filtered by pool, member and time.

mod list;
mod record;

use serde::{Deserialize, Serialize};

pub use list::{AuditEntry, AuditFilter, entry_of, list, matches};
pub use record::{Act, CLIENT_REPORTER, pool_ref, record, vm_ref};

/// What every view of the history says about its length.
pub const TTL_NOTICE: &str = "The cluster keeps this history for about an hour (its event TTL); \
     the broker's log keeps the same lines for longer.";

/// Longest `note` an Event may carry, in bytes (events.k8s.io/v1: 1 kB).
pub const NOTE_MAX: usize = 1024;

/// Who an act served and why, as the start of an Event's note.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// The identity the act concerns (the holder; for a force release, the former holder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Who did it when it was not the broker (a force release: the administrator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The pool.
    pub pool: String,
    /// Why, in a word (`disconnected`, `maxSession`, `idle`, `shrink`, `reset`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The note of an Event: `facts` as JSON, a space, then `text`; cut to [`NOTE_MAX`] bytes
/// (the text is cut, ending in "…"; identities longer than 253 characters are cut first).
pub fn note(facts: &Facts, text: &str) -> String {
    let cap = |s: &Option<String>| {
        s.as_ref().map(|s| match s.char_indices().nth(253) {
            Some((end, _)) => format!("{}…", &s[..end]),
            None => s.clone(),
        })
    };
    let facts = Facts {
        user: cap(&facts.user),
        by: cap(&facts.by),
        ..facts.clone()
    };
    let head = serde_json::to_string(&facts).unwrap_or_else(|_| "{}".into());
    let mut note = format!("{head} {text}");
    if note.len() > NOTE_MAX {
        let mut end = NOTE_MAX - '…'.len_utf8();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    note
}

/// Reads a note written by [`note`]: its facts and its text. A note that does not start with
/// such an object (written by someone else, or cut inside it) gives `None` and the whole note.
pub fn parse_note(note: &str) -> (Option<Facts>, &str) {
    let mut values = serde_json::Deserializer::from_str(note).into_iter::<Facts>();
    match values.next() {
        Some(Ok(facts)) if note.starts_with('{') => {
            let rest = &note[values.byte_offset()..];
            (Some(facts), rest.strip_prefix(' ').unwrap_or(rest))
        }
        _ => (None, note),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_reads_back() {
        let facts = Facts {
            user: Some("alice \"the admin\"".into()),
            by: None,
            pool: "lab".into(),
            why: Some("maxSession".into()),
        };
        let n = note(&facts, "reclaimed: maxSession 8h passed");
        assert!(
            n.starts_with(r#"{"user":"alice \"the admin\"","pool":"lab","why":"maxSession"} "#),
            "{n}"
        );
        assert_eq!(
            parse_note(&n),
            (Some(facts), "reclaimed: maxSession 8h passed")
        );
    }

    #[test]
    fn other_notes_are_text_alone() {
        for other in [
            "granted to alice",
            "",
            "{not json",
            "{\"pool\":1} x",
            "[1] x",
        ] {
            assert_eq!(parse_note(other), (None, other), "{other}");
        }
    }

    #[test]
    fn long_notes_are_cut_to_the_limit_and_huge_identities_first() {
        let facts = Facts {
            user: Some("u".repeat(5000)),
            pool: "lab".into(),
            ..Default::default()
        };
        let n = note(&facts, &"é".repeat(2000));
        assert!(n.len() <= NOTE_MAX, "{}", n.len());
        assert!(n.ends_with('…'));
        let (read, _) = parse_note(&n);
        assert_eq!(read.unwrap().user.unwrap().chars().count(), 254);
    }
}
