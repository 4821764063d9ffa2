//! The audit trail (issue 26: "`audit --since 1h -o csv` lists every act of these tests with
//! user and reason"): in a pool of its own, a claim and a release with `onRelease: reset`, a
//! force release by an administrator, a resize and an idle guest's reclaim; each is an Event
//! whose note names the user and why, and the CLI's CSV lists each with its user and reason.

use std::process::Command;

use corral_tests::{actor_as, annotate, cli_binary, client_as, eventually};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use sandbox::emulator::knobs::GUEST_USERS_ANNOTATION;
use serde_json::json;
use vdi_core::audit::parse_note;
use vdi_core::claim::{UnassignOptions, unassign};
use vdi_core::policy::{DesktopPoolSpec, OnRelease};

use crate::{SETTLE, claim, managed_pool, members, spec, wait_members, with_broker};

/// One act as the audit trail should show it.
#[derive(Debug)]
struct Act {
    /// The Event's reason.
    reason: &'static str,
    /// The user it concerns.
    user: &'static str,
    /// Why, when the act has a why the test knows (`idle`, `force`, `reset`).
    why: Option<&'static str>,
}

/// Whether a row of (reason, user, why) — from an Event or a CSV line — is `act`.
fn matches(act: &Act, reason: &str, user: &str, why: &str) -> bool {
    reason == act.reason && user == act.user && act.why.is_none_or(|w| why.contains(w))
}

/// The fields of one CSV record (RFC 4180: quoted fields, `""` inside them).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[tokio::test]
async fn audit_since_1h_as_csv_lists_every_act_with_user_and_reason() {
    let ns = managed_pool(
        "audit",
        "au",
        DesktopPoolSpec {
            on_release: Some(OnRelease::Reset),
            idle_timeout: Some("10s".into()),
            ..spec(2)
        },
    )
    .await;
    // Waits until `member` (whose VM had `uid`) is a fresh clone, free, with the rest settled.
    let reset = |member: String, uid: String| {
        let ns = ns.clone();
        async move {
            let what = format!("{member} reset");
            wait_members(&ns, "au", &what, |m| {
                m.get(&member).is_some_and(|m| m.uid != uid)
                    && m.values().all(|m| m.free() && m.settled())
            })
            .await;
        }
    };

    // A claim and its release (the member is reset).
    let first = claim("alice", &ns, "au").await.member;
    let uid = members(&ns, "au").await[&first].uid.clone();
    corral_tests::release_as("alice", &ns, &first).await;
    reset(first, uid).await;

    // A force release by an administrator.
    let bobs = claim("bob", &ns, "au").await.member;
    let uid = members(&ns, "au").await[&bobs].uid.clone();
    unassign(
        &actor_as("admin").await,
        &ns,
        &bobs,
        &UnassignOptions { force: true },
    )
    .await
    .unwrap();
    reset(bobs, uid).await;

    // A resize.
    corral_tests::set_pool_spec(&ns, "au", json!({ "size": 3 })).await;
    wait_members(&ns, "au", "3 members", |m| {
        m.len() == 3 && m.values().all(|m| m.free() && m.settled())
    })
    .await;

    // An idle guest's reclaim.
    let carols = claim("carol", &ns, "au").await.member;
    annotate(&ns, &carols, GUEST_USERS_ANNOTATION, Some("")).await;
    let uid = members(&ns, "au").await[&carols].uid.clone();
    reset(carols, uid).await;

    let acts = [
        Act {
            reason: "Claimed",
            user: "alice",
            why: None,
        },
        Act {
            reason: "Released",
            user: "alice",
            why: None,
        },
        Act {
            reason: "Claimed",
            user: "bob",
            why: None,
        },
        Act {
            reason: "ForceReleased",
            user: "bob",
            why: Some("force"),
        },
        Act {
            reason: "Claimed",
            user: "carol",
            why: None,
        },
        Act {
            reason: "Reclaimed",
            user: "carol",
            why: Some("idle"),
        },
    ];

    // The Events: one per act, its note's facts naming the user and why.
    let events: Api<Event> = Api::namespaced(client_as("admin").await, &ns);
    let rows: Vec<(String, String, String)> =
        eventually("an Event for every act", SETTLE, || async {
            let rows: Vec<(String, String, String)> = events
                .list(&ListParams::default())
                .await
                .ok()?
                .into_iter()
                .filter_map(|e| {
                    let (facts, _) = parse_note(e.note.as_deref()?);
                    let facts = facts?;
                    Some((
                        e.reason.unwrap_or_default(),
                        facts.user.unwrap_or_default(),
                        facts.why.unwrap_or_default(),
                    ))
                })
                .collect();
            acts.iter()
                .all(|a| rows.iter().any(|(r, u, w)| matches(a, r, u, w)))
                .then_some(rows)
        })
        .await;
    let resets = rows.iter().filter(|(_, _, why)| why == "reset").count();
    let resizes = rows
        .iter()
        .filter(|(reason, _, _)| reason == "Resized")
        .count();
    assert!(
        resets >= 3 && resizes >= 1,
        "{resets} reset and {resizes} resize Events: {rows:#?}"
    );

    // The CLI, as an administrator reads the trail.
    let shared = with_broker();
    let out = Command::new(cli_binary())
        .arg("--kubeconfig")
        .arg(&shared.kubeconfig)
        .args([
            "--context",
            "admin",
            "audit",
            "-n",
            &ns,
            "--since",
            "1h",
            "-o",
            "csv",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "corral-vdi audit: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    let header: Vec<String> = csv_fields(lines.next().unwrap_or_default())
        .into_iter()
        .map(|h| h.to_lowercase())
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let (reason, user, why) = (column("reason"), column("user"), column("why"));
    let records: Vec<Vec<String>> = lines.map(csv_fields).collect();
    for act in &acts {
        assert!(
            records
                .iter()
                .any(|r| matches(act, &r[reason], &r[user], &r[why])),
            "{act:?} is not in the CSV:\n{stdout}"
        );
    }
    let csv_resets = records.iter().filter(|r| r[why] == "reset").count();
    let csv_resizes = records.iter().filter(|r| r[reason] == "Resized").count();
    assert!(
        csv_resets >= 3 && csv_resizes >= 1,
        "{csv_resets} resets and {csv_resizes} resizes in the CSV:\n{stdout}"
    );
}
