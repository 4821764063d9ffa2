//! Cluster data written by someone else is untrusted input (SPEC "Bad input and faults"),
//! against the sandbox's real API server: a claim Lease whose times run off the end of the
//! calendar, one with a time the time library cannot even hold under any name, a claim Lease
//! without labels and a labelled Lease under another name. Each is that object's own problem:
//! every list, feed and claim on anything else works, through the core and the CLI, and what
//! refuses changes nothing.

use std::process::{Output, Stdio};
use std::time::Duration;

use corral_tests::{
    actor_as, cli_binary, client_as, eventually, namespace, now_micro, plant_lease, poisoned,
    pool_vms, sandbox, stand_in_usbredirect_dir, usb_fixture, wait_power,
};
use kube::Client;
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use vdi_core::claim::{ClaimOptions, UnassignOptions, assign, unassign};
use vdi_core::clock::ServerClock;
use vdi_core::names::{MEMBER_LABEL, POOL_LABEL, lease_name};
use vdi_core::scope::Scope;
use vdi_core::state::{MemberState, PoolView};
use vdi_core::watch::{FeedStatus, PoolFeed, list_pools};

/// Runs the CLI as `context` with `args`, KUBECONFIG at the sandbox.
fn cli(context: &str, args: &[&str]) -> Output {
    std::process::Command::new(cli_binary())
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env("CORRAL_USB_FIXTURE", usb_fixture())
        .env(
            "PATH",
            format!(
                "{}:{}",
                stand_in_usbredirect_dir().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env_remove("RUST_LOG")
        .args(["--context", context])
        .args(args)
        .output()
        .unwrap()
}

/// alice's `usb redir` of the recorded security key into `member`, which is not plugged in
/// here: the claim check comes first. Returns the output and its text.
fn redirect_as_alice(ns: &str, member: &str) -> (Output, String) {
    let usb = cli(
        "alice",
        &[
            "usb",
            "redir",
            member,
            "-n",
            ns,
            "--device",
            "1050:0407",
            "--yes",
        ],
    );
    let text = out(&usb);
    (usb, text)
}

fn out(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The resourceVersions of every VM and Lease in `ns`: what "nothing moved" compares.
async fn versions(admin: &Client, ns: &str) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for (kind, list) in [
        (
            "vm",
            corral_tests::vms(admin, ns).list(&Default::default()).await,
        ),
        (
            "lease",
            corral_tests::leases(admin, ns)
                .list(&Default::default())
                .await,
        ),
    ] {
        for o in list.unwrap() {
            all.push((
                format!("{kind}/{}", o.metadata.name.unwrap()),
                o.metadata.resource_version.unwrap(),
            ));
        }
    }
    all.sort();
    all
}

async fn pools(client: &Client, ns: &str) -> Vec<PoolView> {
    let clock = ServerClock::measure(client).await.unwrap();
    list_pools(client, &Scope::Namespace(ns.into()), &clock)
        .await
        .unwrap()
}

fn pool<'a>(pools: &'a [PoolView], name: &str) -> &'a PoolView {
    pools.iter().find(|p| p.name == name).unwrap()
}

