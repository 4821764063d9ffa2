//! A local Kubernetes for development, demos and tests: a real `kube-apiserver` and `etcd` on
//! loopback, client-certificate users with RBAC, the KubeVirt CRDs, and an emulation of the
//! KubeVirt controllers and virt-api subresources that Corral VDI depends on.
//!
//! What is emulated, and how faithfully, is listed in [`emulator`]. The emulator never claims
//! to be KubeVirt: there is no guest OS, no GPU and no USB device behind it. What answers a
//! running VMI's streams are real servers on 127.0.0.1: an Xvnc display per VMI (started on
//! first use), an RDP server shadowing it, and one sshd per sandbox ([`ssh`]) whose client key
//! and login are [`Sandbox::ssh_client_key`] and [`Sandbox::ssh_user`].
//!
//! With [`Options::broker`] (what `sandbox up` runs; test binaries opt in), Corral VDI's broker
//! runs as on a cluster: its manifests installed, two `corral-vdi-broker` replicas under their
//! ServiceAccount's tokens, and the users get the shipped claimant role only (see [`broker`] and
//! [`bootstrap`]).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let sandbox = sandbox::Sandbox::start(sandbox::Options::ephemeral("doc")?).await?;
//! let admin = sandbox.client_as("admin").await?;
//! # drop(admin); Ok(()) }
//! ```

pub mod binaries;
pub mod bootstrap;
pub mod broker;
pub mod devices;
pub mod emulator;
pub mod kubeconfig;
pub mod pki;
mod process;
pub mod prometheus;
pub mod ssh;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Client;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Users of every sandbox: (name, groups), the groups as the API server's authenticator reports
/// them (the client certificates' Organization entries), so that entitlements are tried with
/// real group membership. `admin` is in `system:masters` (cluster-admin) and
/// `corral-vdi:admins` (a Corral VDI administrator for the guard); `alice` and `bob` are
/// desktop users in `corral-vms`, in the group [`ENGINEERING`]; `carol`, in [`CONTRACTORS`],
/// may manage Leases there but, without a broker, not change VMs (their roles: [`bootstrap`]).
pub const USERS: &[(&str, &[&str])] = &[
    ("admin", &["system:masters", vdi_core::names::ADMIN_GROUP]),
    ("alice", &[ENGINEERING]),
    ("bob", &[ENGINEERING]),
    ("carol", &[CONTRACTORS]),
];

/// The group of `alice` and `bob`.
pub const ENGINEERING: &str = "engineering";
/// The group of `carol`.
pub const CONTRACTORS: &str = "contractors";

/// Namespace with the seeded golden VM and legacy pool.
pub const DEMO_NAMESPACE: &str = "corral-vms";

/// How to start an instance.
#[derive(Clone, Debug)]
pub struct Options {
    /// Instance name, used in paths and the kubeconfig's cluster name.
    pub name: String,
    /// Directory for its PKI, etcd data, logs and kubeconfig; emptied first.
    pub dir: PathBuf,
    /// Whether to create the demo data (golden VM, legacy pool).
    pub seed: bool,
    /// Whether to run the KubeVirt emulation (controllers and virt-api). Off, VMs are plain
    /// objects without status: for benchmarks of listing alone.
    pub emulate: bool,
    /// Whether to install Corral VDI's server-side guard (`guard/guard.yaml`), as a cluster
    /// that follows the README has it.
    pub guard: bool,
    /// Whether to install and run the broker ([`broker`]: its manifests, two replicas under the
    /// ServiceAccount's tokens); the users then get the shipped claimant role only
    /// ([`bootstrap::UserRoles::Broker`]). Needs the built `corral-vdi-broker`
    /// ([`broker::program`]).
    pub broker: bool,
    /// The broker replicas' `--lease-seconds` (leader election; [`broker::DEFAULT_LEASE_SECONDS`]
    /// unless a failover test wants it shorter).
    pub broker_lease_seconds: u32,
    /// The broker replicas' `--reclaim-margin-seconds`: how long past a claim Lease's end they
    /// wait before reclaiming it ([`broker::DEFAULT_RECLAIM_MARGIN_SECONDS`] unless a test of
    /// reclaim wants it shorter).
    pub broker_reclaim_margin_seconds: u32,
    /// Whether to run a Prometheus that scrapes the broker's replicas ([`prometheus`]; with
    /// [`Options::broker`] only).
    pub prometheus: bool,
}

impl Options {
    /// A named instance under the state directory (`sandbox up --name N`).
    pub fn named(name: &str) -> Self {
        Options {
            name: name.to_owned(),
            dir: state_root().join(name),
            seed: true,
            emulate: true,
            guard: true,
            broker: true,
            broker_lease_seconds: broker::DEFAULT_LEASE_SECONDS,
            broker_reclaim_margin_seconds: broker::DEFAULT_RECLAIM_MARGIN_SECONDS,
            prometheus: true,
        }
    }

