//! The broker in a sandbox with [`crate::Options::broker`], run as its Deployment's pods would
//! run on a cluster: its manifests installed with `vdi_core::broker::install` (namespace
//! `corral-vdi-system`, the ServiceAccount `corral-vdi-broker`, its read-only ClusterRole, the
//! ClusterRole it is bound to per namespace; `bootstrap::grant_users` lets it act in each
//! sandbox namespace as `broker allow` does), then [`REPLICAS`] `corral-vdi-broker` processes, each
//! under a token of that ServiceAccount of its own (the TokenRequest API, valid
//! [`TOKEN_SECONDS`]), read from a kubeconfig of its own (`<dir>/broker/replica-<i>.kubeconfig`,
//! mode 0600, the token in no log), as `--identity <name>-broker-<i>`, logging to
//! `<dir>/logs/broker-<i>.log`, serving `/metrics` and its probes on 127.0.0.1 at ports of its
//! own (listed in `<dir>/`[`ENDPOINTS_FILE`], which `sandbox status` prints). They die with the sandbox, as its other processes do.
//!
//! Tests reach them through [`Brokers`] ([`crate::Sandbox::brokers`]): which run and their pids
//! ([`Brokers::replicas`]), a signal to one ([`Brokers::kill`]: kill -9 of the leader for a
//! failover), and a restart of one with its token ([`Brokers::start`]). Nothing restarts a
//! replica by itself (a Deployment would): a test decides.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::process::Child;
use vdi_core::broker::{BrokerState, BrokerStatus};
use vdi_core::names::{BROKER_NAME, BROKER_NAMESPACE};

use crate::process::{command, find_program, free_port, log_tail};

/// How many replicas a sandbox runs (the Deployment's `replicas`).
pub const REPLICAS: usize = 2;
/// The replicas' `--lease-seconds` unless [`crate::Options::broker_lease_seconds`] says
/// otherwise: the leader-election Lease's duration (the broker's own default).
pub const DEFAULT_LEASE_SECONDS: u32 = 15;
/// Lifetime of each replica's ServiceAccount token (`expirationSeconds`): a day, longer than a
/// sandbox lives in a test or a demo.
pub const TOKEN_SECONDS: i64 = 24 * 3600;
/// The broker's program name.
pub const PROGRAM: &str = "corral-vdi-broker";
/// Environment variable naming the broker's program, which wins over the search of
/// [`program`].
pub const PROGRAM_ENV: &str = "CORRAL_BROKER_BIN";
/// The replicas' `--reclaim-margin-seconds` unless
/// [`crate::Options::broker_reclaim_margin_seconds`] says otherwise: the broker's own default.
pub const DEFAULT_RECLAIM_MARGIN_SECONDS: u32 = 30;
/// The replicas' `--stall-seconds`: how long one stays ready without an answer from the API
/// server (shorter than the broker's default 30, so that a test sees it turn unready soon).
pub const STALL_SECONDS: u32 = 10;
/// How long [`Brokers::wait_ready`] waits at most for a leader and every replica's heartbeat.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The broker's program: [`PROGRAM_ENV`], else `corral-vdi-broker` next to the running
/// executable (`target/<profile>/sandbox`), else in its parent folder (a test binary runs from
/// `target/<profile>/deps/`), else on `PATH`.
///
/// Errors: none found (build it with `cargo build --workspace`), or [`PROGRAM_ENV`] names no
/// file.
pub fn program() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(PROGRAM_ENV) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{PROGRAM_ENV}={} is not a file: point it at a built {PROGRAM}, or unset it",
                path.display()
            );
        }
        return Ok(path);
    }
    let exe = std::env::current_exe().context("the running executable's path")?;
    let beside = exe.parent().map(Path::to_path_buf);
    let above = beside
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    [beside, above]
        .into_iter()
        .flatten()
        .map(|dir| dir.join(PROGRAM))
        .find(|candidate| candidate.is_file())
        .or_else(|| find_program(PROGRAM))
        .with_context(|| {
            format!(
                "{PROGRAM} not found next to {}, in its parent folder or on PATH: build it with \
                 `cargo build --workspace` (or set {PROGRAM_ENV})",
                exe.display()
            )
        })
}

