//! Helpers for tests that run against a real sandbox: one instance per test binary, started on
//! first use in a thread of its own (so it outlives each test's runtime), and a namespace per
//! test so that tests in one binary never see each other's objects.

pub mod gui;
pub mod measure;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::client::ClientBuilder;
use sandbox::{Options, Sandbox};
use serde_json::Value;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
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

/// Creates a golden VM `name` in `ns` as admin (spec [`sandbox::bootstrap::golden_spec`] with
/// run strategy `strategy`, label `app: desktop`), after `tweak` has had its way with the
/// object, and waits until the emulator reports what pool create checks: its power state
/// (`Stopped`, or `Running` for `Always`) and its `volumeSnapshotStatuses`.
pub async fn golden_vm(
    ns: &str,
    name: &str,
    strategy: &str,
    tweak: impl FnOnce(&mut serde_json::Value),
) -> vdi_core::resources::VirtualMachine {
    use vdi_core::resources::VirtualMachine;
    let admin = client_as("admin").await;
    let mut object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns, "labels": { "app": "desktop" } },
        "spec": sandbox::bootstrap::golden_spec(strategy, name),
    });
    tweak(&mut object);
    let vm: VirtualMachine = serde_json::from_value(object).expect("a VirtualMachine");
    let api: Api<VirtualMachine> = Api::namespaced(admin, ns);
    api.create(&PostParams::default(), &vm)
        .await
        .unwrap_or_else(|e| panic!("create golden VM {name}: {e}"));
    let power = if strategy == "Always" {
        "Running"
    } else {
        "Stopped"
    };
    eventually(
        &format!("golden VM {name} {power} with snapshot statuses"),
        Duration::from_secs(20),
        || async {
            let vm = api.get(name).await.ok()?;
            let reported = vm
                .status
                .as_ref()
                .is_some_and(|s| s.other.contains_key("volumeSnapshotStatuses"));
            (vm.printable_status() == power && reported).then_some(vm)
        },
    )
    .await
}

/// Adds `entry` to the comma-separated knob `key` of the emulator's ConfigMap (shared by the
/// tests of a binary: read-modify-write with the resourceVersion, retried on conflict). Use
/// per-target entries (names unique to the test), since tests run in parallel.
pub async fn add_knob(key: &str, entry: &str) {
    let admin = client_as("admin").await;
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(admin, "kubevirt");
    let name = sandbox::emulator::knobs::CONFIG_MAP;
    loop {
        let result = match api.get_opt(name).await.unwrap() {
            None => {
                let cm = k8s_openapi::api::core::v1::ConfigMap {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.into()),
                        ..Default::default()
                    },
                    data: Some(std::collections::BTreeMap::from([(
                        key.to_owned(),
                        entry.to_owned(),
                    )])),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await.map(|_| ())
            }
            Some(mut cm) => {
                let data = cm.data.get_or_insert_with(std::collections::BTreeMap::new);
                let value = data.entry(key.to_owned()).or_default();
                if !value.is_empty() {
                    value.push(',');
                }
                value.push_str(entry);
                api.replace(name, &PostParams::default(), &cm)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("set knob {key}: {e}"),
        }
    }
}

/// Creates the members `<pool>-1 ..= <pool>-<size>` in `ns` as `client`: stopped (`Halted`)
/// VirtualMachines labelled with the pool, as a Phase 1 pool or a finished `pool create` has
/// them.
///
/// Errors: the API server's refusal of any create.
pub async fn pool_vms(client: &Client, ns: &str, pool: &str, size: usize) -> kube::Result<()> {
    use vdi_core::labels::POOL_LABEL;
    use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    for i in 1..=size {
        let mut vm = VirtualMachine::new(
            &format!("{pool}-{i}"),
            VirtualMachineSpec {
                run_strategy: Some("Halted".into()),
                ..Default::default()
            },
        );
        vm.metadata.labels = Some([(POOL_LABEL.to_owned(), pool.to_owned())].into());
        api.create(&PostParams::default(), &vm).await?;
    }
    Ok(())
}

