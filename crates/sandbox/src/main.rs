//! `sandbox up | down | status`: a local Kubernetes with emulated KubeVirt for Corral VDI.
//!
//! `up` starts an instance in the background (with the guard and the broker's two replicas),
//! waits until it serves and the broker leads, says so, and prints the kubeconfig's path as the
//! last line of stdout. `status` also names the broker's leader, replicas and last reconcile.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use sandbox::{Options, Sandbox, binaries, state_root};

#[derive(Parser)]
#[command(
    name = "sandbox",
    about = "A local Kubernetes (real kube-apiserver and etcd) with emulated KubeVirt"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start an instance in the background (or report the running one) and print its
    /// kubeconfig path last.
    Up {
        /// Instance name; several may run at once.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Stop an instance and remove its data.
    Down {
        /// Instance name.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Say whether an instance runs, where its kubeconfig is, and the broker's leader, replicas
    /// and last reconcile.
    Status {
        /// Instance name.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Build (or find in the cache) kube-apiserver and etcd, and print their directory.
    Prepare {
        /// Only say whether they are cached: print their directory and exit 0; exit 3 when
        /// they would be built, 4 while another process builds them.
        #[arg(long)]
        check: bool,
    },
    /// Run an instance in the foreground until SIGTERM/SIGINT (what `up` starts).
    #[command(hide = true)]
    Serve {
        /// Instance name.
        #[arg(long, default_value = "default")]
        name: String,
    },
}

fn pid_file(name: &str) -> PathBuf {
    state_root().join(format!("{name}.pid"))
}

fn ready_file(name: &str) -> PathBuf {
    state_root().join(name).join("ready")
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid of a running instance's `serve` process.
fn running(name: &str) -> Option<u32> {
    let pid: u32 = fs::read_to_string(pid_file(name))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    alive(pid).then_some(pid)
}

fn up(name: &str) -> Result<()> {
    if let Some(pid) = running(name) {
        if let Ok(kubeconfig) = fs::read_to_string(ready_file(name)) {
            eprintln!("sandbox \"{name}\" is already running (pid {pid})");
            println!("{}", kubeconfig.trim());
            return Ok(());
        }
        bail!(
            "sandbox \"{name}\" is starting (pid {pid}); run `sandbox down --name {name}` if it is stuck"
        );
    }
    let bins = binaries::ensure()?;
    eprintln!(
        "sandbox: kube-apiserver {} at {}",
        binaries::KUBERNETES_VERSION,
        bins.kube_apiserver.display()
    );
    fs::create_dir_all(state_root())?;
    let log_path = state_root().join(format!("{name}.log"));
    let log = fs::File::create(&log_path)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["serve", "--name", name])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("start the sandbox in the background")?;
    fs::write(pid_file(name), child.id().to_string())?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Ok(kubeconfig) = fs::read_to_string(ready_file(name)) {
            eprintln!(
                "sandbox \"{name}\" is up (pid {}; log {}). Contexts: admin, alice, bob, carol.",
                child.id(),
                log_path.display()
            );
            eprintln!("{}", broker_report(Path::new(kubeconfig.trim())));
            eprintln!(
                "broker logs: {}",
                state_root()
                    .join(name)
                    .join("logs")
                    .join("broker-<i>.log")
                    .display()
            );
            println!("{}", kubeconfig.trim());
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            bail!("the sandbox exited while starting ({status}):\n{log}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "the sandbox did not start within 180 s; see {}",
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn down(name: &str) -> Result<()> {
    let dir = state_root().join(name);
    match running(name) {
        Some(pid) => {
            Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .context("run kill")?;
            let deadline = Instant::now() + Duration::from_secs(20);
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if alive(pid) {
                bail!("sandbox \"{name}\" (pid {pid}) did not stop within 20 s");
            }
            eprintln!("sandbox \"{name}\" stopped");
        }
        None => eprintln!("sandbox \"{name}\" is not running"),
    }
    let _ = fs::remove_file(pid_file(name));
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// Says what actually serves: the server process, and whether its API server answers (a
/// `GET /version` as admin within 3 s). A process that runs while its API server does not
/// answer (stopped, a zombie, wedged) is reported as such, with exit status 1.
fn status(name: &str) -> Result<()> {
    match (running(name), fs::read_to_string(ready_file(name))) {
        (Some(pid), Ok(kubeconfig)) => {
            let kubeconfig = kubeconfig.trim().to_owned();
            let answer = tokio::runtime::Runtime::new()?.block_on(async {
                let client = sandbox::kubeconfig::client(Path::new(&kubeconfig), "admin").await?;
                tokio::time::timeout(Duration::from_secs(3), client.apiserver_version())
                    .await
                    .map_err(|_| anyhow::anyhow!("no answer within 3 s"))?
                    .map_err(anyhow::Error::from)
            });
            match answer {
                Ok(version) => {
                    println!(
                        "sandbox \"{name}\": running (pid {pid}), kube-apiserver {} answering",
                        version.git_version
                    );
                    println!("kubeconfig: {kubeconfig}");
                    println!("{}", broker_report(Path::new(&kubeconfig)));
                    for line in replica_endpoints(name) {
                        println!("{line}");
                    }
                    let prometheus = state_root().join(name).join(sandbox::prometheus::URL_FILE);
                    if let Ok(url) = fs::read_to_string(prometheus) {
                        println!("prometheus: {}", url.trim());
                    }
                }
                Err(e) => {
                    println!(
                        "sandbox \"{name}\": process running (pid {pid}) but its API server does not \
                         answer: {e:#}"
                    );
                    println!("fix: sandbox down --name {name} && sandbox up --name {name}");
                    std::process::exit(1);
                }
            }
        }
        (Some(pid), Err(_)) => println!("sandbox \"{name}\": starting (pid {pid})"),
        (None, _) => println!("sandbox \"{name}\": not running"),
    }
    Ok(())
}

/// Each broker replica's `metrics:` and `health:` lines, from the sandbox's
/// [`sandbox::broker::ENDPOINTS_FILE`] (none when it runs no broker).
fn replica_endpoints(name: &str) -> Vec<String> {
    let listed = fs::read_to_string(
        state_root()
            .join(name)
            .join(sandbox::broker::ENDPOINTS_FILE),
    )
    .unwrap_or_default();
    listed
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (identity, metrics, health) = (fields.next()?, fields.next()?, fields.next()?);
            Some(format!(
                "  replica {identity}: metrics: {metrics}  health: {health}"
            ))
        })
        .collect()
}

/// The broker's state ([`sandbox::broker::describe`]), asked as admin within 3 s; a line saying
/// why when it cannot be asked.
fn broker_report(kubeconfig: &Path) -> String {
    let answer = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| {
            runtime.block_on(async {
                let client = sandbox::kubeconfig::client(kubeconfig, "admin").await?;
                let status =
                    tokio::time::timeout(Duration::from_secs(3), vdi_core::broker::status(&client))
                        .await
                        .map_err(|_| anyhow::anyhow!("no answer within 3 s"))??;
                Ok(sandbox::broker::describe(&status))
            })
        });
    answer.unwrap_or_else(|e| format!("broker: its status is unknown: {e:#}"))
}

async fn serve(name: &str) -> Result<()> {
    let sandbox = Sandbox::start(Options::named(name)).await?;
    fs::write(ready_file(name), sandbox.kubeconfig.display().to_string())?;
    tracing::info!(server = %sandbox.server, kubeconfig = %sandbox.kubeconfig.display(), "sandbox ready");
    tracing::info!(
        key = %sandbox.ssh_client_key.display(),
        user = %sandbox.ssh_user,
        "guest port 22 of every running VMI: ssh with this key as this user (through portforward)"
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping");
    sandbox.stop().await
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    match Cli::parse().command {
        Cmd::Up { name } => up(&name),
        Cmd::Down { name } => down(&name),
        Cmd::Status { name } => status(&name),
        Cmd::Prepare { check } => {
            let bins = if check {
                binaries::cached()
                    .unwrap_or_else(|| std::process::exit(if binaries::building() { 4 } else { 3 }))
            } else {
                binaries::ensure()?
            };
            println!("{}", bins.etcd.parent().unwrap_or(Path::new(".")).display());
            Ok(())
        }
        Cmd::Serve { name } => tokio::runtime::Runtime::new()?.block_on(serve(&name)),
    }
}
