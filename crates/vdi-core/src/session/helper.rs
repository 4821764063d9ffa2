//! Helper processes: a viewer, an RDP or SSH client, usbredirect — run from an argument
//! vector as part of a session, watched until they exit (the session ends then, with the last
//! lines they wrote to stderr), killed when the session is stopped, and killed by Linux when
//! the process that started them dies.

use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Supervisor;
use crate::error::{Error, Result};

impl Supervisor {
    /// Runs `program` with `args` (an argument vector, never a shell string) as the helper of
    /// session `id`, with `stdin` fed to it if given; the session ends when the helper exits
    /// (noticed at once) and the helper is killed when the session is stopped or the
    /// supervisor dropped. Returns its process id.
    ///
    /// Errors: the program is not installed ([`Error::Rejected`] `NotFound`, naming it), or
    /// cannot be started.
    pub fn attach_helper(
        &self,
        id: u32,
        program: &str,
        args: &[String],
        stdin: Option<Vec<u8>>,
    ) -> Result<u32> {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let mut child = command.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::rejected(
                    crate::error::ErrorKind::NotFound,
                    format!("{program} is not installed (not found on PATH)"),
                    crate::programs::install_hint(program),
                )
            } else {
                Error::Config(format!("start {program}: {e}"))
            }
        })?;
        let pid = child.id().unwrap_or(0);
        if let Some(bytes) = stdin
            && let Some(mut pipe) = child.stdin.take()
        {
            tokio::spawn(async move {
                let _ = pipe.write_all(&bytes).await;
                let _ = pipe.shutdown().await;
            });
        }
        let stderr = child.stderr.take();
        let this = self.downgrade();
        let name = program.to_owned();
        let watcher = tokio::spawn(async move {
            let mut errors = String::new();
            if let Some(mut err) = stderr {
                let _ = err.read_to_string(&mut errors).await;
            }
            let status = child.wait().await;
            let tail: String = errors
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" / ");
            let said = if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            };
            let (reason, failed) = match status {
                Ok(s) if s.success() => (format!("{name} exited{said}"), false),
                Ok(s) => (format!("{name} exited ({s}){said}"), true),
                Err(e) => (format!("{name} could not be waited for: {e}"), true),
            };
            this.finish(id, &reason, failed);
        });
        self.set_helper(id, program, pid, watcher);
        Ok(pid)
    }
}

/// Asks Linux to kill the helper when the thread that started it ends, so a crashed app
/// leaves no helper behind.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}