/// Creates the pools numbered `pools` (`pool0000`, `pool0001`, …) with `per_pool` stopped
/// members each (`pool0000-1 ..= pool0000-<per_pool>`) in `ns` as `client`, 48 creates at a
/// time: the scale the list and UI benchmarks and the 10,000-VM GUI test use. Returns how many
/// VMs it created.
///
/// Errors: the first refused create (the others still run).
pub async fn many_pools(
    client: &Client,
    ns: &str,
    pools: std::ops::Range<usize>,
    per_pool: usize,
) -> Result<usize> {
    use futures::StreamExt;
    use vdi_core::labels::POOL_LABEL;
    use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let results: Vec<kube::Result<()>> =
        futures::stream::iter((pools.start * per_pool..pools.end * per_pool).map(|i| {
            let api = api.clone();
            async move {
                let pool = format!("pool{:04}", i / per_pool);
                let mut vm = VirtualMachine::new(
                    &format!("{pool}-{}", i % per_pool + 1),
                    VirtualMachineSpec {
                        run_strategy: Some("Halted".into()),
                        ..Default::default()
                    },
                );
                vm.metadata.labels = Some([(POOL_LABEL.to_owned(), pool)].into());
                api.create(&PostParams::default(), &vm).await.map(|_| ())
            }
        }))
        .buffer_unordered(48)
        .collect()
        .await;
    let created = results.iter().filter(|r| r.is_ok()).count();
    match results.into_iter().find_map(|r| r.err()) {
        Some(e) => Err(anyhow!(
            "{} of {} VM creates in {ns} failed, first: {e}",
            pools.len() * per_pool - created,
            pools.len() * per_pool
        )),
        None => Ok(created),
    }
}

// --- Connect: running desktops, stream clients, an RFB client ---

/// The VirtualMachines of `ns`, untyped.
pub fn vms(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(
        client,
        "kubevirt.io",
        "v1",
        "VirtualMachine",
        "virtualmachines",
        ns,
    )
}

/// The Leases of `ns`, untyped: a Lease with a time beyond what the typed one decodes (the
/// hostile data tests plant such) is still read and written.
pub fn leases(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(client, "coordination.k8s.io", "v1", "Lease", "leases", ns)
}

/// The VirtualMachineClones (clone.kubevirt.io v1beta1) of `ns`, untyped.
pub fn clones(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(
        client,
        "clone.kubevirt.io",
        "v1beta1",
        "VirtualMachineClone",
        "virtualmachineclones",
        ns,
    )
}

/// The VirtualMachineInstances of `ns`, untyped.
pub fn vmis(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(
        client,
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
        ns,
    )
}

/// A running desktop `name` in `ns` (the golden spec, started), after `tweak`; waits for
/// Running.
pub async fn running_vm(ns: &str, name: &str, tweak: impl FnOnce(&mut Value)) {
    let admin = client_as("admin").await;
    let mut object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns, "annotations": {} },
        "spec": sandbox::bootstrap::golden_spec("Always", name),
    });
    tweak(&mut object);
    let vm: DynamicObject = serde_json::from_value(object).unwrap();
    vms(&admin, ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();
    wait_power(ns, name, "Running").await;
}

/// Waits (20 s at most) until VM `name` in `ns` has printableStatus `want`.
pub async fn wait_power(ns: &str, name: &str, want: &str) {
    let api = vms(&client_as("admin").await, ns);
    eventually(
        &format!("{name} {want}"),
        Duration::from_secs(20),
        || async {
            let vm = api.get(name).await.ok()?;
            (vm.data.pointer("/status/printableStatus") == Some(&json!(want))).then_some(())
        },
    )
    .await;
}

/// Sets (or, with `None`, removes) annotation `key` of VM `name` in `ns`, as admin.
pub async fn annotate(ns: &str, name: &str, key: &str, value: Option<&str>) {
    vms(&client_as("admin").await, ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { key: value } } })),
        )
        .await
        .unwrap();
}

