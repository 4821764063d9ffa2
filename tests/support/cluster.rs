//! The test binary's sandbox (started once, in a thread of its own), clients and [`Actor`]s
//! as its users, RBAC grants, a namespace per test, and polling until something holds.
//!
//! A binary that runs the broker (`sandbox_with(|o| o.broker = true)`, the same in every test
//! of it) reaches its replicas through [`brokers`] (or [`Shared::brokers`]): a handle shared
//! with the sandbox's thread, so a test may list them, kill one (`kill(i, Signal::Kill)`) and
//! start it again (`start(i)`, spawned on the sandbox's runtime so that it outlives the test).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::client::ClientBuilder;
use sandbox::{Options, Sandbox};
use serde_json::Value;
use serde_json::json;
use vdi_core::cluster::{Impersonation, KubeconfigSource};
use vdi_core::identity::Actor;

/// Where a test binary's sandbox is.
#[derive(Clone, Debug)]
pub struct Shared {
    /// Its kubeconfig: contexts `admin`, `alice`, `bob`, `carol`.
    pub kubeconfig: PathBuf,
    /// Its API server URL.
    pub server: String,
    /// The private key that logs in to guest port 22 of every running VMI (the sandbox's sshd,
    /// reached through the `portforward` subresource); see [`sandbox::Sandbox::ssh_client_key`].
    pub ssh_client_key: PathBuf,
    /// The user that key logs in as (the user running the tests); see
    /// [`sandbox::Sandbox::ssh_user`].
    pub ssh_user: String,
    /// The sshd's host public key, to pin it; see [`sandbox::Sandbox::ssh_host_public_key`].
    pub ssh_host_public_key: PathBuf,
    /// The broker's replicas when the binary runs one ([`sandbox::Options::broker`]); see
    /// [`sandbox::broker::Brokers`].
    pub brokers: Option<Arc<sandbox::broker::Brokers>>,
    /// The Prometheus scraping them, when the binary runs one ([`sandbox::Options::prometheus`]):
    /// its base URL.
    pub prometheus: Option<String>,
    /// The kube-apiserver's process id ([`sandbox::Sandbox::apiserver_pid`]).
    pub apiserver_pid: Option<u32>,
}

static SANDBOX: OnceLock<Shared> = OnceLock::new();

/// The test binary's sandbox, started (with the demo data and the guard) on first use. Its
/// processes die with the test process; its directory is swept by the next run.
pub fn sandbox() -> &'static Shared {
    sandbox_with(|_| {})
}

/// Like [`sandbox`], with `configure` applied to the options first; only the first call of a
/// test binary starts it, so a binary must always pass the same `configure`.
pub fn sandbox_with(configure: impl FnOnce(&mut Options)) -> &'static Shared {
    SANDBOX
        .get_or_init(|| start(configure).unwrap_or_else(|e| panic!("sandbox did not start: {e:#}")))
}