/// A replica as a test sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// Its `--identity`: `<sandbox name>-broker-<i>`, the holder it writes into the leader Lease.
    pub identity: String,
    /// Its process id while it runs; `None` once it exited or was killed (and reaped).
    pub pid: Option<u32>,
    /// Its `/metrics`: `http://127.0.0.1:<port>/metrics`.
    pub metrics: String,
    /// Its probes' base: `http://127.0.0.1:<port>` (`/healthz`, `/readyz`).
    pub health: String,
}

/// The file beside a sandbox's logs that lists each replica's endpoints, one
/// `<identity> <metrics URL> <health URL>` line per replica: what `sandbox status` prints.
pub const ENDPOINTS_FILE: &str = "broker/endpoints";

/// A replica's endpoints from its ports.
fn urls(ports: (u16, u16)) -> (String, String) {
    (
        format!("http://127.0.0.1:{}/metrics", ports.0),
        format!("http://127.0.0.1:{}", ports.1),
    )
}

/// A signal [`Brokers::kill`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGKILL: the replica dies at once, its leadership not given up (a crashed pod).
    Kill,
    /// SIGTERM: the replica is asked to stop.
    Term,
    /// SIGSTOP: the replica freezes (a wedged pod), its connections open.
    Stop,
    /// SIGCONT: a frozen replica carries on.
    Cont,
}

impl Signal {
    fn number(self) -> i32 {
        match self {
            Signal::Kill => libc::SIGKILL,
            Signal::Term => libc::SIGTERM,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        }
    }
}

struct Replica {
    identity: String,
    kubeconfig: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// Its `--metrics-port` and `--health-port` on 127.0.0.1, kept across restarts.
    ports: (u16, u16),
}

/// The broker's replicas of one sandbox; shared (`Arc`) between the sandbox and its tests.
pub struct Brokers {
    program: PathBuf,
    lease_seconds: u32,
    reclaim_margin_seconds: u32,
    /// The sandbox's runtime: replicas are spawned on it, so that they die with its threads and
    /// not with a test's (see [`crate::process::die_with_parent`]).
    runtime: tokio::runtime::Handle,
    replicas: Mutex<Vec<Replica>>,
}

impl std::fmt::Debug for Brokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Brokers")
            .field("program", &self.program)
            .field("lease_seconds", &self.lease_seconds)
            .field("reclaim_margin_seconds", &self.reclaim_margin_seconds)
            .field("replicas", &self.replicas())
            .finish()
    }
}

/// What [`Brokers::launch`] needs of the sandbox.
pub(crate) struct Launch<'a> {
    /// The admin client (installs the manifests, requests the tokens).
    pub(crate) admin: &'a Client,
    /// The sandbox's name (the replicas' identities, the kubeconfigs' cluster name).
    pub(crate) name: &'a str,
    /// The sandbox's directory.
    pub(crate) dir: &'a Path,
    /// The API server's URL.
    pub(crate) server: &'a str,
    /// The cluster CA (PEM).
    pub(crate) ca_pem: &'a str,
    /// `--lease-seconds` of every replica.
    pub(crate) lease_seconds: u32,
    /// `--reclaim-margin-seconds` of every replica.
    pub(crate) reclaim_margin_seconds: u32,
}

impl Brokers {
    /// Installs the broker's manifests and starts [`REPLICAS`] replicas, each with a token and a
    /// kubeconfig of its own. Does not wait for them: see [`Brokers::wait_ready`].
    ///
    /// Errors: the program is missing ([`program`]), the manifests were refused, the
    /// TokenRequest failed, a kubeconfig could not be written, a process did not start.
    pub(crate) async fn launch(launch: Launch<'_>) -> Result<Arc<Self>> {
        let program = program()?;
        vdi_core::broker::install(launch.admin, None)
            .await
            .context("install the Corral VDI broker's manifests")?;
        let folder = launch.dir.join("broker");
        std::fs::create_dir_all(&folder).with_context(|| format!("create {}", folder.display()))?;
        let mut replicas = Vec::with_capacity(REPLICAS);
        for i in 0..REPLICAS {
            let identity = format!("{}-broker-{i}", launch.name);
            let kubeconfig = folder.join(format!("replica-{i}.kubeconfig"));
            let token = token(launch.admin).await?;
            crate::kubeconfig::write_token(
                &kubeconfig,
                launch.name,
                launch.server,
                launch.ca_pem,
                &identity,
                &token,
                BROKER_NAMESPACE,
            )?;
            replicas.push(Replica {
                identity,
                kubeconfig,
                log: launch.dir.join("logs").join(format!("broker-{i}.log")),
                child: None,
                ports: (free_port()?, free_port()?),
            });
        }
        let listed: String = replicas
            .iter()
            .map(|r| {
                let (metrics, health) = urls(r.ports);
                format!("{} {metrics} {health}\n", r.identity)
            })
            .collect();
        let endpoints = launch.dir.join(ENDPOINTS_FILE);
        std::fs::write(&endpoints, listed)
            .with_context(|| format!("write {}", endpoints.display()))?;
        let brokers = Arc::new(Brokers {
            program,
            lease_seconds: launch.lease_seconds,
            reclaim_margin_seconds: launch.reclaim_margin_seconds,
            runtime: tokio::runtime::Handle::current(),
            replicas: Mutex::new(replicas),
        });
        for i in 0..REPLICAS {
            brokers.start(i).await?;
        }
        Ok(brokers)
    }

