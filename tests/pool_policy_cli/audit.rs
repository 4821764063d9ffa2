//! The audit trail: Events written as the broker writes them (kube-runtime's Recorder,
//! regarding the member VM, related to the DesktopPool, the note of vdi_core::audit), one from
//! two hours ago, one that is not the trail, and the client's own force release; then
//! `audit::list` filtered by pool, member and time, and the CLI's CSV (parsed back with the
//! `csv` crate), JSON and table.

use std::time::Duration;

use corral_tests::{actor_as, client_as, eventually, pool_vms};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::{Event as Publish, EventType, Recorder, Reporter};
use vdi_core::audit::{AuditFilter, Facts, TTL_NOTICE, list, note, pool_ref};
use vdi_core::claim::{ClaimOptions, UnassignOptions, assign, unassign};
use vdi_core::names::BROKER_NAME;

use crate::{cli, ok, with_broker};

fn vm_ref(ns: &str, member: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("kubevirt.io/v1".into()),
        kind: Some("VirtualMachine".into()),
        name: Some(member.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    }
}

/// Publishes an act as the broker's events module does.
async fn broker_act(ns: &str, member: &str, reason: &str, facts: Facts, text: &str) {
    let recorder = Recorder::new(
        client_as("admin").await,
        Reporter {
            controller: BROKER_NAME.into(),
            instance: Some("test-replica".into()),
        },
    );
    let event = Publish {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note(&facts, text)),
        action: "Revoke".into(),
        secondary: Some(pool_ref(ns, &facts.pool)),
    };
    recorder.publish(&event, &vm_ref(ns, member)).await.unwrap();
}

fn facts(user: &str, pool: &str, why: &str) -> Facts {
    Facts {
        user: Some(user.into()),
        by: None,
        pool: pool.into(),
        why: Some(why.into()),
    }
}

