//! `connect`, `vnc`, `port-forward`, `rdp` and `ssh`: reaching a desktop without virtctl, over
//! KubeVirt's subresource websockets (vdi-core `stream`, `session`, `connect`).
//!
//! Every forward listens on 127.0.0.1 only and serves only the user who ran the command
//! (another user's connection is closed and logged as a warning: vdi-core `peer`). Helper
//! programs (remote-viewer or vncviewer, xfreerdp, ssh) are started with argument vectors;
//! the commands run until Ctrl-C or until the helper exits, then end their forwards. `ssh`
//! knows the guest's host key under the alias the app's SSH line uses too
//! (vdi-core `connect::ssh_host_alias`).

use std::time::Duration;

use clap::Args;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::connect::{self, Launch, PathKind, RDP_PORT, SSH_PORT};
use vdi_core::session::{About, SessionKind, Supervisor, Target};
use vdi_core::stream::{self, Subresource};

/// The member and its namespace, shared by the connect commands.
#[derive(Args)]
pub struct MemberArgs {
    /// The member (VirtualMachine / VMI name).
    pub member: String,
    /// Namespace (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// `vnc <member> [--proxy-only] [--port N] [--take-over]`.
#[derive(Args)]
pub struct VncArgs {
    #[command(flatten)]
    pub target: MemberArgs,
    /// Only forward: print {"port":N} and serve until Ctrl-C (for your own viewer).
    #[arg(long)]
    pub proxy_only: bool,
    /// Local port to listen on (default: a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Disconnect whoever views the console now (default: refuse while someone views).
    #[arg(long)]
    pub take_over: bool,
}

/// `port-forward <member> [LOCAL:]REMOTE... [--stdio]`.
#[derive(Args)]
pub struct PortForwardArgs {
    #[command(flatten)]
    pub target: MemberArgs,
    /// Ports: `REMOTE` (a free local port) or `LOCAL:REMOTE`.
    #[arg(required = true, value_name = "[LOCAL:]REMOTE")]
    pub ports: Vec<String>,
    /// Bridge stdin/stdout to the one REMOTE port instead of listening (ssh's ProxyCommand).
    #[arg(long)]
    pub stdio: bool,
}

/// `rdp <member> [--port N] [--rdp-file PATH]`.
#[derive(Args)]
pub struct RdpArgs {
    #[command(flatten)]
    pub target: MemberArgs,
    /// Local port to listen on (default: a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Write an .rdp file for another RDP client instead of starting FreeRDP, and forward
    /// until Ctrl-C.
    #[arg(long, value_name = "PATH")]
    pub rdp_file: Option<std::path::PathBuf>,
}

/// `ssh <member> [-l USER] [-- SSH-ARGS]`.
#[derive(Args)]
pub struct SshArgs {
    #[command(flatten)]
    pub target: MemberArgs,
    /// User to log in as on the guest (default: ssh's own default).
    #[arg(short = 'l', long = "login")]
    pub login: Option<String>,
    /// More arguments for ssh (after --): options, or a command to run.
    #[arg(last = true)]
    pub ssh_args: Vec<String>,
}

/// A stream client (no automatic retries) and the member's namespace.
struct Reach {
    client: kube::Client,
    ns: String,
}

/// Connects and picks the namespace; checks the names before any request.
async fn open(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: &MemberArgs,
) -> vdi_core::Result<Reach> {
    let conn = source.connect(context).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| conn.default_namespace.clone());
    vdi_core::validate::namespace(&namespace)?;
    vdi_core::validate::member_name(&args.member)?;
    let client = conn.streams;
    Ok(Reach {
        client,
        ns: namespace,
    })
}

/// The global flags again, for a command line this CLI runs itself (ssh's ProxyCommand).
pub struct Relaunch {
    /// `--kubeconfig`, `--context`, `--as`, `--as-group` as given.
    pub global: Vec<String>,
}

/// `connect <member>`: every path with its state and the command that opens it.
pub async fn connect(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: MemberArgs,
) -> vdi_core::Result<()> {
    let Reach { client, ns } = open(source, context, &args).await?;
    let paths = connect::paths(&client, &ns, &args.member).await?;
    let member = &args.member;
    out!(
        "{member} (ns/{ns}, {})",
        paths
            .phase
            .as_deref()
            .map_or("not running".to_owned(), |p| format!("VMI {p}"))
    );
    for path in &paths.paths {
        let (name, how) = match path.kind {
            PathKind::Vnc => (
                "VNC",
                format!("corral-vdi vnc {member} -n {ns}   (or the Console in the app)"),
            ),
            PathKind::Rdp => ("RDP", format!("corral-vdi rdp {member} -n {ns}")),
            PathKind::Ssh => ("SSH", format!("corral-vdi ssh {member} -n {ns}")),
        };
        match (&path.available, &path.reason) {
            (true, _) => out!("  {name:<4} available    {how}"),
            (false, reason) => out!(
                "  {name:<4} unavailable  {}",
                reason.as_deref().unwrap_or("unknown reason")
            ),
        }
    }
    Ok(())
}

