//! Pool listing and the live view against a real API server (the sandbox): grouping, every
//! member-state row that listing can show, identity per user, RBAC refusals, unreachable and
//! refused clusters. Power states come from the sandbox's KubeVirt emulation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_tests::{client_as, eventually, namespace, recording_client, sandbox};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use vdi_core::clock::ServerClock;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::error::ErrorKind;
use vdi_core::identity::whoami;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, MEMBER_LABEL, POOL_LABEL, encode_identity, lease_name,
};
use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};
use vdi_core::scope::Scope;
use vdi_core::state::{MemberState, PoolView};
use vdi_core::watch::{FeedStatus, PoolFeed, PoolsSnapshot, list_pools};

async fn create_vm(client: &Client, ns: &str, name: &str, labels: &[(&str, &str)]) {
    let mut vm = VirtualMachine::new(
        name,
        VirtualMachineSpec {
            run_strategy: Some("Halted".into()),
            ..Default::default()
        },
    );
    vm.metadata.namespace = Some(ns.into());
    vm.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    Api::<VirtualMachine>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap_or_else(|e| panic!("create VM {name}: {e}"));
}

/// A claim Lease last renewed `ago` before now (negative: in the future).
async fn create_lease(
    client: &Client,
    ns: &str,
    pool: &str,
    member: &str,
    holder: &str,
    ago: SignedDuration,
) {
    let renew = Timestamp::now() - ago;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(member)),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_owned(), pool.to_owned()),
                (MEMBER_LABEL.to_owned(), member.to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            acquire_time: Some(MicroTime(renew)),
            renew_time: Some(MicroTime(renew)),
            lease_duration_seconds: Some(3600),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_or_else(|e| panic!("create Lease for {member}: {e}"));
}

fn member<'a>(pools: &'a [PoolView], pool: &str, name: &str) -> &'a vdi_core::state::MemberView {
    pools
        .iter()
        .find(|p| p.name == pool)
        .unwrap_or_else(|| panic!("pool {pool} missing from {pools:?}"))
        .members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("member {name} missing"))
}

async fn clock(client: &Client) -> ServerClock {
    ServerClock::measure(client).await.expect("server clock")
}

#[tokio::test]
async fn the_seeded_legacy_pool_lists_with_states_holder_and_power() {
    let admin = client_as("admin").await;
    let scope = Scope::Namespace("corral-vms".into());
    let clock = clock(&admin).await;
    // The emulator sets printableStatus shortly after start-up; legacy-2 runs (Always).
    let pools = eventually("legacy-2 Running", Duration::from_secs(20), || async {
        let pools = list_pools(&admin, &scope, &clock).await.unwrap();
        (member(&pools, "legacy", "legacy-2").power == "Running").then_some(pools)
    })
    .await;
    let legacy: Vec<_> = pools.iter().filter(|p| p.name == "legacy").collect();
    assert_eq!(legacy.len(), 1, "one legacy pool");
    let legacy = legacy[0];
    assert_eq!(legacy.namespace, "corral-vms");
    let names: Vec<_> = legacy.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["legacy-1", "legacy-2", "legacy-3"]);
    let two = &legacy.members[1];
    assert_eq!(two.state, MemberState::AssignedLegacy);
    assert_eq!(two.holder.as_deref(), Some("alice"));
    assert_eq!(two.claimed_at.as_deref(), Some("2026-01-15T09:30:00Z"));
    assert!(two.lease.is_none());
    for free in [&legacy.members[0], &legacy.members[2]] {
        assert_eq!(free.state, MemberState::Free);
        assert!(free.claimable);
        assert_eq!(free.power, "Stopped");
    }
    assert!(
        !pools
            .iter()
            .any(|p| p.members.iter().any(|m| m.name == "golden-desktop")),
        "the unlabelled golden VM is no pool member"
    );
}

