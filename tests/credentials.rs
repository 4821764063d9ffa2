//! Kubeconfigs like kubectl's, from a desktop launch, and credentials that expire during a
//! long session, against the sandbox's real API server: an exec plugin found only on the login
//! shell's PATH, a relative plugin command, a KUBECONFIG list with empty and missing entries, a
//! user whose plugin issues 2-minute client certificates (renewed before each expiry while the
//! live view stays live for 5 minutes), and a failing plugin reported once with a bounded
//! backoff.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use corral_tests::{client_as, namespace, sandbox, target_dir};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, PostParams};
use serde_json::json;
use vdi_core::claim::{ClaimOptions, assign};
use vdi_core::cluster::KubeconfigSource;
use vdi_core::credentials::CredentialState;
use vdi_core::identity::Actor;
use vdi_core::scope::Scope;
use vdi_core::watch::{FeedStatus, PoolFeed};

/// A fresh directory for one test, removed with what is in it (a copy of the test plugin, tens
/// of MiB) when the test ends, passed or failed.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh [`Scratch`] directory for one test.
fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!(
        "corral-cred-{name}-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

fn pki_dir() -> PathBuf {
    sandbox().kubeconfig.parent().unwrap().join("pki")
}

/// Copies the test plugin into `dir` (as `name`) and returns its path.
fn plugin_in(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::copy(target_dir().join("corral-test-cert-plugin"), &path)
        .expect("the test plugin (cargo build -p corral-tests)");
    path
}

/// A kubeconfig for user `user` of the sandbox whose credentials come from `command` with
/// `args` (a client.authentication.k8s.io/v1 exec plugin).
fn kubeconfig(path: &Path, user: &str, command: &str, args: &[String]) {
    let sandbox_config = kube::config::Kubeconfig::read_from(&sandbox().kubeconfig).unwrap();
    let cluster = sandbox_config.clusters[0].clone();
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{ "name": cluster.name, "cluster": serde_json::to_value(cluster.cluster).unwrap() }],
        "users": [{ "name": user, "user": { "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": command, "args": args, "interactiveMode": "Never",
            "installHint": "Install it with: corral-idp install (the test's hint)",
        } } }],
        "contexts": [{ "name": user, "context": { "cluster": cluster.name, "user": user } }],
        "current-context": user,
    });
    std::fs::write(path, serde_yaml::to_string(&config).unwrap()).unwrap();
}

/// Gives `user` the client-side flow's desktop role in `ns` (`corral-vdi:self-service`).
async fn grant(ns: &str, user: &str) {
    let bindings: Api<RoleBinding> = Api::namespaced(client_as("admin").await, ns);
    let binding = serde_json::from_value(json!({
        "metadata": { "name": format!("desktop-{user}") },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sandbox::bootstrap::SELF_SERVICE },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }]
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

fn plugin_args(user: &str, seconds: u64, log: &Path, fail_if: &Path) -> Vec<String> {
    vec![
        "--pki".into(),
        pki_dir().display().to_string(),
        "--user".into(),
        user.into(),
        "--seconds".into(),
        seconds.to_string(),
        "--log".into(),
        log.display().to_string(),
        "--fail-if".into(),
        fail_if.display().to_string(),
    ]
}

fn runs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_plugin_only_the_login_shell_knows_is_found_from_a_desktop_launch() {
    let ns = namespace("deskl").await;
    grant(&ns, "erin").await;
    corral_tests::pool_vms(&client_as("admin").await, &ns, "dl", 1)
        .await
        .unwrap();
    let home = scratch("home");
    let bin = home.join("opt/idp/bin");
    plugin_in(&bin, "corral-idp-plugin");
    // Only the login shell's startup file puts the plugin's folder on PATH.
    std::fs::write(
        home.join(".profile"),
        format!("export PATH=\"{}:$PATH\"\n", bin.display()),
    )
    .unwrap();
    let config = home.join("kubeconfig");
    let log = home.join("runs.log");
    kubeconfig(
        &config,
        "erin",
        "corral-idp-plugin",
        &plugin_args("erin", 600, &log, &home.join("no-such-file")),
    );
    // Started the way a desktop entry starts it: a minimal environment.
    let run = |shell: &str| {
        Command::new(corral_tests::cli_binary())
            .env_clear()
            .env("HOME", &*home)
            .env("PATH", "/usr/bin:/bin")
            .env("SHELL", shell)
            .args(["--kubeconfig"])
            .arg(&config)
            .args(["pool", "list", "-n", &ns])
            .output()
            .unwrap()
    };
    let out = run("/bin/bash");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(&format!("dl (ns/{ns}")), "{stdout}");
    assert_eq!(runs(&log), 1, "the plugin ran once");

    // Not anywhere: one clear sentence naming the command, where it looked, and the
    // kubeconfig's installHint — no "os error 2".
    std::fs::remove_file(home.join(".profile")).unwrap();
    let out = run("/bin/sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("gets its credentials by running `corral-idp-plugin`, which was not found")
            && stderr.contains("not on PATH (/usr/bin:/bin)")
            && stderr.contains("Install it with: corral-idp install"),
        "{stderr}"
    );
    assert!(!stderr.contains("os error"), "{stderr}");
}

