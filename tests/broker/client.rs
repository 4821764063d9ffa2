//! The client's half of a claim with a broker (issue 25, "the broker does the cluster's half"):
//! a claim is the Lease alone, then a wait — watching the member — reported step by step until
//! the broker has labelled, bound and started it; the pools view shows it "granting" until
//! then; a release deletes the Lease alone and the broker stops the member; and the app's link
//! names the leader, as the CLI's `pool list` judges the members.

use std::sync::Mutex;
use std::time::Duration;

use corral_tests::{actor_as, client_as, desktop_member, namespace, sandbox, vms, wait_power};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::Api;
use vdi_core::claim::cluster_half::NO_BROKER_NOTICE;
use vdi_core::claim::{
    ClaimOptions, ClaimProgress, Claimed, PowerAction, UnassignOptions, assign_with_progress,
    unassign,
};
use vdi_core::clock::ServerClock;
use vdi_core::names::{ASSIGNED_TO_LABEL, lease_name};
use vdi_core::policy::release::ReleaseEffect;
use vdi_core::scope::Scope;
use vdi_core::state::{ClaimSide, MemberState, MemberView};
use vdi_core::watch::list_pools_on;

use crate::{CONVERGE, cli_as, power_code, replicas_mine, replicas_steady, wait_no_grant};

/// `member` of `pool` in `ns` as `pool list` shows it with a broker.
async fn listed(ns: &str, pool: &str, member: &str) -> MemberView {
    let admin = client_as("admin").await;
    let clock = ServerClock::measure(&admin).await.unwrap();
    let pools = list_pools_on(
        &admin,
        &Scope::Namespace(ns.into()),
        &clock,
        ClaimSide::Broker,
    )
    .await
    .unwrap();
    pools
        .iter()
        .find(|p| p.name == pool)
        .and_then(|p| p.members.iter().find(|m| m.name == member))
        .cloned()
        .unwrap_or_else(|| panic!("{member} not listed in {ns}"))
}

/// The state of `member` of `pool` in `ns` as `pool list` judges it with a broker.
async fn listed_state(ns: &str, pool: &str, member: &str) -> MemberState {
    listed(ns, pool, member).await.state
}