/// The live feed of `ns` as `client`, once it is live and `ready` holds.
async fn feed_until(client: &Client, ns: &str, ready: impl Fn(&[PoolView]) -> bool) -> PoolFeed {
    let clock = ServerClock::measure(client).await.unwrap();
    let feed = PoolFeed::spawn(client.clone(), Scope::Namespace(ns.into()), clock);
    let mut rx = feed.subscribe();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            {
                let snap = rx.borrow_and_update();
                if let FeedStatus::Failing { error } = &snap.status {
                    panic!("feed failing: {}", error.message);
                }
                if snap.status == FeedStatus::Live && ready(&snap.pools) {
                    return;
                }
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .expect("the feed showed the pools within 20 s");
    feed
}

#[tokio::test]
async fn poisoned_leases_are_their_own_problem_and_every_other_path_works() {
    let (ns, bobs) = poisoned("poison").await;
    let admin = client_as("admin").await;
    let alice = actor_as("alice").await;
    let expected_problem = "unreadable claim: renewTime plus leaseDurationSeconds 3600 is beyond \
                            the end of the calendar";

    // The list: bob's member is an unreadable claim, the rest as usual, the stray Lease named.
    let listed = pools(&admin, &ns).await;
    let dev = pool(&listed, "dev");
    let bad = dev.members.iter().find(|m| m.name == bobs).unwrap();
    assert_eq!(bad.state, MemberState::Unreadable);
    assert_eq!(bad.state_label, "unreadable claim");
    assert_eq!(
        bad.lease.as_ref().and_then(|l| l.problem.as_deref()),
        expected_problem.strip_prefix("unreadable claim: ")
    );
    assert_eq!(bad.holder.as_deref(), Some("bob"));
    assert!(!bad.claimable);
    assert_eq!(dev.counts.free, 2, "{dev:?}");
    let legacy = pool(&listed, "legacy");
    assert_eq!(legacy.stray_leases, ["zz-poison"]);
    assert!(legacy.members.iter().all(|m| m.state == MemberState::Free));

    // The live feed: live, with the same views.
    let feed = feed_until(alice.client(), &ns, |p| {
        p.iter()
            .any(|p| p.name == "legacy" && p.stray_leases == ["zz-poison"])
            && p.iter()
                .flat_map(|p| &p.members)
                .any(|m| m.name == bobs && m.state == MemberState::Unreadable)
    })
    .await;

    // The CLI's list, and its watch, as alice.
    let listing = cli("alice", &["pool", "list", "-n", &ns]);
    let text = out(&listing);
    assert!(listing.status.success(), "{text}");
    assert!(text.contains(expected_problem), "{text}");
    assert!(
        text.contains("stray Lease zz-poison: labelled for this pool"),
        "{text}"
    );
    let mut watch = tokio::process::Command::new(cli_binary())
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .args(["--context", "alice", "pool", "list", "-w", "-n", &ns])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line.clone());
            if line.contains("stray Lease zz-poison") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "the watch printed: {seen:#?}");
    assert!(
        seen.iter().any(|l| l.contains(expected_problem)),
        "{seen:#?}"
    );
    watch.kill().await.unwrap();

    // A claim goes to a readable member; its release works.
    let claimed = assign(&alice, &ns, "dev", "alice", &ClaimOptions::default())
        .await
        .unwrap();
    assert_ne!(claimed.member, bobs);
    assert_eq!(claimed.races_lost, 0);
    wait_power(&ns, &claimed.member, "Running").await;

    // USB redirection: into bob's unreadable claim, refused as someone else's desktop; into
    // alice's own, the claim check passes (the recorded device is not plugged in here).
    let (usb, text) = redirect_as_alice(&ns, &bobs);
    assert_eq!(usb.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "{bobs} is not your desktop (it is assigned to bob)"
        )),
        "{text}"
    );
    let (_, text) = redirect_as_alice(&ns, &claimed.member);
    assert!(!text.contains("not your desktop"), "{text}");
    assert!(!text.contains("Lease"), "{text}");

    let released = unassign(&alice, &ns, &claimed.member, &UnassignOptions::default())
        .await
        .unwrap();
    assert!(released.lease_released);
    wait_power(&ns, &claimed.member, "Stopped").await;

    // Releasing bob's unreadable claim as alice: refused, naming bob and the problem; nothing
    // moved.
    let before = versions(&admin, &ns).await;
    let err = unassign(&alice, &ns, &bobs, &UnassignOptions::default())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "{bobs} is claimed by bob, but its Lease corral-vdi-{bobs} cannot be read \
             (renewTime plus leaseDurationSeconds 3600 is beyond the end of the calendar), so it \
             may be live; only bob can release it"
        )) && !err.suggestion().unwrap_or_default().contains("wait until"),
        "{text}"
    );
    assert_eq!(versions(&admin, &ns).await, before);

    // Deleting the pool beside the stray Lease leaves that Lease alone.
    let deleted = cli("admin", &["pool", "delete", "legacy", "-n", &ns]);
    assert!(deleted.status.success(), "{}", out(&deleted));
    assert!(
        corral_tests::leases(&admin, &ns)
            .get_opt("zz-poison")
            .await
            .unwrap()
            .is_some(),
        "a stray Lease is not the pool's to delete"
    );
    // The pool with the unreadable claim: refused without --force, naming it; then deleted.
    let before = versions(&admin, &ns).await;
    let refused = cli("admin", &["pool", "delete", "dev", "-n", &ns]);
    let text = out(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("{bobs} (its Lease, held by bob, cannot be read")),
        "{text}"
    );
    assert_eq!(versions(&admin, &ns).await, before);

    // The feed lived through all of it.
    assert_eq!(feed.subscribe().borrow().status, FeedStatus::Live);

    let forced = cli("admin", &["pool", "delete", "dev", "-n", &ns, "--force"]);
    assert!(forced.status.success(), "{}", out(&forced));
    eventually("the pool's members to go", Duration::from_secs(20), || {
        let admin = admin.clone();
        let ns = ns.clone();
        async move {
            let left = pools(&admin, &ns).await;
            left.iter().all(|p| p.name != "dev").then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn a_claim_lease_is_joined_by_its_name_on_every_path_never_by_its_labels() {
    let admin = client_as("admin").await;
    let ns = namespace("joins").await;
    pool_vms(&admin, &ns, "dev", 2).await.unwrap();
    let active = json!({ "holderIdentity": "carol", "acquireTime": now_micro(),
                         "renewTime": now_micro(), "leaseDurationSeconds": 3600 });
    // carol's claim on dev-1, written without labels; a labelled Lease for dev-2 under another
    // name.
    plant_lease(&admin, &ns, &lease_name("dev-1"), json!({}), active.clone()).await;
    plant_lease(
        &admin,
        &ns,
        "dev-2-claim",
        json!({ POOL_LABEL: "dev", MEMBER_LABEL: "dev-2" }),
        active,
    )
    .await;

    // List and feed: dev-1 is carol's, dev-2 free, the misnamed Lease a stray.
    let check = |pools: &[PoolView]| {
        let dev = pool(pools, "dev");
        let one = &dev.members[0];
        let two = &dev.members[1];
        one.state == MemberState::Claiming
            && one.holder.as_deref() == Some("carol")
            && two.state == MemberState::Free
            && dev.stray_leases == ["dev-2-claim"]
    };
    let listed = pools(&admin, &ns).await;
    assert!(check(&listed), "{listed:#?}");
    let alice = actor_as("alice").await;
    let feed = feed_until(alice.client(), &ns, check).await;

    // Assign: the unlabelled Lease holds dev-1 (no "lost race" on it); dev-2 goes to alice.
    let claimed = assign(&alice, &ns, "dev", "alice", &ClaimOptions::default())
        .await
        .unwrap();
    assert_eq!((claimed.member.as_str(), claimed.races_lost), ("dev-2", 0));
    let bob = actor_as("bob").await;
    let err = assign(&bob, &ns, "dev", "bob", &ClaimOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("pool has no free members"), "{err}");
    assert!(!err.contains("lost"), "{err}");
    wait_power(&ns, "dev-2", "Running").await;

    // Unassign and USB: dev-1 is carol's, whatever its labels say. Nothing moves.
    let before = versions(&admin, &ns).await;
    let err = unassign(&alice, &ns, "dev-1", &UnassignOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("dev-1 is claimed by carol until"), "{err}");
    let (_, text) = redirect_as_alice(&ns, "dev-1");
    assert!(
        text.contains("dev-1 is not your desktop (it is assigned to carol)"),
        "{text}"
    );
    assert_eq!(versions(&admin, &ns).await, before);
    assert_eq!(feed.subscribe().borrow().status, FeedStatus::Live);

    // Delete: the claim Lease of dev-1 goes with its member (by name), the stray stays.
    let deleted = cli("admin", &["pool", "delete", "dev", "-n", &ns, "--force"]);
    assert!(deleted.status.success(), "{}", out(&deleted));
    let leases = corral_tests::leases(&admin, &ns);
    assert!(
        leases
            .get_opt(&lease_name("dev-1"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(leases.get_opt("dev-2-claim").await.unwrap().is_some());
}

#[tokio::test]
async fn a_refused_release_of_someone_elses_expired_claim_leaves_the_desktop_running() {
    // bob's desktop, his claim expired and its label gone ("free (stale lease)"), still
    // running: alice may not release it with the guard on, and asking changes nothing, the
    // power least of all (the claim is asked about first, the power changed last).
    let admin = client_as("admin").await;
    let ns = namespace("stale").await;
    corral_tests::desktop_member(&ns, "st", "st-1", false).await;
    let bob = actor_as("bob").await;
    let short = ClaimOptions {
        lease_seconds: 1,
        ..ClaimOptions::default()
    };
    assign(&bob, &ns, "st", "bob", &short).await.unwrap();
    wait_power(&ns, "st-1", "Running").await;
    corral_tests::vms(&admin, &ns)
        .patch(
            "st-1",
            &Default::default(),
            &kube::api::Patch::Merge(json!({ "metadata": { "labels": {
                vdi_core::names::ASSIGNED_TO_LABEL: null } } })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed = pools(&admin, &ns).await;
    assert_eq!(
        pool(&listed, "st").members[0].state,
        MemberState::FreeStaleLease
    );

    let alice = actor_as("alice").await;
    let before = versions(&admin, &ns).await;
    let err = unassign(&alice, &ns, "st-1", &UnassignOptions::default())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("release Lease corral-vdi-st-1 (asked before anything changed")
            && text.contains("corral-vdi guard"),
        "{text}"
    );
    assert_eq!(versions(&admin, &ns).await, before, "nothing moved");
    let listed = pools(&admin, &ns).await;
    assert_eq!(pool(&listed, "st").members[0].power, "Running");

    // bob, whose claim it was, releases it: the desktop stops.
    let released = unassign(&bob, &ns, "st-1", &UnassignOptions::default())
        .await
        .unwrap();
    assert!(released.lease_released);
    wait_power(&ns, "st-1", "Stopped").await;
}

#[tokio::test]
async fn a_desktop_released_right_after_its_claim_is_stopped_not_left_starting() {
    // Found by a hostile trial: the release read printableStatus (still Stopped a moment after
    // the start) as "already stopped" and left the run strategy Always, so the next claimant
    // got a desktop someone else had started.
    let admin = client_as("admin").await;
    let ns = namespace("quick").await;
    pool_vms(&admin, &ns, "q", 1).await.unwrap();
    let alice = actor_as("alice").await;
    assign(&alice, &ns, "q", "alice", &ClaimOptions::default())
        .await
        .unwrap();
    unassign(&alice, &ns, "q-1", &UnassignOptions::default())
        .await
        .unwrap();
    let vm = corral_tests::vms(&admin, &ns).get("q-1").await.unwrap();
    assert_eq!(vm.data["spec"]["runStrategy"], "Halted", "{:?}", vm.data);
    wait_power(&ns, "q-1", "Stopped").await;
}

#[tokio::test]
async fn escape_codes_and_huge_values_from_the_cluster_are_printed_escaped_and_cut() {
    // Found by a hostile trial: a holder with escape codes reached the terminal raw (a new
    // window title, a cleared screen), and a 70,000-character cell panicked the table.
    let admin = client_as("admin").await;
    let ns = namespace("ansi").await;
    pool_vms(&admin, &ns, "a", 2).await.unwrap();
    let evil = "evil\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}LTR\nfake-row";
    for (member, holder) in [("a-1", evil.to_owned()), ("a-2", "h".repeat(70_000))] {
        plant_lease(
            &admin,
            &ns,
            &lease_name(member),
            json!({}),
            json!({ "holderIdentity": holder, "acquireTime": now_micro(),
                    "renewTime": now_micro(), "leaseDurationSeconds": 3600 }),
        )
        .await;
    }
    let listing = cli("alice", &["pool", "list", "-n", &ns]);
    let text = out(&listing);
    assert!(listing.status.success(), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text}"
    );
    assert!(
        text.contains("evil\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{202e}LTR\\u{a}fake-row"),
        "{text}"
    );
    assert!(text.contains("… (69800 more characters)"), "{text}");
    // A refusal naming that holder is escaped as well.
    let refused = cli("alice", &["unassign", "a-1", "-n", &ns]);
    let text = out(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(
        !text.contains('\u{1b}') && text.contains("a-1 is claimed by evil\\u{1b}"),
        "{text}"
    );
}
