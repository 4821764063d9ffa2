//! The holder's side of a managed pool's claims against the sandbox's real API server and its
//! broker (issue 26, "renewal and reclaim"): a claim lasts the pool's `disconnectGrace`; while
//! a session of the holder is open on the member the client renews it, so it outlives several
//! Lease durations; once the last session closes it is reclaimed within `disconnectGrace` plus
//! the broker's margin; Keep and renew are the holder's alone, and Keep is refused past
//! `maxSession`. Each refusal is checked together with "nothing moved".
//!
//! A test binary of its own (not a module of `claims`): its sandbox runs the broker, which
//! reclaims expired claims, while the `claims` binary tests the client-side flow without one.
//! The test that stops the broker's replicas holds [`REPLICAS`] alone.

use std::time::Duration;

use corral_tests::{actor_as, client_as, desktop_member, eventually, golden_vm, namespace};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::RwLock;
use tokio::time::Instant;
use vdi_core::claim::renew::{keep, renew};
use vdi_core::claim::{ClaimOptions, assign};
use vdi_core::connect::Connector;
use vdi_core::error::{Error, ErrorKind};
use vdi_core::names::{KEPT_AT_ANNOTATION, lease_name};
use vdi_core::policy::{DesktopPool, DesktopPoolSpec};
use vdi_core::session::{SessionKind, Supervisor, Target};

/// The broker's default margin past a Lease's end before it reclaims
/// (`--reclaim-margin-seconds`, 30).
const MARGIN: Duration = Duration::from_secs(30);

/// The pools' `disconnectGrace`: the claims' Lease duration.
const GRACE: Duration = Duration::from_secs(10);

/// Tests that need the broker running hold this shared; the one that stops it holds it alone.
static REPLICAS: RwLock<()> = RwLock::const_new(());

fn with_broker() {
    corral_tests::sandbox_with(|o| o.broker = true);
}

/// A managed pool `pool` of one member `<pool>-1` in a namespace of its own, its golden VM, and
/// its DesktopPool with `disconnectGrace` [`GRACE`] and `max_session`; returns the namespace.
async fn managed_pool(prefix: &str, pool: &str, max_session: Option<&str>) -> String {
    let ns = namespace(prefix).await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    desktop_member(&ns, pool, &format!("{pool}-1"), true).await;
    let spec = DesktopPoolSpec {
        golden: "gold".into(),
        size: 1,
        disconnect_grace: Some(format!("{}s", GRACE.as_secs())),
        max_session: max_session.map(Into::into),
        ..Default::default()
    };
    Api::<DesktopPool>::namespaced(client_as("admin").await, &ns)
        .create(&PostParams::default(), &DesktopPool::new(pool, spec))
        .await
        .unwrap();
    ns
}

/// `user` claims a member of `pool` as `corral-vdi assign` does (with the broker: granted).
async fn claim(user: &str, ns: &str, pool: &str) -> String {
    assign(
        &actor_as(user).await,
        ns,
        pool,
        user,
        &ClaimOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{user} claims in {pool}: {e}"))
    .member
}

/// The claim Lease of `member` in `ns`, if any.
async fn lease(ns: &str, member: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client_as("admin").await, ns)
        .get_opt(&lease_name(member))
        .await
        .unwrap()
}

/// Holder, renewTime + duration, and resourceVersion of `lease`.
fn judged(lease: &Lease) -> (Option<String>, Option<Timestamp>, Option<String>) {
    let spec = lease.spec.clone().unwrap_or_default();
    let end = spec
        .renew_time
        .zip(spec.lease_duration_seconds)
        .map(|(t, d)| {
            t.0.checked_add(SignedDuration::from_secs(d.into()))
                .unwrap()
        });
    (spec.holder_identity, end, lease.resource_version())
}

