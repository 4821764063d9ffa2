//! Helpers for tests that run against a real sandbox: one instance per test binary, started on
//! first use in a thread of its own (so it outlives each test's runtime), and a namespace per
//! test so that tests in one binary never see each other's objects.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};
use sandbox::{Options, Sandbox};
use serde_json::json;

/// Where a test binary's sandbox is.
#[derive(Clone, Debug)]
pub struct Shared {
    /// Its kubeconfig: contexts `admin`, `alice`, `bob`, `carol`.
    pub kubeconfig: PathBuf,
    /// Its API server URL.
    pub server: String,
}

static SANDBOX: OnceLock<Shared> = OnceLock::new();

/// The test binary's sandbox, started (with the demo data) on first use. Its processes die with
/// the test process; its directory is swept by the next run.
pub fn sandbox() -> &'static Shared {
    SANDBOX.get_or_init(|| start(true).unwrap_or_else(|e| panic!("sandbox did not start: {e:#}")))
}

/// Starts a sandbox in a dedicated thread and keeps it there until the process ends.
pub fn start(emulate: bool) -> Result<Shared> {
    let (tx, rx) = std::sync::mpsc::channel();
    let label = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".into())
        .replace('-', "_");
    std::thread::Builder::new()
        .name("sandbox".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            runtime.block_on(async move {
                let started = async {
                    let mut options = Options::ephemeral(&label)?;
                    options.emulate = emulate;
                    Sandbox::start(options).await
                };
                match started.await {
                    Ok(sb) => {
                        let _ = tx.send(Ok(Shared {
                            kubeconfig: sb.kubeconfig.clone(),
                            server: sb.server.clone(),
                        }));
                        std::future::pending::<()>().await;
                        drop(sb);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(anyhow!("{e:#}")));
                    }
                }
            });
        })?;
    rx.recv()?
}

/// A client of the shared sandbox acting as `user` (`admin`, `alice`, `bob` or `carol`).
pub async fn client_as(user: &str) -> Client {
    sandbox::kubeconfig::client(&sandbox().kubeconfig, user)
        .await
        .unwrap_or_else(|e| panic!("client for {user}: {e:#}"))
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Creates a namespace of the test's own, where alice, bob and carol have the same roles as in
/// `corral-vms`.
pub async fn namespace(prefix: &str) -> String {
    let admin = client_as("admin").await;
    let name = format!(
        "{prefix}-{}-{}",
        std::process::id() % 10_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let api: Api<Namespace> = Api::all(admin.clone());
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
    sandbox::bootstrap::grant_users(&admin, &name)
        .await
        .unwrap();
    name
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
