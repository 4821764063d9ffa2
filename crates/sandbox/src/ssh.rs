//! The SSH server behind guest port 22. There is no guest OS in the sandbox: guest port 22 of
//! every running VMI is one real OpenSSH `sshd` per sandbox (Debian's `openssh-server`) on a
//! free port of 127.0.0.1, reached through the emulated `portforward` subresource as a real
//! guest's sshd is reached through KubeVirt's (what `virtctl ssh` does).
//!
//! Per sandbox, under `<instance dir>/ssh/`: a host key and a client key pair (ed25519, made
//! with `ssh-keygen`), `authorized_keys` holding the client public key, `sshd_config` and the
//! pid file. Login: the user running the sandbox with the client key only (no passwords, no
//! PAM, `StrictModes no`; for root `PermitRootLogin prohibit-password`). When sshd runs as
//! root it needs its privilege-separation directory `/run/sshd`, which is created if missing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::process::Child;

use crate::process::{command, find_program, free_port, log_tail, terminate};

/// A running sshd and how to log in to it.
#[derive(Debug)]
pub struct SshServer {
    /// Its port on 127.0.0.1 (what guest port 22 of every running VMI reaches).
    pub port: u16,
    /// The client private key (OpenSSH format, ed25519, no passphrase, mode 0600).
    pub client_key: PathBuf,
    /// The host public key (`ssh-ed25519 AAAA… corral-sandbox-host`), to pin the server.
    pub host_public_key: PathBuf,
    /// The user name to log in as: the user running the sandbox.
    pub user: String,
    child: Child,
}

/// The login name of the user running this process (`id -un`), and whether it is root.
fn current_user() -> Result<(String, bool)> {
    let run = |arg: &str| -> Result<String> {
        let out = std::process::Command::new("id")
            .arg(arg)
            .output()
            .context("run `id`")?;
        if !out.status.success() {
            bail!(
                "`id {arg}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let uid = run("-u")?;
    let name = run("-un").or_else(|e| std::env::var("USER").map_err(|_| e))?;
    Ok((name, uid == "0"))
}

fn keygen(program: &Path, path: &Path, comment: &str) -> Result<()> {
    let out = std::process::Command::new(program)
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path)
        .output()
        .context("run ssh-keygen")?;
    if !out.status.success() {
        bail!(
            "ssh-keygen for {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

impl SshServer {
    /// Generates the keys and configuration under `dir` (created) and starts sshd, returning
    /// once it sends its banner.
    ///
    /// Errors: `sshd` or `ssh-keygen` is missing (install Debian's `openssh-server`, as
    /// `scripts/install-deps.sh` does), or sshd did not answer within 10 s (the error carries
    /// the tail of `<dir>/sshd.log`).
    pub async fn start(dir: &Path, instance: &str) -> Result<SshServer> {
        let sshd = find_program("sshd").context(
            "sshd not found: install Debian's openssh-server (scripts/install-deps.sh does)",
        )?;
        let keygen_program = find_program("ssh-keygen").context(
            "ssh-keygen not found: install Debian's openssh-client (scripts/install-deps.sh does)",
        )?;
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let host_key = dir.join("ssh_host_ed25519_key");
        let client_key = dir.join("id_ed25519");
        keygen(&keygen_program, &host_key, "corral-sandbox-host")?;
        keygen(
            &keygen_program,
            &client_key,
            &format!("corral-sandbox-{instance}"),
        )?;
        let authorized = dir.join("authorized_keys");
        std::fs::copy(client_key.with_extension("pub"), &authorized)?;
        let (user, root) = current_user()?;
        if root {
            // Best effort: without it sshd says why in its log.
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        let log = dir.join("sshd.log");
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let config = dir.join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nAddressFamily inet\n\
                     HostKey {host_key}\nAuthorizedKeysFile {authorized}\nPidFile {pid}\n\
                     UsePAM no\nStrictModes no\nPubkeyAuthentication yes\n\
                     PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                     PermitRootLogin {root_login}\nAllowUsers {user}\nX11Forwarding no\n\
                     PrintMotd no\nSubsystem sftp internal-sftp\n",
                    host_key = host_key.display(),
                    authorized = authorized.display(),
                    pid = dir.join("sshd.pid").display(),
                    root_login = if root { "prohibit-password" } else { "no" },
                ),
            )?;
            let mut cmd = command(&sshd, &log)?;
            cmd.arg("-D").arg("-e").arg("-f").arg(&config);
            let mut child = cmd.spawn().context("start sshd")?;
            match wait_for_banner(&mut child, port).await {
                Ok(()) => {
                    return Ok(SshServer {
                        port,
                        client_key,
                        host_public_key: host_key.with_extension("pub"),
                        user,
                        child,
                    });
                }
                Err(e) => {
                    let _ = child.kill().await;
                    last_error = format!("{e:#}");
                }
            }
        }
        bail!(
            "sshd did not start ({last_error}); its log:\n{}",
            log_tail(&log)
        )
    }

    /// Stops sshd (the keys stay until the instance directory is removed).
    pub async fn stop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(2)).await;
    }
}

async fn wait_for_banner(child: &mut Child, port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("sshd exited ({status})");
        }
        if let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", port)).await {
            let mut banner = [0u8; 8];
            let read = tokio::time::timeout(Duration::from_secs(2), tcp.read_exact(&mut banner));
            if matches!(read.await, Ok(Ok(_))) && banner.starts_with(b"SSH-") {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("sshd did not answer on 127.0.0.1:{port} within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