fn refusal<T: std::fmt::Debug>(result: vdi_core::Result<T>) -> Error {
    match result {
        Err(e) if e.kind() == ErrorKind::Refused => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn an_open_session_keeps_the_claim_past_three_durations_and_its_end_lets_it_be_reclaimed() {
    with_broker();
    let _steady = REPLICAS.read().await;
    let ns = managed_pool("renew", "rn", None).await;
    let member = claim("alice", &ns, "rn").await;
    let first = lease(&ns, &member).await.expect("alice's Lease");
    assert_eq!(
        first.spec.as_ref().and_then(|s| s.lease_duration_seconds),
        Some(GRACE.as_secs() as i32),
        "a managed pool's claim lasts its disconnectGrace"
    );

    // A forward to the console, as `corral-vdi vnc --proxy-only` runs it, renewing alice's claim.
    let alice = actor_as("alice").await;
    let supervisor = Supervisor::new();
    let _renewal = supervisor.renew_claims(alice.clone());
    let connector = Connector::new(corral_tests::streams_as("alice").await, supervisor.clone());
    let target = Target::Vnc {
        preserve_session: true,
    };
    let forward = connector
        .forward(&ns, &member, SessionKind::Forward, target, None)
        .await
        .unwrap_or_else(|e| panic!("alice's forward to {member}: {e}"));

    // Past three Lease durations and the broker's margin: alice's all along, never expired by
    // the API server's clock.
    let opened = Instant::now();
    let mut renewals = 0;
    let mut last_version = first.resource_version();
    while opened.elapsed() < 3 * GRACE + MARGIN + Duration::from_secs(5) {
        let now = alice.clock().now();
        let held = lease(&ns, &member)
            .await
            .expect("the Lease while the forward is open");
        let (holder, end, version) = judged(&held);
        assert_eq!(holder.as_deref(), Some("alice"), "{member} changed hands");
        assert!(
            end.is_some_and(|end| end > now),
            "the claim expired at {end:?} (now {now})"
        );
        if version != last_version {
            renewals += 1;
            last_version = version;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        renewals >= 9,
        "{renewals} renewals in {:?}",
        opened.elapsed()
    );
    assert!(
        supervisor.get(forward.id).unwrap().claim_lost.is_none(),
        "the session was told its claim was lost"
    );

    // The last session closes: the renewal stops, the claim ends and the broker reclaims it.
    assert!(supervisor.stop(forward.id));
    let closed = Instant::now();
    eventually(
        &format!("{member}'s claim reclaimed"),
        // The Lease ends at most GRACE after the close; the broker acts its margin later, on
        // its next pass (a few seconds; room for a loaded machine).
        GRACE + MARGIN + Duration::from_secs(30),
        || async { lease(&ns, &member).await.is_none().then_some(()) },
    )
    .await;
    // Its last renewal was at most a third of GRACE before the close, and the broker waits
    // its margin past the Lease's end.
    assert!(
        closed.elapsed() >= MARGIN,
        "reclaimed {:?} after the session closed: before its Lease could end",
        closed.elapsed()
    );
}

#[tokio::test]
async fn renew_and_keep_are_the_holders_alone_and_keep_records_its_time() {
    with_broker();
    let _steady = REPLICAS.read().await;
    let ns = managed_pool("keep", "kp", Some("1h")).await;
    let member = claim("alice", &ns, "kp").await;
    let before = lease(&ns, &member).await.unwrap();

    // bob on alice's member: both refused, nothing moved.
    let bob = actor_as("bob").await;
    let err = refusal(renew(&bob, &ns, &member).await);
    assert!(
        err.to_string().contains("held by alice, not by you (bob)"),
        "{err}"
    );
    let err = refusal(keep(&bob, &ns, &member).await);
    assert!(err.to_string().contains("held by alice"), "{err}");
    // A VM nobody claimed (the golden VM), and a member that does not exist: each said as it
    // is, not as a claim that was released.
    let err = refusal(keep(&bob, &ns, "gold").await);
    assert!(err.to_string().contains("gold is not claimed"), "{err}");
    let err = keep(&bob, &ns, "kp-99").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string()
            .contains("has no VirtualMachine \"kp-99\": no claim to keep or renew"),
        "{err}"
    );
    let unchanged = lease(&ns, &member).await.unwrap();
    assert_eq!(unchanged.resource_version(), before.resource_version());
    assert!(!unchanged.annotations().contains_key(KEPT_AT_ANNOTATION));

    // alice renews, then keeps: renewTime moves on, Keep's time is on the Lease.
    let alice = actor_as("alice").await;
    let renewed = renew(&alice, &ns, &member).await.unwrap();
    assert_eq!(renewed.duration_seconds, GRACE.as_secs() as i32);
    let kept = keep(&alice, &ns, &member).await.unwrap();
    let after = lease(&ns, &member).await.unwrap();
    let recorded: Timestamp = after.annotations()[KEPT_AT_ANNOTATION].parse().unwrap();
    assert_eq!(recorded, kept.kept_at);
    assert_eq!(judged(&after).1, Some(kept.renewed.expires_at));
    assert!(kept.renewed.renewed_at > renewed.renewed_at);
    let next = kept.next_reclaim.expect("a managed pool's next reclaim");
    assert_eq!(next.at, kept.renewed.expires_at);
}

#[tokio::test]
async fn keep_is_refused_past_max_session_and_writes_nothing() {
    with_broker();
    let _mine = REPLICAS.write().await;
    let admin = client_as("admin").await;
    let ns = managed_pool("maxs", "mx", Some("1h")).await;
    let member = claim("alice", &ns, "mx").await;

    // The broker stopped, so that nothing reclaims the claim while it is past maxSession.
    let brokers = corral_tests::brokers();
    for i in 0..brokers.replicas().len() {
        brokers.kill(i, sandbox::broker::Signal::Kill).unwrap();
    }
    eventually(
        "the broker's replicas gone",
        Duration::from_secs(10),
        || {
            std::future::ready(
                brokers
                    .replicas()
                    .iter()
                    .all(|r| r.pid.is_none())
                    .then_some(()),
            )
        },
    )
    .await;

    // As if alice had held it for two hours (maxSession is one).
    let acquired = Timestamp::now() - SignedDuration::from_hours(2);
    let patch = json!({ "spec": { "acquireTime": acquired.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string() } });
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .patch(
            &lease_name(&member),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let before = lease(&ns, &member).await.unwrap();
    let outcome = keep(&actor_as("alice").await, &ns, &member).await;
    let after = lease(&ns, &member).await.unwrap();

    // The broker back before anything is asserted, so the other tests find it running.
    for i in 0..brokers.replicas().len() {
        brokers.start(i).await.unwrap();
    }
    brokers.wait_ready(&admin).await.unwrap();

    let err = refusal(outcome);
    assert!(
        err.to_string()
            .contains("reached the pool's maxSession (1h since"),
        "{err}"
    );
    assert_eq!(after.resource_version(), before.resource_version());
    assert!(!after.annotations().contains_key(KEPT_AT_ANNOTATION));
}
