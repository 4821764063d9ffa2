//! Managed pools, the broker's pool loop (issue 26: live resize, the warm buffer, removal that
//! survives a restart): a pool resized 4 → 8 → 2 with two members claimed keeps both claimed
//! members (uid, holder and grant unchanged) until they are released; a warm buffer of 2 keeps
//! the two lowest free members running, refills after a claim and stops them at warm 0; and a
//! broker stopped halfway through a shrink (a member's Lease taken and its VM marked, another's
//! Lease taken before its mark) finishes it when it starts again.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_tests::{
    actor_as, annotate, client_as, desktop_pools, eventually, golden_vm, leases, managed_pool_in,
    namespace, now_micro, plant_lease, wait_pool_members,
};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use sandbox::broker::Signal;
use serde_json::json;
use vdi_core::audit::parse_note;
use vdi_core::claim::{ClaimOptions, assign};
use vdi_core::names::{
    BROKER_USER, CHANGED_BY_ANNOTATION, MEMBER_LABEL, POOL_LABEL, REMOVING_ANNOTATION, lease_name,
};
use vdi_core::policy::{DesktopPool, DesktopPoolSpec};

use crate::{CONVERGE, claim, replicas_mine, replicas_steady, wait_granted};

/// How long the broker may take to clone a pool's members in the sandbox.
const CLONING: Duration = Duration::from_secs(120);

/// A namespace with the golden VM `golden` (stopped) and a DesktopPool `pool` of `size`
/// (`warm`) made by the broker.
async fn managed(prefix: &str, pool: &str, size: i32, warm: i32) -> String {
    let ns = namespace(prefix).await;
    golden_vm(&ns, "golden", "Halted", |_| {}).await;
    let spec = DesktopPoolSpec {
        golden: "golden".into(),
        size,
        warm: Some(warm),
        ..Default::default()
    };
    managed_pool_in(&ns, pool, spec, CLONING).await;
    ns
}

/// The pool's DesktopPool as it is.
async fn desktop_pool(ns: &str, pool: &str) -> DesktopPool {
    desktop_pools(&client_as("admin").await, ns)
        .get(pool)
        .await
        .unwrap()
}

/// The reasons of the broker's Events about `pool` in `ns` (on its members or the DesktopPool).
async fn reasons(ns: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client_as("admin").await, ns);
    let mut reasons: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some(vdi_core::names::BROKER_NAME))
        .filter_map(|e| e.reason)
        .collect();
    reasons.sort();
    reasons
}

/// A member's claim Lease held by `holder` for an hour from now (as admin).
async fn hold(ns: &str, pool: &str, member: &str, holder: &str) {
    let now = now_micro();
    plant_lease(
        &client_as("admin").await,
        ns,
        &lease_name(member),
        json!({ POOL_LABEL: pool, MEMBER_LABEL: member }),
        json!({ "holderIdentity": holder, "acquireTime": now, "renewTime": now,
                "leaseDurationSeconds": 3600 }),
    )
    .await;
}