#[tokio::test]
async fn every_state_row_that_listing_can_show() {
    let admin = client_as("admin").await;
    let ns = namespace("rows").await;
    let pool = "rows";
    let hour = SignedDuration::from_hours(1);
    let fresh = SignedDuration::from_secs(30);
    let odd_user = "alice@example.com";
    let rows = [
        ("rows-1", None, None, MemberState::Free),
        (
            "rows-2",
            None,
            Some(("bob", hour * 2)),
            MemberState::FreeStaleLease,
        ),
        ("rows-3", None, Some(("bob", fresh)), MemberState::Claiming),
        ("rows-4", Some("carol"), None, MemberState::AssignedLegacy),
        (
            "rows-5",
            Some(odd_user),
            Some((odd_user, fresh)),
            MemberState::Assigned,
        ),
        (
            "rows-6",
            Some("bob"),
            Some(("bob", hour * 2)),
            MemberState::AssignedLeaseExpired,
        ),
    ];
    for (name, assigned, lease, _) in &rows {
        let label = assigned.map(encode_identity);
        let mut labels = vec![(POOL_LABEL, pool)];
        if let Some(l) = &label {
            labels.push((ASSIGNED_TO_LABEL, l.as_str()));
        }
        create_vm(&admin, &ns, name, &labels).await;
        if let Some((holder, ago)) = lease {
            create_lease(&admin, &ns, pool, name, holder, *ago).await;
        }
    }
    // A VM of another pool and an unlabelled VM in the same namespace.
    create_vm(&admin, &ns, "other-1", &[(POOL_LABEL, "other")]).await;
    create_vm(&admin, &ns, "loose", &[]).await;

    let scope = Scope::Namespace(ns.clone());
    let pools = list_pools(&admin, &scope, &clock(&admin).await)
        .await
        .unwrap();
    assert_eq!(
        pools.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["other", "rows"]
    );
    for (name, assigned, lease, state) in &rows {
        let m = member(&pools, pool, name);
        assert_eq!(m.state, *state, "{name}");
        assert_eq!(m.claimable, state.claimable(), "{name}");
        let expected_holder = lease.map(|(h, _)| h).or(*assigned);
        assert_eq!(m.holder.as_deref(), expected_holder, "{name}");
        assert_eq!(m.lease.is_some(), lease.is_some(), "{name}");
    }
    let counts = pools[1].counts;
    assert_eq!((counts.free, counts.claimed, counts.total), (2, 4, 6));
    let assigned = member(&pools, pool, "rows-5");
    let lease = assigned.lease.as_ref().unwrap();
    assert!(lease.active && !lease.renew_time_in_future);
    assert!(lease.resource_version.is_some());

    // The live view judges the same way (power aside: the emulator may have moved on).
    let feed = PoolFeed::spawn(admin.clone(), scope, clock(&admin).await);
    let live = live_snapshot(&feed).await;
    let claims = |pools: &[PoolView]| -> Vec<_> {
        pools
            .iter()
            .flat_map(|p| &p.members)
            .map(|m| (m.name.clone(), m.state, m.holder.clone(), m.lease.clone()))
            .collect()
    };
    assert_eq!(claims(&live.pools), claims(&pools));
}

async fn live_snapshot(feed: &PoolFeed) -> PoolsSnapshot {
    let mut rx = feed.subscribe();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let snap = rx.borrow_and_update().clone();
            if !matches!(snap.status, FeedStatus::Syncing) {
                return snap;
            }
            rx.changed().await.expect("feed ended");
        }
    })
    .await
    .expect("the live view synced")
}

/// Waits until the feed publishes a snapshot for which `check` holds; returns how long it took.
async fn until(feed: &PoolFeed, what: &str, check: impl Fn(&PoolsSnapshot) -> bool) -> Duration {
    let started = tokio::time::Instant::now();
    let mut rx = feed.subscribe();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if check(&rx.borrow_and_update()) {
                return;
            }
            rx.changed().await.expect("feed ended");
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the live view never showed {what}"));
    started.elapsed()
}

fn state_of(snap: &PoolsSnapshot, name: &str) -> Option<MemberState> {
    snap.pools
        .iter()
        .flat_map(|p| &p.members)
        .find(|m| m.name == name)
        .map(|m| m.state)
}