#[tokio::test]
async fn relative_commands_and_kubeconfig_lists_behave_like_kubectl() {
    let ns = namespace("rel").await;
    grant(&ns, "fred").await;
    corral_tests::pool_vms(&client_as("admin").await, &ns, "rl", 1)
        .await
        .unwrap();
    let dir = scratch("rel");
    plugin_in(&dir.join("bin"), "plugin");
    let config = dir.join("config");
    kubeconfig(
        &config,
        "fred",
        &format!("bin{}plugin", std::path::MAIN_SEPARATOR),
        &plugin_args("fred", 600, &dir.join("runs.log"), &dir.join("never")),
    );
    // A list with an empty entry and a missing file: both skipped; the first file that sets a
    // name wins (a second file naming the same context with another user changes nothing).
    let shadow = dir.join("shadow");
    std::fs::write(
        &shadow,
        "apiVersion: v1\nkind: Config\ncontexts:\n- name: fred\n  context: {cluster: nowhere, user: nobody}\n",
    )
    .unwrap();
    let list = std::env::join_paths([PathBuf::new(), dir.join("missing"), config.clone(), shadow])
        .unwrap();
    let out = Command::new(corral_tests::cli_binary())
        .current_dir(std::env::temp_dir())
        .env("KUBECONFIG", &list)
        .args(["pool", "list", "-n", &ns])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("rl (ns/{ns}")), "{stdout}");
    // Every file of the list missing: said plainly.
    let out = Command::new(corral_tests::cli_binary())
        .env("KUBECONFIG", dir.join("missing"))
        .args(["pool", "list", "-n", &ns])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("none of the files KUBECONFIG names exists"),
        "{stderr}"
    );
}