/// A client for streams acting as `user` (no automatic retries), counting the requests to
/// KubeVirt's subresources whose path contains `/vnc`, `/portforward` or `/usbredir`.
pub async fn counting_stream_client(user: &str, counter: Arc<AtomicUsize>) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&sandbox().kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions {
        context: Some(user.into()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    config.default_retry = false;
    let layer = tower::ServiceBuilder::new().map_request(
        move |request: http::Request<kube::client::Body>| {
            let path = request.uri().path();
            if path.contains("/vnc") || path.contains("/portforward") || path.contains("/usbredir")
            {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            request
        },
    );
    ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build()
}

/// A client for streams acting as `user` (no automatic retries).
pub async fn streams_as(user: &str) -> Client {
    counting_stream_client(user, Arc::default()).await
}

/// The RFB handshake as a client (RFB 3.8, security None, shared); returns the framebuffer
/// size from ServerInit.
pub async fn rfb_handshake(tcp: &mut TcpStream) -> (u16, u16) {
    let mut version = [0u8; 12];
    tcp.read_exact(&mut version).await.unwrap();
    assert_eq!(&version, b"RFB 003.008\n");
    tcp.write_all(b"RFB 003.008\n").await.unwrap();
    let count = tcp.read_u8().await.unwrap();
    let mut types = vec![0u8; usize::from(count)];
    tcp.read_exact(&mut types).await.unwrap();
    assert!(types.contains(&1), "security type None: {types:?}");
    tcp.write_all(&[1]).await.unwrap();
    assert_eq!(tcp.read_u32().await.unwrap(), 0, "SecurityResult OK");
    tcp.write_all(&[1]).await.unwrap();
    let mut init = [0u8; 24];
    tcp.read_exact(&mut init).await.unwrap();
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]);
    let mut name = vec![0u8; name_len as usize];
    tcp.read_exact(&mut name).await.unwrap();
    (
        u16::from_be_bytes([init[0], init[1]]),
        u16::from_be_bytes([init[2], init[3]]),
    )
}

/// Asks for the whole screen and reads the FramebufferUpdate header; returns its rectangle
/// count.
pub async fn rfb_update(tcp: &mut TcpStream, width: u16, height: u16) -> u16 {
    let mut request = vec![3u8, 0, 0, 0, 0, 0];
    request.extend_from_slice(&width.to_be_bytes());
    request.extend_from_slice(&height.to_be_bytes());
    tcp.write_all(&request).await.unwrap();
    let kind = tcp.read_u8().await.unwrap();
    assert_eq!(kind, 0, "a FramebufferUpdate");
    tcp.read_u8().await.unwrap();
    tcp.read_u16().await.unwrap()
}

// --- USB ---

/// `target/<profile>/`, where cargo put the test binary's parent directory and the workspace's
/// binaries.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// A named sandbox run by the `sandbox` program, as `make sandbox-up` runs one, with its state
/// in a folder of its own: a cluster a test may stop, restart or freeze without touching the
/// shared one. Dropping it stops it and removes its folder.
pub struct NamedSandbox {
    name: String,
    state: PathBuf,
}