#[tokio::test]
async fn a_claim_waits_for_the_brokers_grant_and_a_release_is_the_lease_alone() {
    let _steady = replicas_steady().await;
    let ns = namespace("client-flow").await;
    desktop_member(&ns, "cf", "cf-1", false).await;

    // The claim reports its wait, and returns once label, grant and power agree.
    let steps = Mutex::new(Vec::<ClaimProgress>::new());
    let alice = actor_as("alice").await;
    let claimed = assign_with_progress(
        &alice,
        &ns,
        "cf",
        "alice",
        &ClaimOptions::default(),
        |step| steps.lock().unwrap().push(step),
    )
    .await
    .unwrap_or_else(|e| panic!("alice claims with the broker: {e}"));
    assert_eq!(claimed.member, "cf-1");
    assert_eq!(claimed.power, PowerAction::BrokerStarted);
    let steps = steps.into_inner().unwrap();
    assert_eq!(
        steps.first().map(|s| s.message.as_str()),
        Some("granting: waiting for the broker to bind access and start cf-1"),
        "{steps:?}"
    );
    assert!(
        steps
            .iter()
            .all(|s| s.member == "cf-1" && s.pool == "cf" && s.namespace == ns),
        "{steps:?}"
    );
    assert_eq!(listed_state(&ns, "cf", "cf-1").await, MemberState::Assigned);

    // Claiming again resumes at once: nothing left to wait for.
    let again = assign_with_progress(&alice, &ns, "cf", "alice", &ClaimOptions::default(), |_| {})
        .await
        .unwrap();
    assert!(again.resumed && again.member == "cf-1", "{again:?}");

    // alice stops her desktop with the right her grant gives: her claim is complete still
    // (assigned, power Stopped; the broker starts only a new claim), and claiming again starts
    // it with that same right.
    assert_eq!(power_code("alice", &ns, "cf-1", "stop", false).await, 202);
    wait_power(&ns, "cf-1", "Stopped").await;
    let stopped = listed(&ns, "cf", "cf-1").await;
    assert_eq!(stopped.state, MemberState::Assigned, "{stopped:?}");
    assert_eq!(stopped.power, "Stopped");
    let restarted =
        assign_with_progress(&alice, &ns, "cf", "alice", &ClaimOptions::default(), |_| {})
            .await
            .unwrap();
    assert!(restarted.resumed, "{restarted:?}");
    assert_eq!(restarted.power, PowerAction::Started);
    assert_eq!(listed_state(&ns, "cf", "cf-1").await, MemberState::Assigned);
    wait_power(&ns, "cf-1", "Running").await;

    // The release deletes the Lease alone; the broker takes the rest away and stops the VM.
    let released = unassign(&alice, &ns, "cf-1", &UnassignOptions::default())
        .await
        .unwrap();
    assert_eq!(
        released.power,
        PowerAction::BrokerReleases(ReleaseEffect::Stop { warm: false }.into())
    );
    assert!(released.lease_released && !released.label_removed);
    let admin = client_as("admin").await;
    assert!(
        Api::<Lease>::namespaced(admin.clone(), &ns)
            .get_opt(&lease_name("cf-1"))
            .await
            .unwrap()
            .is_none()
    );
    wait_no_grant(&ns, "cf-1", CONVERGE).await;
    corral_tests::eventually("the broker removes the label", CONVERGE, || async {
        let vm = vms(&admin, &ns).get("cf-1").await.ok()?;
        (!vm.labels().contains_key(ASSIGNED_TO_LABEL)).then_some(())
    })
    .await;
    wait_power(&ns, "cf-1", "Stopped").await;
    assert_eq!(listed_state(&ns, "cf", "cf-1").await, MemberState::Free);
}

#[tokio::test]
async fn the_brokers_reason_is_the_claims_progress_and_its_failure_until_it_can_finish() {
    let _steady = replicas_steady().await;
    let ns = namespace("client-wait").await;
    desktop_member(&ns, "cw", "cw-1", false).await;
    // The emulated virt-api refuses to start this VM, with this reason (as KubeVirt's 409s
    // carry theirs): the broker binds access but cannot start it, and says why on the VM.
    let admin = client_as("admin").await;
    let refuse = |value: Option<&str>| {
        serde_json::json!({ "metadata": { "annotations": {
            sandbox::emulator::knobs::REFUSE_START_ANNOTATION: value,
        } } })
    };
    vms(&admin, &ns)
        .patch(
            "cw-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&refuse(Some("the host is in maintenance"))),
        )
        .await
        .unwrap();

    let steps = Mutex::new(Vec::<ClaimProgress>::new());
    let alice = actor_as("alice").await;
    let short = ClaimOptions {
        timeout: Duration::from_secs(4),
        ..ClaimOptions::default()
    };
    let err = assign_with_progress(&alice, &ns, "cw", "alice", &short, |step| {
        steps.lock().unwrap().push(step)
    })
    .await
    .expect_err("the broker cannot start cw-1");
    assert_eq!(err.kind(), vdi_core::error::ErrorKind::Partial, "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with(
            "alice holds the Lease on cw-1, but the broker has not finished the claim within 4 s \
             (the VM is Stopped): the broker says: "
        ) && text.contains("the host is in maintenance"),
        "{text}"
    );
    assert!(
        err.suggestion()
            .is_some_and(|s| s.contains("the Lease is kept and the broker goes on")),
        "{err:?}"
    );
    // The progress showed the broker's reason as it came.
    let steps = steps.into_inner().unwrap();
    let shown = steps
        .iter()
        .find(|s| s.reason.is_some())
        .unwrap_or_else(|| panic!("no step carried the broker's reason: {steps:?}"));
    assert!(
        shown.message.contains("the host is in maintenance"),
        "{shown:?}"
    );
    assert_eq!(shown.reason.as_ref(), Some(&shown.message));
    // pool list: granting, with the reason.
    let member = listed(&ns, "cw", "cw-1").await;
    assert_eq!(member.state, MemberState::Granting, "{member:?}");
    assert_eq!(member.state_label, "granting");
    assert!(
        member
            .broker_reason
            .as_deref()
            .is_some_and(|r| r.contains("the host is in maintenance")),
        "{member:?}"
    );

    // Once the VM may start, the broker finishes; the same claim again resumes and waits for it.
    vms(&admin, &ns)
        .patch(
            "cw-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&refuse(None)),
        )
        .await
        .unwrap();
    let claimed =
        assign_with_progress(&alice, &ns, "cw", "alice", &ClaimOptions::default(), |_| {})
            .await
            .unwrap();
    assert!(claimed.resumed && claimed.member == "cw-1", "{claimed:?}");
    assert_eq!(claimed.power, PowerAction::BrokerStarted);
    assert_eq!(listed_state(&ns, "cw", "cw-1").await, MemberState::Assigned);
}