#[tokio::test]
#[ignore = "lives five minutes: scripts/test-rust.sh (make test) runs it beside the other tests"]
async fn two_minute_certificates_are_renewed_for_five_minutes_and_then_assign() {
    let ns = namespace("renew").await;
    grant(&ns, "dora").await;
    corral_tests::pool_vms(&client_as("admin").await, &ns, "rn", 1)
        .await
        .unwrap();
    let dir = scratch("renew");
    let (conn, log, _fail) = connect_with_plugin(&dir, "dora", 120).await;
    let mut state = conn.credentials.clone();
    let actor = Actor::connect(conn.client.clone()).await.unwrap();
    assert_eq!(actor.username(), "dora");
    let feed = PoolFeed::spawn(
        conn.client.clone(),
        Scope::Namespace(ns.clone()),
        *actor.clock(),
    );
    let mut snapshots = feed.subscribe();

    // Five minutes with 2-minute certificates: the live view never fails, and the plugin is
    // run again before each expiry.
    let began = Instant::now();
    let mut failures = 0;
    while began.elapsed() < Duration::from_secs(300) {
        let wait = Duration::from_secs(300).saturating_sub(began.elapsed());
        tokio::select! {
            changed = snapshots.changed() => {
                changed.unwrap();
                if matches!(snapshots.borrow().status, FeedStatus::Failing { .. }) {
                    failures += 1;
                }
            }
            changed = state.changed() => {
                changed.unwrap();
                let now = state.borrow().clone();
                assert!(matches!(now, CredentialState::Renewing { .. }), "{now:?}");
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
    assert_eq!(failures, 0, "the live view stayed live");
    assert!(
        matches!(snapshots.borrow().status, FeedStatus::Live),
        "{:?}",
        snapshots.borrow().status
    );
    let renewals = runs(&log);
    assert!(
        (3..=5).contains(&renewals),
        "the plugin ran {renewals} times in 5 minutes of 2-minute certificates"
    );
    match *state.borrow() {
        CredentialState::Renewing { expires_at, .. } => {
            assert!(expires_at > jiff::Timestamp::now(), "never expired");
        }
        ref other => panic!("{other:?}"),
    }
    // Actions still work with renewed credentials.
    let claimed = assign(&actor, &ns, "rn", "dora", &ClaimOptions::default())
        .await
        .unwrap();
    assert_eq!(claimed.member, "rn-1");
    drop(feed);
}

#[tokio::test]
async fn a_failing_plugin_is_said_once_and_retried_with_a_bounded_backoff() {
    // 20-second certificates: renewed 4 s before expiry (a fifth of their life).
    let dir = scratch("failing");
    let (conn, log, fail) = connect_with_plugin(&dir, "erin", 20).await;
    let mut state = conn.credentials.clone();

    // The plugin starts failing: the state says so once, with its stderr, and the plugin is
    // retried with a bounded backoff, not in a loop.
    std::fs::write(&fail, "").unwrap();
    let before = runs(&log);
    let deadline = Instant::now() + Duration::from_secs(60);
    let message = loop {
        assert!(Instant::now() < deadline, "no failure reported");
        tokio::time::timeout(Duration::from_secs(60), state.changed())
            .await
            .unwrap()
            .unwrap();
        if let CredentialState::Failing { message, .. } = state.borrow().clone() {
            break message;
        }
    };
    assert!(
        message.contains("the refresh token was revoked (refresh_token=[redacted])")
            && !message.contains("RevokedT0ken"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    let tries = runs(&log) - before;
    assert!(
        (1..=4).contains(&tries),
        "{tries} tries in about 20 s after the first failure (backoff 5 s, 10 s, 20 s …)"
    );
}

/// Connects as `user` through a kubeconfig in `dir` whose exec plugin issues client
/// certificates of `seconds`; the connection (its first plugin run done), the plugin's run log
/// and the file whose presence makes it fail.
async fn connect_with_plugin(
    dir: &Path,
    user: &str,
    seconds: u64,
) -> (vdi_core::cluster::Connection, PathBuf, PathBuf) {
    let plugin = plugin_in(dir, "plugin");
    let (log, fail) = (dir.join("runs.log"), dir.join("fail"));
    let config = dir.join("kubeconfig");
    kubeconfig(
        &config,
        user,
        &plugin.display().to_string(),
        &plugin_args(user, seconds, &log, &fail),
    );
    let conn = KubeconfigSource {
        path: Some(config),
        ..KubeconfigSource::default()
    }
    .connect(None)
    .await
    .unwrap();
    assert!(matches!(
        *conn.credentials.borrow(),
        CredentialState::Renewing { runs: 1, .. }
    ));
    (conn, log, fail)
}