impl NamedSandbox {
    /// One named `name` (unique among the tests running), not started yet.
    pub fn new(name: &str) -> Self {
        let state = std::env::temp_dir().join(format!(
            "corral-named-{name}-{}",
            jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::create_dir_all(&state).expect("a state folder");
        NamedSandbox {
            name: name.to_owned(),
            state,
        }
    }

    fn command(&self, verb: &str) -> std::process::Output {
        std::process::Command::new(target_dir().join("sandbox"))
            .args([verb, "--name", &self.name])
            .env("XDG_STATE_HOME", &self.state)
            .output()
            .unwrap_or_else(|e| panic!("run sandbox {verb}: {e}"))
    }

    /// Starts it; returns its kubeconfig's path.
    pub fn up(&self) -> PathBuf {
        let out = self.command("up");
        assert!(
            out.status.success(),
            "sandbox up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().expect("a kubeconfig path").trim())
    }

    /// Stops it (its folder and kubeconfig go with it).
    pub fn down(&self) {
        let out = self.command("down");
        assert!(
            out.status.success(),
            "sandbox down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Sends `signal` ("-STOP", "-CONT") to its kube-apiserver: stopped, the server keeps its
    /// connections open and answers nothing, as a wedged server looks from outside.
    pub fn signal_apiserver(&self, signal: &str) {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &format!("kube-apiserver.*{}", self.state.display())])
            .output()
            .expect("pgrep");
        let pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        assert!(!pids.is_empty(), "no kube-apiserver of {} found", self.name);
        for pid in pids {
            let status = std::process::Command::new("kill")
                .args([signal, &pid])
                .status()
                .expect("kill");
            assert!(status.success(), "kill {signal} {pid}");
        }
    }
}

impl Drop for NamedSandbox {
    fn drop(&mut self) {
        let _ = self.command("down");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The built `corral-vdi` CLI (`make test` builds the workspace, with every feature, first).
pub fn cli_binary() -> PathBuf {
    let path = target_dir().join("corral-vdi");
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --all-features)",
        path.display()
    );
    path
}

/// A directory holding only the stand-in `usbredirect` (no USB bus here), to put first on
/// PATH; see stand-ins/usbredirect.rs.
pub fn stand_in_usbredirect_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("corral-stand-in-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("usbredirect");
    if !target.exists() {
        std::fs::copy(target_dir().join("usbredirect"), &target)
            .expect("the stand-in usbredirect (cargo build -p corral-tests)");
    }
    dir
}

/// The recorded USB devices of tests/fixtures/usb-devices.json (for `CORRAL_USB_FIXTURE`).
pub fn usb_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/usb-devices.json")
}

/// A stopped pool member `<pool>-<i>` made from the golden spec (so it has a graphics device,
/// a network interface and, unless `passthrough` is false, USB client passthrough).
pub async fn desktop_member(ns: &str, pool: &str, name: &str, passthrough: bool) {
    let admin = client_as("admin").await;
    let mut spec = sandbox::bootstrap::golden_spec("Halted", name);
    if !passthrough
        && let Some(devices) = spec
            .pointer_mut("/template/spec/domain/devices")
            .and_then(Value::as_object_mut)
    {
        devices.remove("clientPassthrough");
    }
    let object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns,
                      "labels": { vdi_core::labels::POOL_LABEL: pool } },
        "spec": spec,
    });
    let vm: DynamicObject = serde_json::from_value(object).unwrap();
    vms(&admin, ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();
    wait_power(ns, name, "Stopped").await;
}

// --- Devices: nodes with extended resources, permits, launcher pods (capacity tests) ---

/// Adds node `node` to the shared sandbox (or makes an existing one exactly so), as admin:
/// its devices in `status.capacity` / `status.allocatable`, labels, taints and cordon (see
/// [`sandbox::devices::DeviceNode`]). Nodes are cluster-wide: give each test names of its own.
pub async fn add_node(node: sandbox::devices::DeviceNode) {
    sandbox::devices::apply_node(&client_as("admin").await, &node)
        .await
        .unwrap_or_else(|e| panic!("add node {}: {e:#}", node.name));
}