    /// Each replica: its identity, and its pid while it runs.
    pub fn replicas(&self) -> Vec<ReplicaInfo> {
        let mut replicas = self.lock();
        replicas
            .iter_mut()
            .map(|r| {
                let (metrics, health) = urls(r.ports);
                ReplicaInfo {
                    identity: r.identity.clone(),
                    pid: r.child.as_mut().and_then(running_pid),
                    metrics,
                    health,
                }
            })
            .collect()
    }

    /// Sends `signal` to replica `i` (by its pid, no shell).
    ///
    /// Errors: no replica `i`, or it does not run (exited, killed: [`Brokers::start`] it).
    #[allow(unsafe_code)]
    pub fn kill(&self, i: usize, signal: Signal) -> Result<()> {
        let mut replicas = self.lock();
        let replica = replicas
            .get_mut(i)
            .with_context(|| format!("no broker replica {i} (there are {REPLICAS})"))?;
        let pid = replica
            .child
            .as_mut()
            .and_then(running_pid)
            .with_context(|| {
                format!(
                    "broker replica {} does not run: start it first (Sandbox::start_replica)",
                    replica.identity
                )
            })?;
        let pid = i32::try_from(pid).context("a pid beyond i32")?;
        // SAFETY: kill(2) on our own child, which has not been reaped (running_pid just saw it
        // run, and only this lock's holder waits for it), so the pid is still its own.
        if unsafe { libc::kill(pid, signal.number()) } != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| {
                format!("send {signal:?} to broker replica {}", replica.identity)
            });
        }
        Ok(())
    }

    /// Sends `signal` to every replica ([`Brokers::kill`] each, all of them tried).
    ///
    /// Errors: the first replica's that could not be signalled (it does not run).
    pub fn signal_all(&self, signal: Signal) -> Result<()> {
        let results: Vec<Result<()>> = (0..self.replicas().len())
            .map(|i| self.kill(i, signal))
            .collect();
        results.into_iter().collect()
    }

    /// Starts replica `i` again (after [`Brokers::kill`] or an exit), with its own token and
    /// kubeconfig; returns its pid.
    ///
    /// Errors: no replica `i`, it still runs, or the process did not start.
    pub async fn start(&self, i: usize) -> Result<u32> {
        let (identity, kubeconfig, log, ports) = {
            let mut replicas = self.lock();
            let replica = replicas
                .get_mut(i)
                .with_context(|| format!("no broker replica {i} (there are {REPLICAS})"))?;
            if let Some(pid) = replica.child.as_mut().and_then(running_pid) {
                bail!(
                    "broker replica {} still runs (pid {pid}): kill it first",
                    replica.identity
                );
            }
            (
                replica.identity.clone(),
                replica.kubeconfig.clone(),
                replica.log.clone(),
                replica.ports,
            )
        };
        let (program, lease_seconds, margin) = (
            self.program.clone(),
            self.lease_seconds,
            self.reclaim_margin_seconds,
        );
        // Spawned on the sandbox's runtime: the replica dies with the thread that spawned it.
        let child = self
            .runtime
            .spawn(async move {
                let mut cmd = command(&program, &log)?;
                cmd.args(["--identity", &identity])
                    .args(["--lease-seconds", &lease_seconds.to_string()])
                    .args(["--reclaim-margin-seconds", &margin.to_string()])
                    .args(["--bind-address", "127.0.0.1"])
                    .args(["--stall-seconds", &STALL_SECONDS.to_string()])
                    .args(["--metrics-port", &ports.0.to_string()])
                    .args(["--health-port", &ports.1.to_string()])
                    .env("KUBECONFIG", &kubeconfig);
                cmd.spawn()
                    .with_context(|| format!("start {} as {identity}", program.display()))
            })
            .await
            .context("the sandbox's runtime is gone")??;
        let pid = child.id().context("the replica exited at once")?;
        self.lock()[i].child = Some(child);
        Ok(pid)
    }

    /// Waits (up to [`READY_TIMEOUT`]) until `vdi_core::broker::status` reports the broker
    /// running, with a leader, and a heartbeat of every replica; returns that status.
    ///
    /// Errors: a replica exited (its log's tail), or the timeout passed (the last status and the
    /// logs' tails).
    pub async fn wait_ready(&self, admin: &Client) -> Result<BrokerStatus> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let identities: Vec<String> = self.replicas().into_iter().map(|r| r.identity).collect();
        loop {
            self.all_running()?;
            let last = match vdi_core::broker::status(admin).await {
                Ok(status)
                    if status.state == BrokerState::Running
                        && status.leader.is_some()
                        && identities
                            .iter()
                            .all(|id| status.replicas.iter().any(|r| &r.identity == id)) =>
                {
                    return Ok(status);
                }
                Ok(status) => status.summary,
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                bail!(
                    "the broker's replicas did not elect a leader and report in within {} s \
                     (last status: {last}):\n{}",
                    READY_TIMEOUT.as_secs(),
                    self.log_tails()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Errors naming the first replica that does not run, with its log's tail.
    fn all_running(&self) -> Result<()> {
        let mut replicas = self.lock();
        for replica in replicas.iter_mut() {
            let status = match replica.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => None,
            };
            if let Some(status) = status {
                bail!(
                    "broker replica {} exited ({status}):\n{}",
                    replica.identity,
                    log_tail(&replica.log)
                );
            }
        }
        Ok(())
    }

    fn log_tails(&self) -> String {
        self.lock()
            .iter()
            .map(|r| {
                format!(
                    "{} ({}):\n{}",
                    r.identity,
                    r.log.display(),
                    log_tail(&r.log)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Kills every replica (the sandbox stops).
    pub(crate) fn kill_all(&self) {
        for replica in self.lock().iter_mut() {
            if let Some(child) = replica.child.as_mut() {
                let _ = child.start_kill();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Replica>> {
        self.replicas.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The child's pid while it runs (`try_wait` reaps it once it exited).
fn running_pid(child: &mut Child) -> Option<u32> {
    match child.try_wait() {
        Ok(None) => child.id(),
        _ => None,
    }
}

/// A token of the broker's ServiceAccount from the TokenRequest API (`serviceaccounts/token`),
/// valid [`TOKEN_SECONDS`], for the API server's default audience.
async fn token(admin: &Client) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), BROKER_NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = accounts
        .create_token_request(BROKER_NAME, &PostParams::default(), &request)
        .await
        .with_context(|| {
            format!(
                "request a token for the ServiceAccount {BROKER_NAMESPACE}/{BROKER_NAME} \
                 (serviceaccounts/token)"
            )
        })?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .with_context(|| {
            format!("the TokenRequest for {BROKER_NAMESPACE}/{BROKER_NAME} returned no token")
        })
}

/// The broker's state in a few lines, for `sandbox up` and `sandbox status`: the summary (which
/// names the leader), each replica with its last heartbeat (and whether it leads), the last
/// reconcile.
pub fn describe(status: &BrokerStatus) -> String {
    let mut lines = vec![format!("broker: {}", status.summary)];
    for replica in &status.replicas {
        let role = if replica.leader { ", leading" } else { "" };
        lines.push(format!(
            "  replica {}: last seen {}{role}",
            replica.identity, replica.last_seen
        ));
    }
    match status.last_reconcile {
        Some(at) => lines.push(format!("  last reconcile: {at}")),
        None => lines.push("  last reconcile: none yet".to_owned()),
    }
    lines.join("\n")
}