#[tokio::test]
async fn the_live_view_follows_changes_without_polling() {
    let admin = client_as("admin").await;
    let ns = namespace("live").await;
    let feed = PoolFeed::spawn(
        admin.clone(),
        Scope::Namespace(ns.clone()),
        clock(&admin).await,
    );
    let first = live_snapshot(&feed).await;
    assert_eq!(first.status, FeedStatus::Live);
    assert!(first.pools.is_empty());

    create_vm(&admin, &ns, "live-1", &[(POOL_LABEL, "live")]).await;
    let took = until(&feed, "live-1 free", |s| {
        state_of(s, "live-1") == Some(MemberState::Free)
    })
    .await;
    println!("a new member showed in the live view {took:.1?} after its creation");

    create_lease(
        &admin,
        &ns,
        "live",
        "live-1",
        "alice",
        SignedDuration::from_secs(1),
    )
    .await;
    until(&feed, "live-1 claiming", |s| {
        state_of(s, "live-1") == Some(MemberState::Claiming)
    })
    .await;

    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let patch = json!({ "metadata": {
        "labels": { ASSIGNED_TO_LABEL: "alice" },
        "annotations": { CLAIMED_AT_ANNOTATION: "2026-11-30T12:00:00Z" } } });
    vms.patch("live-1", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    until(&feed, "live-1 assigned", |s| {
        state_of(s, "live-1") == Some(MemberState::Assigned)
    })
    .await;

    vms.delete("live-1", &DeleteParams::default())
        .await
        .unwrap();
    until(&feed, "live-1 gone", |s| state_of(s, "live-1").is_none()).await;
}

#[tokio::test]
async fn an_expiring_lease_turns_stale_on_time_without_an_event() {
    let admin = client_as("admin").await;
    let ns = namespace("expiry").await;
    create_vm(&admin, &ns, "exp-1", &[(POOL_LABEL, "exp")]).await;
    // Renewed 3590 s ago with a 3600 s duration: expires in about ten seconds, time enough
    // for the live view to show the claim first on a loaded machine.
    create_lease(
        &admin,
        &ns,
        "exp",
        "exp-1",
        "bob",
        SignedDuration::from_secs(3590),
    )
    .await;
    let feed = PoolFeed::spawn(admin.clone(), Scope::Namespace(ns), clock(&admin).await);
    until(&feed, "exp-1 claiming", |s| {
        state_of(s, "exp-1") == Some(MemberState::Claiming)
    })
    .await;
    until(&feed, "exp-1 stale", |s| {
        state_of(s, "exp-1") == Some(MemberState::FreeStaleLease)
    })
    .await;
}

#[tokio::test]
async fn a_renew_time_in_the_future_is_reported() {
    let admin = client_as("admin").await;
    let ns = namespace("future").await;
    create_vm(
        &admin,
        &ns,
        "fut-1",
        &[(POOL_LABEL, "fut"), (ASSIGNED_TO_LABEL, "bob")],
    )
    .await;
    create_lease(
        &admin,
        &ns,
        "fut",
        "fut-1",
        "bob",
        -SignedDuration::from_hours(1),
    )
    .await;
    let pools = list_pools(&admin, &Scope::Namespace(ns), &clock(&admin).await)
        .await
        .unwrap();
    let lease = member(&pools, "fut", "fut-1").lease.clone().unwrap();
    assert!(lease.renew_time_in_future);
}

#[tokio::test]
async fn identity_comes_from_the_cluster_for_each_user() {
    for user in ["admin", "alice", "bob", "carol"] {
        let id = whoami(&client_as(user).await).await.unwrap();
        assert_eq!(id.username, user);
        assert!(id.groups.contains(&"system:authenticated".to_owned()));
    }
    let admin = whoami(&client_as("admin").await).await.unwrap();
    assert!(admin.groups.contains(&"system:masters".to_owned()));
    assert!(
        admin.is_admin(),
        "admin is in {}",
        vdi_core::names::ADMIN_GROUP
    );
    let alice = whoami(&client_as("alice").await).await.unwrap();
    assert!(!alice.is_admin());
}

#[tokio::test]
async fn contexts_and_connections_follow_the_kubeconfig() {
    let source = KubeconfigSource {
        path: Some(sandbox().kubeconfig.clone()),
        ..KubeconfigSource::default()
    };
    let contexts = source.contexts().unwrap();
    let names: Vec<_> = contexts.contexts.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["admin", "alice", "bob", "carol"]);
    assert_eq!(contexts.current.as_deref(), Some("admin"));
    assert_eq!(
        contexts.contexts[1].namespace.as_deref(),
        Some("corral-vms")
    );
    let conn = source.connect(Some("bob")).await.unwrap();
    assert_eq!(conn.default_namespace, "corral-vms");
    assert_eq!(whoami(&conn.client).await.unwrap().username, "bob");
    let err = source
        .connect(Some("nobody"))
        .await
        .err()
        .expect("unknown context refused");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("nobody"), "{err}");
}