#[tokio::test]
async fn the_app_names_the_leader_and_the_cli_gives_no_notice() {
    let _steady = replicas_steady().await;
    let ns = namespace("client-link").await;
    let link = alices_link(&ns).await;
    let status = link.broker.clone().expect("alice reads the broker's Lease");
    assert_eq!(status.state, vdi_core::broker::BrokerState::Running);
    let badge = link.broker_live.borrow().clone();
    let leader = status.leader.clone().unwrap();
    assert_eq!(badge.text, format!("broker: {leader}"));
    assert_eq!(badge.notice, None);

    let (ok, _, stderr) = cli_as("alice", &["pool", "list", "-n", &ns]);
    assert!(ok, "{stderr}");
    assert!(!stderr.contains(NO_BROKER_NOTICE), "{stderr}");
}

/// alice's link to the sandbox for namespace `ns`, as the app opens it.
async fn alices_link(ns: &str) -> vdi_core::link::Link {
    let source = vdi_core::cluster::KubeconfigSource {
        path: Some(sandbox().kubeconfig.clone()),
        impersonate: None,
    };
    vdi_core::link::establish(&source, Some("alice"), &Scope::Namespace(ns.into()))
        .await
        .unwrap()
}

/// Waits (at most `within`) until the link's broker badge reads `text`.
async fn badge_reads(link: &vdi_core::link::Link, text: &str, within: Duration) {
    let mut live = link.broker_live.clone();
    let wait = live.wait_for(|badge| badge.text == text);
    if tokio::time::timeout(within, wait).await.is_err() {
        panic!(
            "the badge still reads {:?} after {within:?}, not {text:?}",
            link.broker_live.borrow().text
        );
    }
}

/// Steps a claim reported, shared with the task that makes it.
type Steps = std::sync::Arc<Mutex<Vec<ClaimProgress>>>;

/// `user` claims a member of `pool` in `ns` for themselves in a task of its own (it may wait
/// long), its progress recorded as it comes.
fn claim_in_background(
    user: &'static str,
    ns: &str,
    pool: &'static str,
) -> (tokio::task::JoinHandle<vdi_core::Result<Claimed>>, Steps) {
    let steps = Steps::default();
    let (ns, seen) = (ns.to_owned(), steps.clone());
    let claiming = tokio::spawn(async move {
        let actor = actor_as(user).await;
        assign_with_progress(
            &actor,
            &ns,
            pool,
            user,
            &ClaimOptions::default(),
            move |step| seen.lock().unwrap().push(step),
        )
        .await
    });
    (claiming, steps)
}