fn names(members: &BTreeMap<String, corral_tests::PoolMember>) -> Vec<&str> {
    members.keys().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resize_clones_and_removes_free_members_and_never_touches_claimed_ones() {
    let _steady = replicas_steady().await;
    let ns = managed("pools-resize", "rs", 4, 0).await;
    corral_tests::set_pool_spec(&ns, "rs", json!({ "size": 8 })).await;
    let grown = wait_pool_members(&ns, "rs", "8 settled members", CLONING, |m| {
        m.len() == 8 && m.values().all(|m| m.settled() && m.free())
    })
    .await;
    let want: Vec<String> = (1..=8).map(|i| format!("rs-{i}")).collect();
    assert_eq!(
        names(&grown),
        want.iter().map(String::as_str).collect::<Vec<_>>()
    );
    // alice claims as the CLI does (any member); bob holds another one above the size to come.
    let alice = claim("alice", &ns, "rs").await.member;
    let bob = if alice == "rs-7" { "rs-8" } else { "rs-7" };
    hold(&ns, "rs", bob, "bob").await;
    wait_granted(&ns, bob, "bob", CONVERGE).await;
    let before = corral_tests::pool_members(&ns, "rs").await;

    corral_tests::set_pool_spec(&ns, "rs", json!({ "size": 2 })).await;
    let mut keep: Vec<String> = vec!["rs-1".into(), "rs-2".into(), alice.clone(), bob.into()];
    keep.sort();
    keep.dedup();
    let shrunk = wait_pool_members(&ns, "rs", "free members above 2 removed", CLONING, |m| {
        m.keys().cloned().collect::<Vec<_>>() == keep && m.values().all(|m| !m.deleting)
    })
    .await;
    for claimed in [alice.as_str(), bob] {
        assert_eq!(
            shrunk[claimed].uid, before[claimed].uid,
            "{claimed} is the same VM"
        );
        assert_eq!(
            shrunk[claimed].holder, before[claimed].holder,
            "{claimed} keeps its holder"
        );
        assert!(
            !shrunk[claimed]
                .annotations
                .contains_key(REMOVING_ANNOTATION)
        );
    }
    wait_granted(&ns, bob, "bob", CONVERGE).await;
    let what = "the status counts the claimed members";
    let status = eventually(what, CONVERGE, || async {
        let status = desktop_pool(&ns, "rs").await.status?;
        (status.members == keep.len() as i32 && status.claimed == 2).then_some(status)
    })
    .await;
    let resizing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Resizing")
        .unwrap();
    assert_eq!(
        resizing.status, "True",
        "{bob} waits for its release: {resizing:?}"
    );
    assert!(resizing.message.contains(bob), "{}", resizing.message);
    // `pool list` says the pending resize under the pool's head, as the app's head does.
    let (ok, stdout, stderr) = crate::cli_as("admin", &["pool", "list", "-n", &ns]);
    assert!(ok, "{stderr}");
    let note = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("resizing to 2: "))
        .unwrap_or_else(|| panic!("no pending resize in pool list: {stdout}"));
    assert!(
        note.contains(bob) && note.contains("when released"),
        "{note}"
    );

    // bob's claim ends: his member goes; alice's stays even if it is above the size.
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client_as("admin").await, &ns)
        .delete(&lease_name(bob), &DeleteParams::default())
        .await
        .unwrap();
    let mut after: Vec<String> = vec!["rs-1".into(), "rs-2".into(), alice.clone()];
    after.sort();
    after.dedup();
    wait_pool_members(
        &ns,
        "rs",
        "bob's member removed once released",
        CLONING,
        |m| m.keys().cloned().collect::<Vec<_>>() == after,
    )
    .await;
    eventually("bob's member's Lease is gone", CONVERGE, || async {
        let lease = leases(&client_as("admin").await, &ns)
            .get_opt(&lease_name(bob))
            .await
            .ok()?;
        lease.is_none().then_some(())
    })
    .await;
    let reasons = reasons(&ns).await;
    for reason in ["Resized", "MemberAdded", "MemberRemoving", "MemberRemoved"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} Event: {reasons:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_warm_buffer_keeps_the_lowest_free_members_running() {
    let _steady = replicas_steady().await;
    let ns = managed("pools-warm", "wm", 4, 2).await;
    let running = |m: &BTreeMap<String, corral_tests::PoolMember>| {
        m.iter()
            .filter(|(_, m)| m.power == "Running")
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        running(&corral_tests::pool_members(&ns, "wm").await),
        ["wm-1", "wm-2"]
    );
    let taken = claim("alice", &ns, "wm").await.member;
    wait_pool_members(
        &ns,
        "wm",
        "2 free members running beside alice's",
        CLONING,
        |m| {
            m[&taken].power == "Running"
                && m.iter()
                    .filter(|(n, m)| **n != taken && m.power == "Running" && m.free())
                    .count()
                    == 2
        },
    )
    .await;
    corral_tests::set_pool_spec(&ns, "wm", json!({ "warm": 0 })).await;
    let cold = wait_pool_members(&ns, "wm", "free members stopped at warm 0", CLONING, |m| {
        m.iter()
            .all(|(n, m)| (*n == taken) == (m.power == "Running") && m.settled())
    })
    .await;
    assert_eq!(
        cold[&taken].holder.as_deref(),
        Some("alice"),
        "the claimed member is alice's"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_restarted_halfway_through_a_shrink_finishes_it() {
    let ns = {
        let _steady = replicas_steady().await;
        managed("pools-restart", "hs", 4, 0).await
    };
    let _mine = replicas_mine().await;
    let brokers = corral_tests::brokers();
    let count = brokers.replicas().len();
    brokers.signal_all(Signal::Kill).unwrap();
    let before = corral_tests::pool_members(&ns, "hs").await;
    // What a broker killed between its writes leaves: hs-4's Lease taken and its VM marked,
    // hs-3's Lease taken but not yet marked; and the size already 2.
    hold(&ns, "hs", "hs-4", BROKER_USER).await;
    annotate(&ns, "hs-4", REMOVING_ANNOTATION, Some("shrink")).await;
    hold(&ns, "hs", "hs-3", BROKER_USER).await;
    corral_tests::set_pool_spec(&ns, "hs", json!({ "size": 2 })).await;
    // A Lease the broker took on a member within the size (a reset cut short before its mark)
    // is given back.
    hold(&ns, "hs", "hs-2", BROKER_USER).await;
    for i in 0..count {
        brokers.start(i).await.unwrap();
    }
    let after = wait_pool_members(&ns, "hs", "hs-3 and hs-4 removed", CLONING, |m| {
        names(m) == ["hs-1", "hs-2"]
    })
    .await;
    assert_eq!(after["hs-2"].uid, before["hs-2"].uid, "hs-2 is kept");
    let admin = client_as("admin").await;
    eventually("the broker's Leases are gone", CLONING, || async {
        let api = leases(&admin, &ns);
        for member in ["hs-2", "hs-3", "hs-4"] {
            if api.get_opt(&lease_name(member)).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
    let status = eventually("Ready at size 2", CONVERGE, || async {
        let status = desktop_pool(&ns, "hs").await.status?;
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && status.members == 2 && status.free == 2).then_some(status)
    })
    .await;
    assert_eq!(
        status.observed_generation,
        desktop_pool(&ns, "hs").await.metadata.generation
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grow_without_its_golden_vm_is_a_condition_and_one_event_then_it_grows() {
    let _steady = replicas_steady().await;
    let ns = namespace("pools-nogolden").await;
    let spec = DesktopPoolSpec {
        golden: "absent".into(),
        size: 2,
        ..Default::default()
    };
    desktop_pools(&client_as("admin").await, &ns)
        .create(&Default::default(), &DesktopPool::new("ng", spec))
        .await
        .unwrap();
    let ready = eventually("Ready=False GrowFailed", CLONING, || async {
        let status = desktop_pool(&ns, "ng").await.status?;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "GrowFailed")
    })
    .await;
    assert!(
        ready.message.contains("DesktopPool ng") && ready.message.contains("\"absent\""),
        "the message names the pool and the golden VM: {}",
        ready.message
    );
    // A full pass (15 s) later: still nothing made, and the refusal recorded once.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let admin = client_as("admin").await;
    let selector = ListParams::default().labels(&format!("{POOL_LABEL}=ng"));
    assert!(
        corral_tests::vms(&admin, &ns)
            .list(&selector)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let clones = corral_tests::clones(&admin, &ns)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(clones.items.is_empty(), "no clone object: {clones:?}");
    let failed = reasons(&ns)
        .await
        .into_iter()
        .filter(|r| r == "GrowFailed")
        .count();
    assert_eq!(failed, 1, "one GrowFailed Event, not one per pass");
    // The golden VM appears: the next try grows the pool.
    golden_vm(&ns, "absent", "Halted", |_| {}).await;
    wait_pool_members(
        &ns,
        "ng",
        "2 members once the golden VM exists",
        CLONING,
        |m| m.len() == 2 && m.values().all(|m| m.settled()),
    )
    .await;
    eventually("Ready", CLONING, || async {
        let status = desktop_pool(&ns, "ng").await.status?;
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(())
    })
    .await;
}

/// Issue 37 item 8, history an administrator can trust: an administrator's assignment is
/// recorded as theirs (from the claim's own record, which the guard pins), a member released
/// with `onRelease: keep` that the warm buffer wants is restarted (and said so) rather than
/// stopped and started again, the lowest free members stay warm, and a resize names who asked,
/// once; the DesktopPool's record of who changed it cannot name someone else.
#[tokio::test(flavor = "multi_thread")]
async fn the_history_names_who_asked_and_a_released_warm_member_is_restarted_not_stopped() {
    let _steady = replicas_steady().await;
    let ns = managed("pools-history", "hy", 3, 1).await;
    wait_pool_members(&ns, "hy", "hy-1 warm", CLONING, |m| {
        m.len() == 3 && m["hy-1"].power == "Running" && m.values().all(|m| m.settled())
    })
    .await;
    let admin = actor_as("admin").await;
    let claimed = assign(&admin, &ns, "hy", "alice", &ClaimOptions::default())
        .await
        .unwrap();
    assert_eq!(claimed.member, "hy-1", "the claim takes the warm member");
    wait_granted(&ns, "hy-1", "alice", CONVERGE).await;
    let granted = crate::wait_event(&ns, "hy-1", "Claimed", "alice", CONVERGE).await;
    let note = granted.note.unwrap_or_default();
    let (facts, text) = parse_note(&note);
    let facts = facts.unwrap_or_else(|| panic!("the broker's facts in {note:?}"));
    assert_eq!(
        (facts.user.as_deref(), facts.by.as_deref()),
        (Some("alice"), Some("admin")),
        "{note}"
    );
    assert!(
        text.contains("granted to alice, assigned by admin"),
        "{text}"
    );

    // The buffer refills with hy-2; alice's release then keeps hy-1 warm by a restart, and hy-2,
    // now the extra, is stopped.
    wait_pool_members(&ns, "hy", "hy-2 warm beside alice's hy-1", CLONING, |m| {
        m["hy-2"].power == "Running" && m["hy-2"].free() && m.values().all(|m| m.settled())
    })
    .await;
    corral_tests::release_as("alice", &ns, "hy-1").await;
    let released = crate::wait_event(&ns, "hy-1", "Released", "alice", CONVERGE).await;
    let note = released.note.unwrap_or_default();
    assert!(note.contains("VM restarted to stay warm"), "{note}");
    assert!(!note.contains("VM stopped"), "{note}");
    // Waited for as a whole: the warm member and both stopped ones.
    wait_pool_members(
        &ns,
        "hy",
        "hy-1 warm again, hy-2 and hy-3 stopped",
        CLONING,
        |m| {
            m.values().all(|m| m.settled() && m.free())
                && m["hy-1"].power == "Running"
                && m["hy-2"].power == "Stopped"
                && m["hy-3"].power == "Stopped"
        },
    )
    .await;
    let stopped = crate::wait_event(&ns, "hy-2", "WarmStopped", "hy-2", CONVERGE).await;
    assert!(
        stopped
            .note
            .is_some_and(|n| n.contains("the lowest stay running")),
        "the warm buffer says why"
    );

    // Releasing a free member releases nothing: the warm one keeps running, untouched.
    let vms = corral_tests::vms(admin.client(), &ns);
    let warm_before = vms.get("hy-1").await.unwrap();
    let alice = actor_as("alice").await;
    let released = vdi_core::claim::unassign(
        &alice,
        &ns,
        "hy-1",
        &vdi_core::claim::UnassignOptions::default(),
    )
    .await
    .unwrap();
    assert!(
        released.previous_holder.is_none() && !released.lease_released && !released.label_removed,
        "{released:?}"
    );
    assert!(
        matches!(&released.power, vdi_core::claim::PowerAction::LeftAsIs(why) if why.contains("free")),
        "{:?}",
        released.power
    );
    assert_eq!(
        vms.get("hy-1").await.unwrap().resource_version(),
        warm_before.resource_version(),
        "releasing a free member changed its VM"
    );

    // A resize by the administrator names them, once, though another change of the pool's
    // spec follows at once (the members not yet the new size).
    vdi_core::managed::change::resize(admin.client(), &ns, "hy", 2, None)
        .await
        .unwrap();
    vdi_core::managed::change::set(
        admin.client(),
        &ns,
        "hy",
        &vdi_core::managed::change::PolicyChanges {
            max_session: Some("90m".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let resized = crate::wait_event(&ns, "hy", "Resized", "admin", CONVERGE).await;
    let note = resized.note.unwrap_or_default();
    assert_eq!(
        parse_note(&note).0.and_then(|f| f.by).as_deref(),
        Some("admin"),
        "{note}"
    );
    assert!(
        note.contains("pool hy resized by admin: 3 → 2 members"),
        "{note}"
    );
    wait_pool_members(&ns, "hy", "2 members", CLONING, |m| {
        m.len() == 2 && m.values().all(|m| m.settled())
    })
    .await;
    let generation = desktop_pool(&ns, "hy").await.metadata.generation;
    eventually("the pool's status at its generation", CONVERGE, || async {
        let pool = desktop_pool(&ns, "hy").await;
        (pool.status?.observed_generation == generation).then_some(())
    })
    .await;
    let resizes = reasons(&ns)
        .await
        .iter()
        .filter(|r| *r == "Resized")
        .count();
    assert_eq!(resizes, 1, "one Resized Event: {:?}", reasons(&ns).await);

    // Nobody writes another's name as the pool's changer, administrators neither.
    let pools = desktop_pools(admin.client(), &ns);
    let record = |pool: DesktopPool| (pool.metadata.generation, pool.metadata.annotations);
    let before = record(desktop_pool(&ns, "hy").await);
    let forged = pools
        .patch(
            "hy",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "annotations": { CHANGED_BY_ANNOTATION: "bob" } } }),
            ),
        )
        .await;
    match forged {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.contains(
                    "DesktopPool hy may not say it was changed by bob: corral.dev/vdi-changed-by \
                     names who writes the spec (admin)"
                ),
                "{}",
                s.message
            );
        }
        other => panic!("expected the broker's policy to refuse, got {other:?}"),
    }
    assert_eq!(
        record(desktop_pool(&ns, "hy").await),
        before,
        "the DesktopPool's spec and record did not move"
    );
}