    /// A throw-away instance in a fresh temporary directory (for tests), without a broker (the
    /// client-side flow; a test binary opts in with `broker = true`).
    pub fn ephemeral(label: &str) -> Result<Self> {
        sweep_dead_ephemerals();
        let dir = std::env::temp_dir().join(format!(
            "corral-sandbox-{label}-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_microsecond()
        ));
        Ok(Options {
            name: label.to_owned(),
            dir,
            seed: true,
            emulate: true,
            guard: true,
            broker: false,
            broker_lease_seconds: broker::DEFAULT_LEASE_SECONDS,
            broker_reclaim_margin_seconds: broker::DEFAULT_RECLAIM_MARGIN_SECONDS,
            prometheus: false,
        })
    }
}

/// Where named instances live: `$XDG_STATE_HOME/corral-vdi/sandbox`, else
/// `~/.local/state/corral-vdi/sandbox`.
pub fn state_root() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("corral-vdi")
        .join("sandbox")
}

/// Removes temporary instance directories whose owning process is gone.
fn sweep_dead_ephemerals() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("corral-sandbox-") else {
            continue;
        };
        let pid = rest
            .split('-')
            .rev()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// A running instance. Dropping it kills its processes; [`Sandbox::stop`] also removes its
/// directory.
pub struct Sandbox {
    /// Instance name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// The kubeconfig with one context per user (`admin`, `alice`, `bob`, `carol`).
    pub kubeconfig: PathBuf,
    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub server: String,
    /// The private key (OpenSSH format, ed25519, mode 0600) that logs in to guest port 22 of
    /// every running VMI, i.e. the sandbox's sshd reached through the `portforward`
    /// subresource: `<dir>/ssh/id_ed25519` (its public key next to it, `.pub`).
    pub ssh_client_key: PathBuf,
    /// The user name that key logs in as: the user running the sandbox (`root` when root).
    pub ssh_user: String,
    /// The sshd's host public key (`ssh-ed25519 …`), to pin it in a `known_hosts` file.
    pub ssh_host_public_key: PathBuf,
    etcd: Child,
    apiserver: Child,
    /// Only its ValidatingAdmissionPolicy status controller; killed on drop.
    controller_manager: Child,
    sshd: ssh::SshServer,
    emulator: JoinHandle<()>,
    guests: Option<Arc<emulator::guests::Guests>>,
    brokers: Option<Arc<broker::Brokers>>,
    prometheus: Option<prometheus::Prometheus>,
}

use process::free_port;

fn spawn(program: &Path, args: &[String], log: &Path) -> Result<Child> {
    let log_file = fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true);
    process::die_with_parent(&mut cmd);
    cmd.spawn()
        .with_context(|| format!("start {}", program.display()))
}

use process::log_tail;