/// Waits for Ctrl-C or for `session` to end (its helper exited); says which.
///
/// Errors: the helper failed (a viewer without a display, a client that gave up), so the
/// command's exit status says so too.
async fn serve(supervisor: &Supervisor, session: u32) -> vdi_core::Result<()> {
    let mut changes = supervisor.subscribe();
    loop {
        if let Some(view) = supervisor.get(session)
            && let vdi_core::session::SessionState::Ended { reason, failed } = view.state
        {
            if failed {
                let what = match view.kind {
                    SessionKind::Rdp => "RDP client",
                    _ => "viewer",
                };
                return Err(vdi_core::Error::rejected(
                    vdi_core::error::ErrorKind::Other,
                    format!("the {what} for {} failed: {reason}", view.member),
                    "check that a display is available (DISPLAY or WAYLAND_DISPLAY) and the \
                     client works on its own, or use --proxy-only / --rdp-file with another client",
                ));
            }
            err!("{reason}");
            return Ok(());
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                supervisor.stop(session);
                err!("stopped");
                return Ok(());
            }
            changed = changes.changed() => if changed.is_err() { return Ok(()) },
        }
    }
}

fn launch(supervisor: &Supervisor, session: u32, launch: Launch) -> vdi_core::Result<u32> {
    supervisor.attach_helper(session, &launch.program, &launch.args, launch.stdin)
}

/// `vnc <member>`: a VNC forward, and the platform's viewer on it unless `--proxy-only`.
pub async fn vnc(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: VncArgs,
) -> vdi_core::Result<()> {
    let Reach { client, ns } = open(source, context, &args.target).await?;
    let member = &args.target.member;
    let preserve_session = !args.take_over;
    // Try once before listening, so a refusal (not running, someone viewing) is said now.
    let probe = stream::open(&client, &ns, member, Subresource::Vnc { preserve_session }).await?;
    drop(probe);
    let supervisor = Supervisor::new();
    let started = supervisor
        .start_forward(
            client,
            &ns,
            member,
            if args.proxy_only {
                SessionKind::Forward
            } else {
                SessionKind::Viewer
            },
            Target::Vnc { preserve_session },
            args.port,
        )
        .await?;
    let port = started.local.port();
    if args.proxy_only {
        out!("{{\"port\":{port}}}");
    } else {
        let viewer = connect::viewer_command(port, &format!("{member} ({ns})"))?;
        err!("VNC on 127.0.0.1:{port}; starting {}", viewer.program);
        launch(&supervisor, started.id, viewer)?;
    }
    serve(&supervisor, started.id).await
}

/// Parses `REMOTE` or `LOCAL:REMOTE`.
fn parse_ports(spec: &str) -> vdi_core::Result<(Option<u16>, u16)> {
    let bad = || {
        vdi_core::Error::invalid(
            format!("\"{spec}\" is not a port or LOCAL:REMOTE pair"),
            "write ports like 22, 2222:22 or 3389 (1 to 65535)",
        )
    };
    let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad);
    match spec.split_once(':') {
        Some((local, remote)) => Ok((Some(port(local)?), port(remote)?)),
        None => Ok((None, port(spec)?)),
    }
}

/// `port-forward <member> [LOCAL:]REMOTE...`.
pub async fn port_forward(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: PortForwardArgs,
) -> vdi_core::Result<()> {
    let specs = args
        .ports
        .iter()
        .map(|p| parse_ports(p))
        .collect::<vdi_core::Result<Vec<_>>>()?;
    if args.stdio && specs.len() != 1 {
        return Err(vdi_core::Error::invalid(
            "--stdio bridges exactly one port",
            "pass one REMOTE port with --stdio",
        ));
    }
    let Reach { client, ns } = open(source, context, &args.target).await?;
    let member = &args.target.member;
    let supervisor = Supervisor::new();
    if args.stdio {
        let (_, remote) = specs[0];
        let ws = stream::open(
            &client,
            &ns,
            member,
            Subresource::PortForward { port: remote },
        )
        .await?;
        let id = supervisor.start_bridge(
            ws,
            (tokio::io::stdin(), tokio::io::stdout()),
            About {
                namespace: ns.clone(),
                member: member.clone(),
                kind: SessionKind::Forward,
                target: format!("port {remote}"),
            },
        );
        let mut changes = supervisor.subscribe();
        while supervisor
            .get(id)
            .is_some_and(|s| s.state == vdi_core::session::SessionState::Active)
        {
            if changes.changed().await.is_err() {
                break;
            }
        }
        return Ok(());
    }
    let mut sessions = Vec::new();
    for (local, remote) in specs {
        let started = supervisor
            .start_forward(
                client.clone(),
                &ns,
                member,
                SessionKind::Forward,
                Target::Port(remote),
                local,
            )
            .await?;
        out!("Forwarding from {} -> {member}:{remote}", started.local);
        sessions.push(started.id);
    }
    let _ = tokio::signal::ctrl_c().await;
    supervisor.stop_all();
    err!("stopped");
    Ok(())
}