/// Sets `resource` on `node` to `present` devices of which `allocatable` may be handed out;
/// `None` removes it from the node's status.
pub async fn set_node_devices(node: &str, resource: &str, counts: Option<(u32, u32)>) {
    sandbox::devices::set_devices(&client_as("admin").await, node, resource, counts)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Cordons (`true`) or uncordons `node`.
pub async fn cordon_node(node: &str, cordoned: bool) {
    sandbox::devices::cordon(&client_as("admin").await, node, cordoned)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Replaces the taints of `node`.
pub async fn taint_node(node: &str, taints: &[sandbox::devices::Taint]) {
    sandbox::devices::set_taints(&client_as("admin").await, node, taints)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Sets (or, with `None`, removes) label `key` of `node`.
pub async fn label_node(node: &str, key: &str, value: Option<&str>) {
    sandbox::devices::label_node(&client_as("admin").await, node, key, value)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Permits `resource` in the KubeVirt CR as `kind` (additive; `external` sets
/// `externalResourceProvider: true`).
pub async fn permit_device(kind: sandbox::devices::PermitKind, resource: &str, external: bool) {
    let selector = match kind {
        sandbox::devices::PermitKind::Pci => "10DE:1EB8",
        sandbox::devices::PermitKind::Mediated => "GRID T4-2Q",
        sandbox::devices::PermitKind::Usb => "46f4",
    };
    sandbox::devices::permit(
        &client_as("admin").await,
        kind,
        resource,
        selector,
        external,
    )
    .await
    .unwrap_or_else(|e| panic!("permit {resource}: {e:#}"));
}

/// Lets `user` read what capacity needs cluster-wide (ClusterRole
/// [`sandbox::bootstrap::CAPACITY_READER`]).
pub async fn grant_capacity_reader(user: &str) {
    sandbox::bootstrap::grant_capacity_reader(&client_as("admin").await, user)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Creates a virt-launcher pod `virt-launcher-<vm>-<suffix>` in `ns` bound to `node` in
/// `phase`, whose `compute` container holds `devices` (as KubeVirt's are labelled:
/// `kubevirt.io=virt-launcher`, `kubevirt.io/created-by=<uid>`, and with `migration_target`
/// `kubevirt.io/migrationJobUID`), as a test finds one on a cluster; the emulator never
/// deletes it. Returns its name.
pub async fn launcher_pod(
    ns: &str,
    vm: &str,
    suffix: &str,
    node: &str,
    phase: &str,
    devices: &[(&str, u32)],
    migration_target: bool,
) -> String {
    use k8s_openapi::api::core::v1::Pod;
    let admin = client_as("admin").await;
    let name = format!("virt-launcher-{vm}-{suffix}");
    let limits: serde_json::Map<String, Value> = devices
        .iter()
        .map(|(r, n)| ((*r).to_owned(), json!(n.to_string())))
        .collect();
    let mut labels = json!({
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": format!("uid-of-{vm}"),
        "vm.kubevirt.io/name": vm,
    });
    if migration_target {
        labels["kubevirt.io/migrationJobUID"] = json!(format!("migration-of-{vm}"));
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": { "nodeName": node, "restartPolicy": "Never", "containers": [{
            "name": "compute", "image": "sandbox.invalid/virt-launcher:test",
            "resources": { "limits": limits, "requests": limits } }] },
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin, ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create launcher pod {name}: {e}"));
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "phase": phase } })),
    )
    .await
    .unwrap_or_else(|e| panic!("set the phase of {name}: {e}"));
    name
}

// --- Another Unix user ---

/// The Unix user that tests connect as, to check that a local listener serves only its owner.
pub const OTHER_USER: &str = "corral-test-other";

/// [`OTHER_USER`]'s uid, made on first use (`useradd --system`, idempotently: an existing one is
/// kept). Needs root, as CI has: panics, saying so, when this test runs as anyone else.
pub fn other_user() -> u32 {
    static UID: OnceLock<u32> = OnceLock::new();
    *UID.get_or_init(|| {
        let me = std::process::Command::new("id")
            .arg("-u")
            .output()
            .expect("id -u");
        assert!(
            String::from_utf8_lossy(&me.stdout).trim() == "0",
            "this test makes a second Unix user ({OTHER_USER}) and connects as it, which needs \
             root: run it as root (CI does), e.g. sudo -E cargo test --workspace --all-features \
             --test local_owner"
        );
        let uid = || {
            std::process::Command::new("id")
                .args(["-u", OTHER_USER])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        };
        if let Some(uid) = uid() {
            return uid;
        }
        let made = std::process::Command::new("useradd")
            .args([
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                OTHER_USER,
            ])
            .output()
            .expect("useradd (Debian: passwd)");
        // 9: made meanwhile by another test binary.
        assert!(
            made.status.success() || made.status.code() == Some(9),
            "useradd {OTHER_USER}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        uid().unwrap_or_else(|| panic!("{OTHER_USER} has no uid after useradd"))
    })
}

/// What [`probe_as_other`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Bytes received.
    pub bytes: u64,
    /// How the connection ended: `closed` (by the listener), `reset`, `timeout` (still open
    /// after the wait), `refused` (nothing listens).
    pub ended: String,
    /// The first bytes received (up to 64, lossy UTF-8).
    pub head: String,
}