impl Sandbox {
    /// Starts etcd, kube-apiserver, kube-controller-manager (its ValidatingAdmissionPolicy status
    /// controller only) and the emulator, installs the CRDs, RBAC and (if asked) the
    /// demo data, and returns once the API server serves and the emulated virt-api is
    /// reachable through it. Builds the server binaries first if the cache lacks them.
    ///
    /// Also starts the sandbox's sshd (guest port 22 of every running VMI; see [`ssh`]), and with
    /// [`Options::broker`] the broker's replicas, returning once one leads and every one reports
    /// in ([`broker::Brokers::wait_ready`]).
    ///
    /// Errors: a process failed to start (the error carries its log's tail), or it was not
    /// ready within 90 seconds; `sshd` is missing (install `openssh-server`); the broker's
    /// program is missing (build it with `cargo build --workspace`) or it did not elect a leader.
    pub async fn start(options: Options) -> Result<Self> {
        let binaries = tokio::task::spawn_blocking(binaries::ensure).await??;
        let dir = options.dir.clone();
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("clear {}", dir.display()))?;
        }
        let logs = dir.join("logs");
        fs::create_dir_all(&logs)?;
        let (pki, users) = pki::Pki::generate(&dir, USERS)?;

        let etcd_log = logs.join("etcd.log");
        // A data directory per try: one a failed try began is bootstrapped for its ports.
        let etcd_args = |try_no: u32, client: u16, peer: u16| -> Vec<String> {
            let (client_url, peer_url) = (
                format!("http://127.0.0.1:{client}"),
                format!("http://127.0.0.1:{peer}"),
            );
            vec![
                "--name=sandbox".into(),
                format!(
                    "--data-dir={}",
                    dir.join(format!("etcd-{try_no}")).display()
                ),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=sandbox={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ]
        };

        let p = |f: &str| pki.path(f).display().to_string();
        let api_args = |api_port: u16, etcd_port: u16| -> Vec<String> {
            vec![
                format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", dir.join("apiserver-certs").display()),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--client-ca-file={}", p("ca.crt")),
                "--authorization-mode=RBAC".into(),
                format!("--service-account-key-file={}", p("sa.pub")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--disable-admission-plugins=ServiceAccount".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--requestheader-client-ca-file={}", p("front-proxy-ca.crt")),
                format!("--requestheader-allowed-names={}", pki::FRONT_PROXY_CLIENT),
                "--requestheader-username-headers=X-Remote-User".into(),
                "--requestheader-group-headers=X-Remote-Group".into(),
                "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
                format!("--proxy-client-cert-file={}", p("front-proxy-client.crt")),
                format!("--proxy-client-key-file={}", p("front-proxy-client.key")),
                "--enable-priority-and-fairness=false".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ]
        };
        let api_log = logs.join("kube-apiserver.log");
        let kubeconfig = dir.join("kubeconfig");
        // Written under another name and renamed into place at the end: whatever follows the
        // kubeconfig's path (the console reconnecting to a restarted sandbox) finds the cluster
        // as a user will, its CRDs, guard and seed installed, not half set up.
        let starting = dir.join("kubeconfig.starting");
        // The ports are free when picked, but another process (a connection's local port, another
        // sandbox) may take one before etcd or kube-apiserver binds it: that server then exits
        // saying so, and both start again on other ports (three tries). Those of a failed try are
        // killed when their handles drop.
        let mut tries = 0;
        let (etcd, apiserver, server, admin) = 'start: loop {
            tries += 1;
            let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
            let mut etcd = spawn(
                &binaries.etcd,
                &etcd_args(tries, etcd_port, peer_port),
                &etcd_log,
            )?;
            let mut apiserver = spawn(
                &binaries.kube_apiserver,
                &api_args(api_port, etcd_port),
                &api_log,
            )?;
            let server = format!("https://127.0.0.1:{api_port}");
            kubeconfig::write(&starting, &options.name, &server, &pki.ca_pem, &users)?;
            let admin = kubeconfig::client(&starting, "admin").await?;
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                let exits = [
                    ("etcd", etcd.try_wait()?, &etcd_log),
                    ("kube-apiserver", apiserver.try_wait()?, &api_log),
                ];
                for (name, status, log) in exits {
                    let Some(status) = status else { continue };
                    let tail = log_tail(log);
                    if tries < 3 && tail.contains("address already in use") {
                        tracing::warn!(
                            tries,
                            "{name}'s port was taken before it bound it: both start again"
                        );
                        continue 'start;
                    }
                    bail!("{name} exited ({status}):\n{tail}");
                }
                if ready(&admin).await {
                    break 'start (etcd, apiserver, server, admin);
                }
                if Instant::now() > deadline {
                    bail!(
                        "kube-apiserver was not ready within 90 s:\n{}",
                        log_tail(&api_log)
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        };

        // Before anything installs an admission policy: installs wait for its status
        // (`observedGeneration`), which this controller of kube-controller-manager's writes. The
        // sandbox runs no other controller of it.
        let controller_manager = spawn(
            &binaries.kube_controller_manager,
            &[
                format!("--kubeconfig={}", starting.display()),
                "--controllers=validatingadmissionpolicy-status-controller".into(),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--v=1".into(),
            ],
            &logs.join("kube-controller-manager.log"),
        )?;
        let roles = if options.broker {
            bootstrap::UserRoles::Broker
        } else {
            bootstrap::UserRoles::ClientSide
        };
        bootstrap::install(&admin, roles).await?;
        if options.guard {
            vdi_core::guard::install(&admin)
                .await
                .context("install the Corral VDI guard")?;
        }
        let brokers = if options.broker {
            Some(
                broker::Brokers::launch(broker::Launch {
                    admin: &admin,
                    name: &options.name,
                    dir: &dir,
                    server: &server,
                    ca_pem: &pki.ca_pem,
                    lease_seconds: options.broker_lease_seconds,
                    reclaim_margin_seconds: options.broker_reclaim_margin_seconds,
                })
                .await?,
            )
        } else {
            None
        };
        let prometheus = match &brokers {
            Some(brokers) if options.prometheus => {
                Some(prometheus::Prometheus::start(&dir, &brokers.replicas()).await?)
            }
            _ => None,
        };
        let sshd = ssh::SshServer::start(&dir.join("ssh"), &options.name).await?;
        let (emulator, guests) = if options.emulate {
            // KubeVirt's parts act as KubeVirt's service accounts, whom the guard trusts as it
            // would on a cluster; the admin impersonates them.
            let as_kubevirt = |user| {
                kubeconfig::client_impersonating(
                    &starting,
                    "admin",
                    user,
                    emulator::KUBEVIRT_GROUPS,
                )
            };
            let emulator = emulator::start(
                as_kubevirt(emulator::VIRT_API_USER).await?,
                as_kubevirt(emulator::VIRT_CONTROLLER_USER).await?,
                &pki,
                dir.join("guests"),
                Some(sshd.port),
            )
            .await?;
            bootstrap::register_virt_api(&admin, &pki, emulator.port).await?;
            (emulator.task, Some(emulator.guests))
        } else {
            (tokio::spawn(async {}), None)
        };
        if options.seed {
            bootstrap::seed(&admin).await?;
            if options.emulate {
                // Return only once the seed is as a user will find it (power states and
                // snapshot support reported), so a create right after `up` is not refused.
                bootstrap::wait_for_seed(&admin).await?;
            }
        }
        if let Some(brokers) = &brokers {
            brokers.wait_ready(&admin).await?;
        }
        if options.guard || options.broker {
            bootstrap::wait_policies_enforced(&admin).await?;
        }
        fs::rename(&starting, &kubeconfig)
            .with_context(|| format!("publish {}", kubeconfig.display()))?;
        Ok(Sandbox {
            name: options.name,
            dir,
            kubeconfig,
            server,
            ssh_client_key: sshd.client_key.clone(),
            ssh_user: sshd.user.clone(),
            ssh_host_public_key: sshd.host_public_key.clone(),
            etcd,
            apiserver,
            sshd,
            emulator,
            controller_manager,
            guests,
            brokers,
            prometheus,
        })
    }

    /// A client acting as one of [`USERS`].
    pub async fn client_as(&self, user: &str) -> Result<Client> {
        kubeconfig::client(&self.kubeconfig, user).await
    }

    /// The kube-apiserver's process id (a test pauses it with SIGSTOP to see the broker turn
    /// unready); `None` once it exited.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.id()
    }

    /// The base URL of the Prometheus that scrapes the broker's replicas (`/api/v1/…`); `None`
    /// without [`Options::prometheus`].
    pub fn prometheus_url(&self) -> Option<&str> {
        self.prometheus.as_ref().map(|p| p.url.as_str())
    }

    /// The broker's replicas, to share with whoever controls them (a test fixture); `None`
    /// without [`Options::broker`].
    pub fn brokers(&self) -> Option<Arc<broker::Brokers>> {
        self.brokers.clone()
    }

    /// The broker's replicas: identity and pid (see [`broker::Brokers::replicas`]); empty
    /// without a broker.
    pub fn broker_replicas(&self) -> Vec<broker::ReplicaInfo> {
        self.brokers
            .as_ref()
            .map(|b| b.replicas())
            .unwrap_or_default()
    }

    /// Sends `signal` to broker replica `i` ([`broker::Brokers::kill`]).
    ///
    /// Errors: no broker, no replica `i`, or it does not run.
    pub fn kill_replica(&self, i: usize, signal: broker::Signal) -> Result<()> {
        self.require_brokers()?.kill(i, signal)
    }

    /// Starts broker replica `i` again with its token ([`broker::Brokers::start`]); its pid.
    ///
    /// Errors: no broker, no replica `i`, it still runs, or it did not start.
    pub async fn start_replica(&self, i: usize) -> Result<u32> {
        self.require_brokers()?.start(i).await
    }

    fn require_brokers(&self) -> Result<&Arc<broker::Brokers>> {
        self.brokers.as_ref().with_context(|| {
            format!(
                "sandbox \"{}\" runs no broker: start it with Options::broker",
                self.name
            )
        })
    }

    /// Stops every process and removes the instance's directory.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(brokers) = self.brokers.take() {
            brokers.kill_all();
        }
        self.emulator.abort();
        if let Some(guests) = self.guests.take() {
            guests.shutdown().await;
        }
        self.sshd.stop().await;
        let _ = self.controller_manager.kill().await;
        let _ = self.apiserver.kill().await;
        let _ = self.etcd.kill().await;
        fs::remove_dir_all(&self.dir).with_context(|| format!("remove {}", self.dir.display()))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(brokers) = &self.brokers {
            brokers.kill_all();
        }
        self.emulator.abort();
        if let Some(guests) = &self.guests {
            guests.kill_now();
        }
    }
}

async fn ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(kube::client::Body::empty()) else {
        return false;
    };
    matches!(client.send(request).await, Ok(resp) if resp.status().is_success())
}
