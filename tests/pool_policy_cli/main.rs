//! The client's side of managed pools against the sandbox's real API server and broker:
//! `pool adopt`, `pool set`, `pool resize` (vdi_core::managed::ops and ::change) with each
//! refusal shown to change nothing, `pool create` making the DesktopPool with its policy flags
//! and `pool delete` removing it, `pool list` printing the policy, and `audit`
//! (vdi_core::audit::list and the CLI's table, JSON and CSV) over Events written as the broker
//! writes them and by the client's own force release.
//!
//! "Nothing moved" is judged by the DesktopPool's `metadata.generation` and spec: the
//! API server bumps the generation on every spec write, while the broker's status writes
//! (which change the resourceVersion) leave it alone. Where no DesktopPool may exist, its
//! absence is checked.
//!
//! One test binary (one sandbox, with the broker), a module per part; each test has a namespace
//! of its own.

mod audit;
mod cli;
mod ops;

use std::process::{Command, Output};
use std::time::Duration;

use corral_tests::{client_as, eventually, golden_vm};
use kube::api::Api;
use vdi_core::policy::DesktopPool;

/// The sandbox of this binary, with the broker (so the DesktopPool CRD is installed and
/// `pool create` finds a broker).
fn with_broker() -> &'static corral_tests::Shared {
    corral_tests::sandbox_with(|o| o.broker = true)
}

/// A namespace of the test's own with a stopped golden VM `golden` in it.
async fn namespace_with_golden(prefix: &str) -> String {
    with_broker();
    let ns = corral_tests::namespace(prefix).await;
    golden_vm(&ns, "golden", "Halted", |_| {}).await;
    ns
}

/// A pool name one character too long for a DesktopPool (60: a managed pool's name leaves room
/// for its 500th member), though its VMs' names would fit.
fn too_long_for_a_desktop_pool() -> String {
    format!("l{}", "o".repeat(vdi_core::pool::MAX_MANAGED_NAME))
}

/// The DesktopPool `pool` in `ns`, as admin reads it.
async fn desktop_pool(ns: &str, pool: &str) -> Option<DesktopPool> {
    Api::<DesktopPool>::namespaced(client_as("admin").await, ns)
        .get_opt(pool)
        .await
        .unwrap()
}

/// What a refusal must leave as it was: the DesktopPool's generation and spec (`None`: none).
async fn fingerprint(ns: &str, pool: &str) -> Option<(Option<i64>, serde_json::Value)> {
    desktop_pool(ns, pool).await.map(|p| {
        (
            p.metadata.generation,
            serde_json::to_value(&p.spec).unwrap(),
        )
    })
}

/// Runs the CLI as admin on the sandbox with `args`.
fn cli(args: &[&str]) -> Output {
    let shared = with_broker();
    Command::new(corral_tests::cli_binary())
        .arg("--kubeconfig")
        .arg(&shared.kubeconfig)
        .args(["--context", "admin"])
        .args(args)
        .output()
        .unwrap()
}

/// Its stdout, asserting it succeeded.
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Its stderr, asserting it failed.
fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits until the DesktopPool `pool` is gone from `ns`.
async fn gone(ns: &str, pool: &str) {
    eventually(
        &format!("DesktopPool {pool} in {ns} gone"),
        Duration::from_secs(10),
        || async { desktop_pool(ns, pool).await.is_none().then_some(()) },
    )
    .await;
}