/// The app's connect (vdi_core::link::establish): who acts, the guard and a live feed of the
/// scope asked for come from one call; a bad namespace or an unknown context is refused.
#[tokio::test]
async fn a_cluster_link_says_who_acts_and_feeds_the_scope_asked_for() {
    let source = KubeconfigSource {
        path: Some(sandbox().kubeconfig.clone()),
        ..KubeconfigSource::default()
    };
    let scope = Scope::Namespace("corral-vms".into());
    let link = vdi_core::link::establish(&source, Some("alice"), &scope)
        .await
        .unwrap();
    let actor = link.actor.as_ref().expect("the cluster says who alice is");
    assert_eq!(actor.username(), "alice");
    assert!(link.guard.is_some(), "the guard's state was read");
    let snap = live_snapshot(&link.feed).await;
    assert!(matches!(snap.status, FeedStatus::Live), "{:?}", snap.status);
    assert_eq!(snap.scope, scope);

    let bad = Scope::Namespace("Not A Namespace".into());
    let err = vdi_core::link::establish(&source, Some("alice"), &bad)
        .await
        .err()
        .expect("a bad namespace refused");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    let err = vdi_core::link::establish(&source, Some("nobody"), &scope)
        .await
        .err()
        .expect("an unknown context refused");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
}

#[tokio::test]
async fn bob_is_forbidden_where_rbac_says_so() {
    let bob = client_as("bob").await;
    let clock = clock(&bob).await;
    let err = list_pools(&bob, &Scope::Namespace("default".into()), &clock)
        .await
        .expect_err("bob may not read namespace default");
    assert_eq!(err.kind(), ErrorKind::Forbidden);
    let text = err.to_string();
    assert!(
        text.contains("\"default\"") && text.contains("bob"),
        "{text}"
    );
    assert!(err.suggestion().unwrap().contains("RBAC"));

    let err = list_pools(&bob, &Scope::All, &clock)
        .await
        .expect_err("bob may not list all namespaces");
    assert_eq!(err.kind(), ErrorKind::Forbidden);

    // The live view reports the refusal instead of showing an empty list.
    let feed = PoolFeed::spawn(bob.clone(), Scope::All, clock);
    let snap = live_snapshot(&feed).await;
    match snap.status {
        FeedStatus::Failing { error } => assert_eq!(error.kind, ErrorKind::Forbidden),
        other => panic!("expected a forbidden status, got {other:?}"),
    }
    // Where RBAC allows it, bob sees the pools.
    let pools = list_pools(&bob, &Scope::Namespace("corral-vms".into()), &clock)
        .await
        .unwrap();
    assert!(pools.iter().any(|p| p.name == "legacy"));
}