#[tokio::test]
async fn without_a_leader_a_claim_says_so_and_waits_and_the_badge_follows() {
    let _mine = replicas_mine().await;
    let ns = namespace("client-noleader").await;
    desktop_member(&ns, "nl", "nl-1", false).await;
    let link = alices_link(&ns).await;
    let leader = link
        .broker
        .as_ref()
        .and_then(|s| s.leader.clone())
        .expect("a replica leads before the test");
    assert_eq!(link.broker_live.borrow().text, format!("broker: {leader}"));

    // Both replicas killed: once the leader Lease runs out, nobody leads.
    let brokers = corral_tests::brokers();
    brokers.signal_all(sandbox::broker::Signal::Kill).unwrap();
    // The Lease's duration, then the link's next judgement of it (every 5 s), and slack.
    let limit = Duration::from_secs(60);
    badge_reads(&link, "broker: no leader", limit).await;

    // A claim now writes its Lease and says it waits for a leader.
    let (claiming, steps) = claim_in_background("alice", &ns, "nl");
    corral_tests::eventually("the claim reports its first step", CONVERGE, || async {
        (!steps.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let first = steps.lock().unwrap()[0].message.clone();
    assert!(
        first.starts_with("no broker replica leads (last renewed ")
            && first.ends_with("): the claim waits"),
        "{first}"
    );
    assert_eq!(listed_state(&ns, "nl", "nl-1").await, MemberState::Granting);

    // The replicas back: one leads, the claim is granted, the badge names the leader.
    for i in 0..brokers.replicas().len() {
        brokers.start(i).await.unwrap();
    }
    let claimed = claiming.await.unwrap().unwrap();
    assert_eq!(claimed.member, "nl-1");
    assert_eq!(claimed.power, PowerAction::BrokerStarted);
    let mut live = link.broker_live.clone();
    tokio::time::timeout(
        limit,
        live.wait_for(|badge| {
            badge.text.starts_with("broker: ") && badge.text != "broker: no leader"
        }),
    )
    .await
    .expect("the badge names a leader again")
    .unwrap();
}

#[tokio::test]
async fn the_cli_shows_the_wait_for_the_grant_and_leaves_the_release_to_the_broker() {
    let _steady = replicas_steady().await;
    let ns = namespace("client-cli").await;
    desktop_member(&ns, "cc", "cc-1", false).await;

    let (ok, stdout, stderr) = cli_as("alice", &["assign", "cc", "alice", "-n", &ns]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stderr.contains("cc-1: granting: waiting for the broker to bind access and start cc-1"),
        "{stderr}"
    );
    assert!(!stderr.contains(NO_BROKER_NOTICE), "{stderr}");
    assert!(stdout.contains("assigned cc-1 → alice"), "{stdout}");
    assert!(stdout.contains("power: started by the broker"), "{stdout}");

    let (ok, stdout, stderr) = cli_as("alice", &["pool", "list", "-n", &ns]);
    assert!(ok, "{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("cc-1"))
        .unwrap_or_else(|| panic!("no row for cc-1: {stdout}"));
    assert!(
        row.contains("assigned") && row.contains("alice") && row.contains("Running"),
        "{row}"
    );

    // bob reaches for alice's desktop by every path: each is refused in the claim's words
    // before anything is opened (ssh never starts), and so is a member that does not exist.
    let held = "Only alice, who holds cc-1, can connect to it";
    let fix = format!("claim a desktop of your own: corral-vdi assign cc bob -n {ns}");
    for args in [
        &["connect", "cc-1"][..],
        &["port-forward", "cc-1", "22"],
        &["vnc", "cc-1", "--proxy-only"],
        &["rdp", "cc-1", "--rdp-file", "/dev/null"],
        &["ssh", "cc-1", "--", "true"],
    ] {
        let args = [&args[..1], &["-n", &ns], &args[1..]].concat();
        let (ok, stdout, stderr) = cli_as("bob", &args);
        assert!(!ok, "{args:?}: {stdout}");
        assert!(
            stderr.contains(held) && stderr.contains(&fix),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("ssh:") && !stderr.contains("forbidden"),
            "{args:?}: {stderr}"
        );
    }
    let (ok, _, stderr) = cli_as("bob", &["port-forward", "cc-9", "22", "-n", &ns]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "no such member: namespace \"{ns}\" has no VirtualMachine \"cc-9\""
        )),
        "{stderr}"
    );
    assert_eq!(
        listed_state(&ns, "cc", "cc-1").await,
        MemberState::Assigned,
        "alice's claim untouched"
    );

    let (ok, stdout, stderr) = cli_as("alice", &["unassign", "cc-1", "-n", &ns]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("released cc-1 (was alice)"), "{stdout}");
    assert!(
        stdout.contains("power: the broker acts: its VM is stopped"),
        "{stdout}"
    );
    wait_power(&ns, "cc-1", "Stopped").await;

    // A desktop nobody holds: `connect` says once that it is not alice's and fails, where it
    // listed a permission refusal per path and succeeded.
    let (ok, stdout, stderr) = cli_as("alice", &["connect", "cc-1", "-n", &ns]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("cc-1 is not yours") && stderr.contains("corral-vdi assign cc alice"),
        "{stderr}"
    );
    assert!(
        stdout.is_empty() && !stderr.contains("forbidden"),
        "{stdout}{stderr}"
    );
}

/// Thaws the broker's replicas it froze, even when the test fails half-way.
struct Frozen(std::sync::Arc<sandbox::broker::Brokers>);

impl Frozen {
    /// Freezes every replica (SIGSTOP: a wedged pod, its connections open).
    fn all() -> Frozen {
        let brokers = corral_tests::brokers();
        brokers.signal_all(sandbox::broker::Signal::Stop).unwrap();
        Frozen(brokers)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(e) = self.0.signal_all(sandbox::broker::Signal::Cont) {
            eprintln!("thawing the broker's replicas: {e:#}");
        }
    }
}

#[tokio::test]
async fn a_member_the_broker_is_releasing_reads_releasing_and_a_claim_waits_for_it() {
    let _mine = replicas_mine().await;
    let ns = namespace("client-releasing").await;
    desktop_member(&ns, "rl", "rl-1", false).await;
    let alice = actor_as("alice").await;
    assign_with_progress(&alice, &ns, "rl", "alice", &ClaimOptions::default(), |_| {})
        .await
        .unwrap_or_else(|e| panic!("alice claims rl-1: {e}"));

    // The broker frozen, alice's release is half done: her Lease gone, her label and grant
    // still on the VM. That is "releasing", nobody's claim: not her label-only assignment.
    let frozen = Frozen::all();
    unassign(&alice, &ns, "rl-1", &UnassignOptions::default())
        .await
        .unwrap_or_else(|e| panic!("alice releases rl-1: {e}"));
    let view = listed(&ns, "rl", "rl-1").await;
    assert_eq!(view.state, MemberState::Releasing, "{view:?}");
    assert_eq!(view.state_label, "releasing");
    assert_eq!(view.holder, None, "{view:?}");
    assert!(!view.claimable);

    // bob's claim finds no free member but one being released: it waits, and says so, instead
    // of refusing; once the broker carries on, he gets it.
    let (claiming, steps) = claim_in_background("bob", &ns, "rl");
    let waiting = "no member of rl is free: waiting for the broker to finish releasing rl-1";
    corral_tests::eventually("bob's claim says it waits for rl-1", CONVERGE, || async {
        let steps = steps.lock().unwrap();
        steps.iter().any(|s| s.message == waiting).then_some(())
    })
    .await;
    assert!(
        !claiming.is_finished(),
        "the claim waits while rl-1 is released"
    );
    drop(frozen);
    let claimed = claiming
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("bob's claim after the release: {e}"));
    assert_eq!(claimed.member, "rl-1");
    assert_eq!(claimed.identity, "bob");
    assert_eq!(listed_state(&ns, "rl", "rl-1").await, MemberState::Assigned);
}