/// `rdp <member>`: a forward to 3389 and FreeRDP on it (or an .rdp file for another client).
pub async fn rdp(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: RdpArgs,
) -> vdi_core::Result<()> {
    let Reach { client, ns } = open(source, context, &args.target).await?;
    let member = &args.target.member;
    let probe = stream::open(
        &client,
        &ns,
        member,
        Subresource::PortForward { port: RDP_PORT },
    )
    .await?;
    drop(probe);
    let supervisor = Supervisor::new();
    let started = supervisor
        .start_forward(
            client,
            &ns,
            member,
            SessionKind::Rdp,
            Target::Port(RDP_PORT),
            args.port,
        )
        .await?;
    let port = started.local.port();
    match &args.rdp_file {
        Some(path) => {
            std::fs::write(path, connect::rdp_file(port)).map_err(|e| {
                vdi_core::Error::invalid(
                    format!("cannot write {}: {e}", path.display()),
                    "pick a writable path for --rdp-file",
                )
            })?;
            out!(
                "RDP on 127.0.0.1:{port}; open {} with your RDP client (Ctrl-C ends the forward)",
                path.display()
            );
        }
        None => {
            let client = connect::rdp_command(port, member)?;
            err!("RDP on 127.0.0.1:{port}; starting {}", client.program);
            launch(&supervisor, started.id, client)?;
        }
    }
    serve(&supervisor, started.id).await
}

/// Quotes `arg` for a POSIX shell (single quotes; a quote inside becomes `'\''`). ssh runs its
/// ProxyCommand through the user's shell, so each word is quoted.
fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+".contains(&b))
    {
        return arg.to_owned();
    }
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// `ssh <member>`: ssh with a ProxyCommand that is this CLI's `port-forward --stdio` to port 22,
/// as virtctl does; ssh's own options and command after `--`.
pub async fn ssh(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: SshArgs,
    relaunch: Relaunch,
) -> vdi_core::Result<std::process::ExitCode> {
    let Reach { ns, .. } = open(source, context, &args.target).await?;
    let member = &args.target.member;
    if let Some(user) = &args.login {
        vdi_core::validate::identity(user)?;
    }
    let me = std::env::current_exe()
        .map_err(|e| vdi_core::Error::Config(format!("where is this program: {e}")))?;
    let mut proxy = vec![me.display().to_string()];
    proxy.extend(relaunch.global);
    proxy.extend([
        "port-forward".to_owned(),
        "--stdio".to_owned(),
        member.clone(),
        SSH_PORT.to_string(),
        "-n".to_owned(),
        ns.clone(),
    ]);
    let proxy_command: Vec<String> = proxy.iter().map(|a| shell_quote(a)).collect();
    let host = connect::ssh_host_alias(&ns, member);
    let mut ssh_args = vec![
        "-o".to_owned(),
        format!("ProxyCommand={}", proxy_command.join(" ")),
        // The guest's host key is known under the VMI's name, not under 127.0.0.1.
        "-o".to_owned(),
        format!("HostKeyAlias={host}"),
    ];
    if let Some(user) = &args.login {
        ssh_args.extend(["-l".to_owned(), user.clone()]);
    }
    ssh_args.push(host);
    ssh_args.extend(args.ssh_args);
    let (_, ssh) = connect::find_program(&["ssh"]).ok_or_else(|| {
        vdi_core::Error::rejected(
            vdi_core::error::ErrorKind::NotFound,
            "ssh is not installed (not found on PATH)",
            connect::install_hint("ssh"),
        )
    })?;
    let status = tokio::process::Command::new(ssh)
        .args(&ssh_args)
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| vdi_core::Error::Config(format!("run ssh: {e}")))?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(std::process::ExitCode::from(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    ))
}

#[cfg(test)]
mod tests {
    use super::{parse_ports, shell_quote};

    #[test]
    fn ports_parse() {
        assert_eq!(parse_ports("22").unwrap(), (None, 22));
        assert_eq!(parse_ports("2222:22").unwrap(), (Some(2222), 22));
        for bad in ["", "0", "x", "1:70000", "a:22"] {
            assert!(parse_ports(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn proxy_command_words_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("corral-vms"), "corral-vms");
        assert_eq!(shell_quote("/tmp/my config"), "'/tmp/my config'");
        assert_eq!(shell_quote("a'b; rm -rf /"), r"'a'\''b; rm -rf /'");
        assert_eq!(shell_quote(""), "''");
    }
}