#[tokio::test]
async fn audit_lists_the_trail_filtered_and_the_csv_parses_back() {
    with_broker();
    let ns = corral_tests::namespace("audit-cli").await;
    let admin = client_as("admin").await;
    let tricky = "reclaimed: idle 30m, \"no user\"\nsince 09:00";
    broker_act(
        &ns,
        "lab-1",
        "Reclaimed",
        facts("alice", "lab", "idle"),
        tricky,
    )
    .await;
    broker_act(
        &ns,
        "other-1",
        "Claimed",
        facts("bob", "other", "claim"),
        "granted to bob",
    )
    .await;
    // Two hours ago, as the broker would have written it then.
    let old = Timestamp::now() - SignedDuration::from_hours(2);
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let stale = Event {
        metadata: ObjectMeta {
            name: Some("lab-2.old".into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(old)),
        reason: Some("Released".into()),
        action: Some("Revoke".into()),
        type_: Some("Normal".into()),
        reporting_controller: Some(BROKER_NAME.into()),
        reporting_instance: Some("test-replica".into()),
        regarding: Some(vm_ref(&ns, "lab-2")),
        related: Some(pool_ref(&ns, "lab")),
        note: Some(note(
            &facts("carol", "lab", "released"),
            "released by carol",
        )),
        ..Default::default()
    };
    events.create(&PostParams::default(), &stale).await.unwrap();
    // Not the trail: no DesktopPool related.
    let foreign = Event {
        metadata: ObjectMeta {
            name: Some("lab-1.foreign".into()),
            ..Default::default()
        },
        related: None,
        note: Some(note(&facts("mallory", "lab", "x"), "not ours")),
        ..stale.clone()
    };
    events
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    // The client's own act: an administrator force-releases alice's claim.
    pool_vms(&admin, &ns, "fr", 1).await.unwrap();
    let alice = actor_as("alice").await;
    assign(&alice, &ns, "fr", "alice", &ClaimOptions::default())
        .await
        .unwrap();
    let released = unassign(
        &actor_as("admin").await,
        &ns,
        "fr-1",
        &UnassignOptions { force: true },
    )
    .await
    .unwrap();
    assert!(released.forced);

    let all = eventually(
        "the force release in the trail",
        Duration::from_secs(10),
        || {
            let admin = admin.clone();
            let ns = ns.clone();
            async move {
                let all = list(&admin, &ns, &AuditFilter::default()).await.unwrap();
                all.iter()
                    .any(|e| e.reason == "ForceReleased")
                    .then_some(all)
            }
        },
    )
    .await;
    assert!(
        all.iter().all(|e| e.user.as_deref() != Some("mallory")),
        "{all:#?}"
    );
    let forced = all.iter().find(|e| e.reason == "ForceReleased").unwrap();
    assert_eq!(
        (
            forced.user.as_deref(),
            forced.by.as_deref(),
            forced.pool.as_str()
        ),
        (Some("alice"), Some("admin"), "fr")
    );
    assert_eq!(
        (forced.member.as_deref(), forced.why.as_deref()),
        (Some("fr-1"), Some("force"))
    );
    assert!(
        all.windows(2).all(|w| w[0].time <= w[1].time),
        "oldest first"
    );

    let lab = list(
        &admin,
        &ns,
        &AuditFilter {
            pool: Some("lab".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let reasons: Vec<&str> = lab.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["Released", "Reclaimed"], "{lab:#?}");
    let recent = AuditFilter {
        pool: Some("lab".into()),
        since: Some(Timestamp::now() - SignedDuration::from_hours(1)),
        ..Default::default()
    };
    let lab_recent = list(&admin, &ns, &recent).await.unwrap();
    assert_eq!(lab_recent.len(), 1);
    assert_eq!(lab_recent[0].message, tricky);
    let member = AuditFilter {
        member: Some("lab-2".into()),
        ..Default::default()
    };
    assert_eq!(
        list(&admin, &ns, &member).await.unwrap()[0].user.as_deref(),
        Some("carol")
    );

    // Not an administrator: RBAC does not let alice list the namespace's Events, and the
    // refusal says whose the trail is.
    let err = list(&client_as("alice").await, &ns, &AuditFilter::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), vdi_core::error::ErrorKind::Forbidden, "{err}");
    assert!(
        err.to_string().contains(&format!(
            "list Events in namespace \"{ns}\" was refused: only Corral VDI administrators \
             (group corral-vdi:admins) read the audit trail"
        )),
        "{err}"
    );

    // The CLI's CSV parses back, header first, the message's quote, comma and line break kept
    // (the break written as \u{a}, as every cell from the cluster).
    let out = ok(&cli(&["audit", "-n", &ns, "--pool", "lab", "-o", "csv"]));
    let mut reader = csv::Reader::from_reader(out.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        header,
        [
            "time", "reason", "user", "by", "member", "pool", "why", "message"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(&rows[1][1], "Reclaimed");
    assert_eq!(
        (&rows[1][2], &rows[1][4], &rows[1][6]),
        ("alice", "lab-1", "idle")
    );
    assert_eq!(&rows[1][7], tricky.replace('\n', "\\u{a}"));
    assert!(rows[1][0].parse::<Timestamp>().is_ok(), "{:?}", &rows[1][0]);
    let out = ok(&cli(&[
        "audit", "-n", &ns, "--pool", "lab", "--since", "1h", "-o", "csv",
    ]));
    assert_eq!(
        csv::Reader::from_reader(out.as_bytes()).records().count(),
        1,
        "{out}"
    );

    // JSON: every entry, every field.
    let out = ok(&cli(&["audit", "-n", &ns, "-o", "json"]));
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    // At least what was listed before (the broker may have written more since).
    assert!(json.as_array().unwrap().len() >= all.len(), "{out}");
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .any(|e| e["by"] == "admin" && e["why"] == "force")
    );

    // The table and the help say how long Events live.
    let out = ok(&cli(&["audit", "-n", &ns, "--member", "fr-1"]));
    assert!(
        out.contains("ForceReleased") && out.contains(TTL_NOTICE),
        "{out}"
    );
    assert!(!out.contains("Reclaimed"), "{out}");
    let help = ok(&cli(&["audit", "--help"]));
    assert!(help.contains(TTL_NOTICE), "{help}");
}