/// The probe stand-in (stand-ins/probe.rs), copied where [`OTHER_USER`] may run it (a build
/// under root's home is not).
fn probe_binary() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("corral-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("corral-test-probe");
        std::fs::copy(target_dir().join("corral-test-probe"), &target)
            .expect("the probe stand-in (cargo build -p corral-tests)");
        for path in [&dir, &target] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        target
    })
    .clone()
}

/// Connects to `addr` as [`OTHER_USER`] (the probe stand-in run through `setpriv`, with that
/// user's uid and group and no other groups), sends `send`, and reads for up to `wait`.
pub async fn probe_as_other(addr: std::net::SocketAddr, send: &[u8], wait: Duration) -> Probe {
    other_user();
    let hex: String = send.iter().map(|b| format!("{b:02x}")).collect();
    let out = tokio::process::Command::new("setpriv")
        .args([
            &format!("--reuid={OTHER_USER}"),
            &format!("--regid={OTHER_USER}"),
            "--clear-groups",
            "--",
        ])
        .arg(probe_binary())
        .args([addr.to_string(), hex, wait.as_millis().to_string()])
        .output()
        .await
        .expect("setpriv (util-linux)");
    assert!(
        out.status.success(),
        "the probe as {OTHER_USER}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the probe's answer: {e}: {:?}", out.stdout));
    Probe {
        bytes: seen["bytes"].as_u64().unwrap_or_default(),
        ended: seen["ended"].as_str().unwrap_or_default().to_owned(),
        head: seen["head"].as_str().unwrap_or_default().to_owned(),
    }
}

/// Asserts that [`OTHER_USER`] gets nothing from `addr` (`what`, for the message): no byte,
/// and the connection closed by the listener well within `wait`, not left open.
pub async fn assert_other_gets_nothing(what: &str, addr: std::net::SocketAddr, send: &[u8]) {
    let wait = Duration::from_secs(5);
    let began = std::time::Instant::now();
    let seen = probe_as_other(addr, send, wait).await;
    assert_eq!(seen.bytes, 0, "{what}: {OTHER_USER} got {seen:?}");
    assert!(
        seen.ended == "closed" || seen.ended == "reset",
        "{what}: closed at once for {OTHER_USER}, not {seen:?}"
    );
    assert!(
        began.elapsed() < wait,
        "{what}: closed at once, not after {:?}",
        began.elapsed()
    );
}

/// An RDP X.224 Connection Request in its TPKT (no cookie; RDP negotiation asking for TLS or
/// CredSSP), as FreeRDP sends first.
pub const RDP_CONNECTION_REQUEST: [u8; 19] = [
    0x03, 0x00, 0x00, 0x13, 0x0e, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x08, 0x00, 0x03,
    0x00, 0x00, 0x00,
];

/// Sends [`RDP_CONNECTION_REQUEST`] on `tcp` and asserts that an X.224 Connection Confirm
/// answers it within 10 s.
pub async fn rdp_connection_confirm(tcp: &mut TcpStream) {
    tcp.write_all(&RDP_CONNECTION_REQUEST).await.unwrap();
    let mut answer = [0u8; 11];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut answer))
        .await
        .expect("an RDP answer within 10 s")
        .unwrap();
    assert_eq!(answer[0], 0x03, "TPKT");
    assert_eq!(answer[5] & 0xf0, 0xd0, "X.224 Connection Confirm");
}

