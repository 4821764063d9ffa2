//! Child processes of a sandbox: every server it starts (etcd, kube-apiserver, sshd, the guests'
//! Xvnc, X clients and RDP servers, the broker's replicas) dies with the thread that started it
//! and is killed when its handle is dropped, so that a crashed test never leaves one behind.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// A free TCP port on 127.0.0.1 (the listener is closed before the port is used, so a caller
/// that binds it later retries on "address in use").
pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Asks Linux to kill the child when the thread that spawned it exits, so that a crashed test
/// or `sandbox serve` never leaves a server behind. Spawn only from threads that live as long
/// as the sandbox (the runtime's workers or the thread that started it, never a blocking-pool
/// thread, which exits when idle).
#[allow(unsafe_code)]
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A command for a sandbox server: stdin from /dev/null, stdout and stderr to `log` (appended),
/// killed when its [`Child`] is dropped and when the spawning thread exits.
pub(crate) fn command(program: &Path, log: &Path) -> Result<Command> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut cmd = Command::new(program);
    cmd.stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    Ok(cmd)
}

/// The path of `name` on `PATH`, else in `/usr/sbin` or `/sbin` (where Debian puts `sshd`,
/// which some users' `PATH` lacks).
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Stops a child: SIGTERM (so that Xvnc removes its lock file and socket), then SIGKILL if it
/// is still there after `grace`. The child is reaped either way.
#[allow(unsafe_code)]
pub(crate) async fn terminate(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id()
        && let Ok(pid) = i32::try_from(pid)
    {
        // SAFETY: kill(2) on a pid we own: the child is not reaped while `child` is borrowed,
        // so the pid cannot have been reused.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

/// The last 25 lines of a log file.
pub(crate) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = text.lines().rev().take(25).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The path of program `name`.
///
/// Errors: not installed (the error names Debian's `package`).
pub(crate) fn program(name: &str, package: &str) -> Result<PathBuf> {
    find_program(name).with_context(|| {
        format!("{name} not found: install Debian's {package} (scripts/install-deps.sh does)")
    })
}

/// Starts a server that listens on the port it is given: `command(port)` for a free port of
/// 127.0.0.1, up to three ports (another process may take a free port first). Returns the port
/// once it accepts connections, and the process.
///
/// Errors: the command could not be made or spawned, or the server exited or did not listen
/// within 15 s on every try (the last failure, with the tail of `log`, its output).
pub(crate) async fn spawn_listening(
    log: &Path,
    mut command: impl FnMut(u16) -> Result<tokio::process::Command>,
) -> Result<(u16, Child)> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let mut cmd = command(port)?;
        let program = cmd.as_std().get_program().to_string_lossy().into_owned();
        let mut child = cmd.spawn().with_context(|| format!("start {program}"))?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait()? {
                last = format!("{program} exited ({status}): {}", log_tail(log));
                break;
            }
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok((port, child));
            }
            if Instant::now() > deadline {
                let _ = child.kill().await;
                last = format!("{program} did not listen within 15 s: {}", log_tail(log));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    bail!("{last}")
}