#[tokio::test]
async fn a_refused_watch_backs_off_instead_of_retrying_at_once() {
    let paths = Arc::new(Mutex::new(Vec::new()));
    let bob = recording_client("bob", paths.clone()).await;
    let clock = clock(&bob).await;
    let lists = || {
        paths
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.ends_with("/leases") || p.ends_with("/virtualmachines"))
            .count()
    };
    let feed = PoolFeed::spawn(bob, Scope::All, clock);
    eventually("both refused lists", Duration::from_secs(10), || {
        std::future::ready((lists() >= 2).then_some(()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let sent = lists();
    drop(feed);
    // Each watch waits 200 ms doubling to 2 s (with jitter) between attempts: at most 8
    // attempts each in these 8 s. Retrying at the shortest delay, as it did while every new list
    // reset the policy, made about 50.
    assert!(sent <= 20, "{sent} refused lists in 8 s: no back-off");
    assert!(
        sent >= 4,
        "{sent} lists in 8 s: the watches stopped retrying"
    );
}

fn write_kubeconfig(
    dir: &std::path::Path,
    server: &str,
    user: serde_json::Value,
) -> std::path::PathBuf {
    let path = dir.join(format!("kubeconfig-{}", Timestamp::now().as_nanosecond()));
    let doc = json!({ "apiVersion": "v1", "kind": "Config",
        "clusters": [{ "name": "c", "cluster": { "server": server, "insecure-skip-tls-verify": true } }],
        "users": [{ "name": "u", "user": user }],
        "contexts": [{ "name": "x", "context": { "cluster": "c", "user": "u", "namespace": "corral-vms" } }],
        "current-context": "x" });
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    path
}

#[tokio::test]
async fn refused_credentials_and_unreachable_servers_get_their_own_errors() {
    let dir = std::env::temp_dir();
    // A token the API server does not know: 401.
    let refused = write_kubeconfig(
        &dir,
        &sandbox().server,
        json!({ "token": "not-a-real-token" }),
    );
    let conn = KubeconfigSource {
        path: Some(refused.clone()),
        ..KubeconfigSource::default()
    }
    .connect(None)
    .await
    .unwrap();
    let err = whoami(&conn.client).await.expect_err("bad token refused");
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    let feed = PoolFeed::spawn(
        conn.client.clone(),
        Scope::Namespace("corral-vms".into()),
        ServerClock::default(),
    );
    match live_snapshot(&feed).await.status {
        FeedStatus::Failing { error } => assert_eq!(error.kind, ErrorKind::Unauthorized),
        other => panic!("expected unauthorized, got {other:?}"),
    }

    // Nothing listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = write_kubeconfig(
        &dir,
        &format!("https://127.0.0.1:{port}"),
        json!({ "token": "x" }),
    );
    let conn = KubeconfigSource {
        path: Some(gone.clone()),
        ..KubeconfigSource::default()
    }
    .connect(None)
    .await
    .unwrap();
    let err = whoami(&conn.client).await.expect_err("no server");
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    assert!(err.retryable());
    let feed = PoolFeed::spawn(
        conn.client.clone(),
        Scope::Namespace("corral-vms".into()),
        ServerClock::default(),
    );
    match live_snapshot(&feed).await.status {
        FeedStatus::Failing { error } => assert_eq!(error.kind, ErrorKind::Unreachable),
        other => panic!("expected unreachable, got {other:?}"),
    }
    for path in [refused, gone] {
        std::fs::remove_file(path).unwrap();
    }
}

#[tokio::test]
async fn the_server_clock_agrees_with_this_machine() {
    let admin = client_as("admin").await;
    let clock = clock(&admin).await;
    assert!(
        clock.offset.abs() < SignedDuration::from_secs(5),
        "the sandbox runs on this machine, yet the offset is {:?}",
        clock.offset
    );
}

/// An API server that stops answering while its watch connections stay open (its process
/// stopped, as a wedged server looks) is noticed by the heartbeat: the view says it is failing,
/// with the reason, instead of "live" over stale data. Once the server answers again the view
/// is live and current. Each within [`until`]'s 20 s (a loaded machine's bound; the watches
/// alone would never notice); the test prints how soon (targets: a few seconds, and 5 s).
#[tokio::test]
async fn a_silent_api_server_is_noticed_and_the_view_is_current_soon_after_it_answers() {
    let cluster = corral_tests::NamedSandbox::new(&format!("silent{}", std::process::id()));
    let kubeconfig = cluster.up();
    let admin = sandbox::kubeconfig::client(&kubeconfig, "admin")
        .await
        .unwrap();
    let feed = PoolFeed::spawn(
        admin.clone(),
        Scope::Namespace("corral-vms".into()),
        clock(&admin).await,
    );
    let live = live_snapshot(&feed).await;
    assert_eq!(live.status, FeedStatus::Live);

    cluster.signal_apiserver("-STOP");
    // Heartbeat every 3 s, each given 3 s to answer; the watches alone would see nothing. It
    // is retried on its own (the app says "reconnecting…", not "offline").
    let noticed = until(&feed, "the silence", |s| {
        matches!(&s.status, FeedStatus::Failing { error }
            if error.message.contains("has not answered")
                && error.kind == ErrorKind::Timeout
                && error.retryable)
    })
    .await;
    eprintln!("silence noticed after {noticed:.1?}");

    cluster.signal_apiserver("-CONT");
    // A change made as it comes back shows in the view that caught up.
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), "corral-vms");
    vms.patch(
        "legacy-1",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: "carol" } } })),
    )
    .await
    .unwrap();
    let back = until(&feed, "live and current again", |s| {
        s.status == FeedStatus::Live
            && s.pools
                .iter()
                .flat_map(|p| &p.members)
                .any(|m| m.name == "legacy-1" && m.holder.as_deref() == Some("carol"))
    })
    .await;
    eprintln!("current again {back:.1?} after the server answered");
}