/// Starts a sandbox in a dedicated thread and keeps it there until the process ends.
pub fn start(configure: impl FnOnce(&mut Options)) -> Result<Shared> {
    let (tx, rx) = std::sync::mpsc::channel();
    let label_of_binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".into())
        .replace('-', "_");
    let options = Options::ephemeral(&label_of_binary).map(|mut options| {
        configure(&mut options);
        options
    });
    std::thread::Builder::new()
        .name("sandbox".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                // Named, so benchmarks can tell the emulator's CPU time from their own
                // (measure::cpu_time).
                .thread_name("sandbox-worker")
                .enable_all()
                .build()
                .expect("tokio runtime");
            runtime.block_on(async move {
                let started = async { Sandbox::start(options?).await };
                match started.await {
                    Ok(sb) => {
                        let _ = tx.send(Ok(Shared {
                            kubeconfig: sb.kubeconfig.clone(),
                            server: sb.server.clone(),
                            ssh_client_key: sb.ssh_client_key.clone(),
                            ssh_user: sb.ssh_user.clone(),
                            ssh_host_public_key: sb.ssh_host_public_key.clone(),
                            brokers: sb.brokers(),
                            prometheus: sb.prometheus_url().map(str::to_owned),
                            apiserver_pid: sb.apiserver_pid(),
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

/// The broker's replicas of the test binary's sandbox: list, kill and start them.
///
/// Panics when the binary runs no broker (it must start its sandbox with
/// `sandbox_with(|o| o.broker = true)`).
pub fn brokers() -> Arc<sandbox::broker::Brokers> {
    sandbox().brokers.clone().expect(
        "this test binary's sandbox runs no broker: start it with sandbox_with(|o| o.broker = true)",
    )
}

/// The roles `alice`, `bob` and `carol` have in the test binary's sandbox: the claimant role
/// with a broker, the client-side flow's without.
pub fn user_roles() -> sandbox::bootstrap::UserRoles {
    if sandbox().brokers.is_some() {
        sandbox::bootstrap::UserRoles::Broker
    } else {
        sandbox::bootstrap::UserRoles::ClientSide
    }
}

/// Gives `user` the RBAC `rules` in `ns`, as admin: a Role and a RoleBinding both named
/// `<user>-extra`; returns once the API server grants the first verb of the first rule (its
/// RBAC authorizer reads Roles through a cache, so a grant holds a moment after it is written:
/// a request straight after it was refused under CI's load).
pub async fn grant_role(ns: &str, user: &str, rules: Value) {
    let admin = client_as("admin").await;
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": { "name": format!("{user}-extra"), "namespace": ns }, "rules": rules,
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": format!("{user}-extra"), "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{user}-extra") },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let rule = &rules[0];
    let review: k8s_openapi::api::authorization::v1::SubjectAccessReview =
        serde_json::from_value(json!({ "spec": { "user": user, "resourceAttributes": {
            "namespace": ns, "verb": rule["verbs"][0], "group": rule["apiGroups"][0],
            "resource": rule["resources"][0] } } }))
        .unwrap();
    let reviews =
        Api::<k8s_openapi::api::authorization::v1::SubjectAccessReview>::all(admin.clone());
    eventually(
        &format!("RBAC to grant {user} its role in {ns}"),
        Duration::from_secs(10),
        || {
            let (reviews, review) = (reviews.clone(), review.clone());
            async move {
                let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
                answer.status.is_some_and(|s| s.allowed).then_some(())
            }
        },
    )
    .await;
}

/// A client of `user` that records the path of every request it sends.
pub async fn recording_client(user: &str, paths: Arc<std::sync::Mutex<Vec<String>>>) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&sandbox().kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions {
        context: Some(user.into()),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    let layer = tower::ServiceBuilder::new().map_request(
        move |request: http::Request<kube::client::Body>| {
            paths.lock().unwrap().push(request.uri().path().to_owned());
            request
        },
    );
    ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build()
}

/// A client of the shared sandbox acting as `user` (`admin`, `alice`, `bob` or `carol`).
pub async fn client_as(user: &str) -> Client {
    sandbox::kubeconfig::client(&sandbox().kubeconfig, user)
        .await
        .unwrap_or_else(|e| panic!("client for {user}: {e:#}"))
}

/// An [`Actor`] for `user` of the shared sandbox: its client, and who the cluster says it is.
pub async fn actor_as(user: &str) -> Actor {
    Actor::connect(client_as(user).await)
        .await
        .unwrap_or_else(|e| panic!("actor for {user}: {e}"))
}

/// An [`Actor`] for `user` with `groups` that the sandbox's `admin` impersonates (the
/// cluster's own impersonation, like `kubectl --as`); `system:masters` among the groups gives
/// it RBAC rights everywhere without making it a Corral VDI administrator.
pub async fn actor_impersonating(user: &str, groups: &[&str]) -> Actor {
    let source = KubeconfigSource {
        path: Some(sandbox().kubeconfig.clone()),
        impersonate: Some(Impersonation {
            user: user.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }),
    };
    let conn = source.connect(Some("admin")).await.unwrap();
    Actor::connect(conn.client)
        .await
        .unwrap_or_else(|e| panic!("actor impersonating {user}: {e}"))
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Creates a namespace of the test's own, where alice, bob and carol have the same roles as in
/// `corral-vms` ([`user_roles`]).
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
    sandbox::bootstrap::grant_users(&admin, &name, user_roles())
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