/// The address and the secret (no slash) of a console's `ws://127.0.0.1:PORT/SECRET` URL.
pub fn console_address(url: &str) -> (std::net::SocketAddr, String) {
    url.strip_prefix("ws://")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(addr, secret)| Some((addr.parse().ok()?, secret.to_owned())))
        .unwrap_or_else(|| panic!("ws://ADDRESS/SECRET, not {url}"))
}

/// Opens the console's websocket at `url` as the app's noVNC does and asserts that the VM's
/// RFB banner comes back in a binary frame, each step within 10 s.
pub async fn assert_console_speaks_rfb(url: &str) {
    use futures::StreamExt;
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("the console's handshake within 10 s")
    .unwrap();
    let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a frame within 10 s")
        .expect("a frame, not the end")
        .unwrap();
    assert!(
        matches!(&frame, tokio_tungstenite::tungstenite::Message::Binary(data)
            if data.starts_with(b"RFB 003.008")),
        "the RFB banner, not {frame:?}"
    );
}

/// Asserts that a forward at `addr` to the guest's echo service (a port of
/// `sandbox.corral.dev/guest-ports` other than 22 and 3389) sends back what it is sent.
pub async fn assert_echoes(addr: std::net::SocketAddr) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"echo me").await.unwrap();
    let mut back = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut back))
        .await
        .expect("the echo within 10 s")
        .unwrap();
    assert_eq!(&back, b"echo me");
}

// --- Hostile data: Leases written by someone else (tests/hostile_data.rs, the GUI test) ---

/// A renewTime jiff can hold, but not plus a Lease's duration.
pub const END_OF_CALENDAR: &str = "9999-12-30T22:00:00.000000Z";
/// A renewTime the API server stores (Go reads years up to 9999) and jiff cannot hold.
pub const BEYOND_CALENDAR: &str = "9999-12-31T23:59:59.000000Z";

/// A MicroTime of now, as the API server stores one.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Creates (as admin, whom the guard lets write anything) a Lease `name` in `ns`, untyped (its
/// times may be beyond what the typed Lease decodes).
pub async fn plant_lease(admin: &Client, ns: &str, name: &str, labels: Value, spec: Value) {
    let lease: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": name, "labels": labels }, "spec": spec,
    }))
    .unwrap();
    leases(admin, ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

/// Replaces `name`'s spec fields with `fields` (as admin), keeping its resourceVersion.
pub async fn set_lease_spec(admin: &Client, ns: &str, name: &str, fields: Value) {
    let api = leases(admin, ns);
    let mut lease = api.get(name).await.unwrap();
    for (key, value) in fields.as_object().unwrap() {
        lease.data["spec"][key] = value.clone();
    }
    api.replace(name, &PostParams::default(), &lease)
        .await
        .unwrap();
}

/// A namespace with pool `dev` (3 desktops), bob holding one of them, its Lease renewed at the
/// end of the calendar; and pool `legacy` (2 members) beside a Lease `zz-poison` labelled for it
/// with a time beyond the calendar. Returns the namespace and bob's member.
pub async fn poisoned(prefix: &str) -> (String, String) {
    let admin = client_as("admin").await;
    let ns = namespace(prefix).await;
    for i in 1..=3 {
        desktop_member(&ns, "dev", &format!("dev-{i}"), true).await;
    }
    pool_vms(&admin, &ns, "legacy", 2).await.unwrap();
    let bob = actor_as("bob").await;
    let bobs = vdi_core::claim::assign(&bob, &ns, "dev", "bob", &Default::default())
        .await
        .unwrap()
        .member;
    set_lease_spec(
        &admin,
        &ns,
        &vdi_core::labels::lease_name(&bobs),
        json!({ "renewTime": END_OF_CALENDAR }),
    )
    .await;
    plant_lease(
        &admin,
        &ns,
        "zz-poison",
        json!({ vdi_core::labels::POOL_LABEL: "legacy" }),
        json!({ "holderIdentity": "bob", "renewTime": BEYOND_CALENDAR,
                "leaseDurationSeconds": 3600 }),
    )
    .await;
    (ns, bobs)
}
