//! `connect`, `vnc`, `port-forward`, `rdp` and `ssh`: reaching a desktop without virtctl, over
//! KubeVirt's subresource websockets (vdi-core `stream`, `session`, `connect`).
//!
//! Every forward listens on 127.0.0.1 only and serves only the user who ran the command
//! (another user's connection is closed and logged as a warning: vdi-core `peer`). Helper
//! programs (remote-viewer or vncviewer, xfreerdp, ssh) are started with argument vectors;
//! the commands run until Ctrl-C or until the helper exits, then end their forwards. `ssh`
//! knows the guest's host key under the alias the app's SSH line uses too
//! (vdi-core `helpers::ssh_host_alias`).
//!
//! Each command is an adapter over one vdi-core call (`connect::Connector`), the one the app
//! makes too: the same steps in the same order, so the same refusals.
//!
//! While `vnc`, `port-forward` (`ssh`'s ProxyCommand among them) and `rdp` run, the caller's
//! claim on the member is renewed, as the app renews it while a session is open (vdi-core
//! `Supervisor::renew_claims`: managed pools only); `keep` renews it once on a reclaim notice.

use std::time::Duration;

use clap::Args;
use vdi_core::clock::describe_instant;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::connect::{self, Connector, PathKind, PortSpec, SSH_PORT};
use vdi_core::identity::Actor;
use vdi_core::session::{ClaimRenewal, SessionKind, SessionView, Supervisor, Target};

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
    /// Ports: `REMOTE`, `:REMOTE` or `0:REMOTE` (a free local port), or `LOCAL:REMOTE`.
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

/// The connect actions (on a stream client: no automatic retries; a supervisor of the
/// command's own) and the member's namespace.
struct Reach {
    connector: Connector,
    ns: String,
    /// The ordinary client (retries), for the claim's renewal.
    client: kube::Client,
}

impl Reach {
    /// Refuses `member` when the caller may not connect to it, before anything is opened
    /// ([`vdi_core::claim::check_connect`]: with a broker, only its holder and administrators
    /// may), then, with `renew`, starts renewing the caller's claims while this command's
    /// sessions are open. When the cluster does not say who the caller is, neither happens,
    /// with a warning: the stream's own refusal still applies.
    async fn admit(&self, member: &str, renew: bool) -> vdi_core::Result<Option<ClaimRenewal>> {
        match Actor::connect(self.client.clone()).await {
            Ok(actor) => {
                vdi_core::claim::check_connect(&actor, &self.ns, member).await?;
                Ok(renew.then(|| self.connector.supervisor.renew_claims(actor)))
            }
            Err(e) if renew => {
                err!("warning: your claim is not renewed while connected: {e}");
                Ok(None)
            }
            Err(e) => {
                err!(
                    "warning: the cluster did not say who you are, so access is not checked first: {e}"
                );
                Ok(None)
            }
        }
    }
}

/// Reads the kubeconfig and picks the namespace (the core checks the names, before any
/// request).
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
    Ok(Reach {
        connector: Connector::new(conn.streams, Supervisor::new()),
        ns: namespace,
        client: conn.client,
    })
}

/// The global flags again, for a command line this CLI runs itself (ssh's ProxyCommand).
pub struct Relaunch {
    /// `--kubeconfig`, `--context`, `--as`, `--as-group` as given.
    pub global: Vec<String>,
}

/// `connect <member>`: every path with its state and the command that opens it; first, as
/// the connect commands do ([`Reach::admit`]), one refusal with its fix when the caller may not
/// connect at all (with a broker: a desktop someone else or nobody holds), instead of a
/// permission line per path and success.
pub async fn connect(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: MemberArgs,
) -> vdi_core::Result<()> {
    let reach = open(source, context, &args).await?;
    reach.admit(&args.member, false).await?;
    let Reach { connector, ns, .. } = reach;
    crate::claim_side(&connector.client).await;
    let paths = connect::paths(&connector.client, &ns, &args.member).await?;
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

/// Says where `view` listens and which helper it started.
fn started(what: &str, view: &SessionView) {
    err!(
        "{what} on {}; starting {}",
        view.local_address.as_deref().unwrap_or("?"),
        view.helper.as_deref().unwrap_or("?")
    );
}

/// `vnc <member>`: the platform's viewer on a VNC forward ([`Connector::open_viewer`]), or
/// with `--proxy-only` only the forward ([`Connector::forward`]).
pub async fn vnc(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: VncArgs,
) -> vdi_core::Result<()> {
    let reach = open(source, context, &args.target).await?;
    let _renewal = reach.admit(&args.target.member, true).await?;
    let Reach { connector, ns, .. } = reach;
    let member = &args.target.member;
    let id = if args.proxy_only {
        let target = Target::Vnc {
            preserve_session: !args.take_over,
        };
        let forward = connector
            .forward(&ns, member, SessionKind::Forward, target, args.port)
            .await?;
        out!("{{\"port\":{}}}", forward.local.port());
        forward.id
    } else {
        let view = connector
            .open_viewer(&ns, member, args.take_over, args.port)
            .await?;
        started("VNC", &view);
        view.id
    };
    serve(&connector.supervisor, id).await
}

/// `port-forward <member> [LOCAL:]REMOTE...`: [`Connector::forward_ports`], or with `--stdio`
/// [`Connector::bridge`].
pub async fn port_forward(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: PortForwardArgs,
) -> vdi_core::Result<()> {
    let specs = args
        .ports
        .iter()
        .map(|p| p.parse())
        .collect::<vdi_core::Result<Vec<PortSpec>>>()?;
    if args.stdio && specs.len() != 1 {
        return Err(vdi_core::Error::invalid(
            "--stdio bridges exactly one port",
            "pass one REMOTE port with --stdio",
        ));
    }
    let reach = open(source, context, &args.target).await?;
    let _renewal = reach.admit(&args.target.member, true).await?;
    let Reach { connector, ns, .. } = reach;
    let member = &args.target.member;
    let supervisor = &connector.supervisor;
    if args.stdio {
        let local = (tokio::io::stdin(), tokio::io::stdout());
        let id = connector
            .bridge(&ns, member, specs[0].remote, local)
            .await?;
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
    let forwards = connector.forward_ports(&ns, member, &specs).await?;
    for (forward, spec) in forwards.iter().zip(&specs) {
        out!(
            "Forwarding from {} -> {member}:{}",
            forward.local,
            spec.remote
        );
    }
    let _ = tokio::signal::ctrl_c().await;
    supervisor.stop_all();
    err!("stopped");
    Ok(())
}

/// `rdp <member>`: FreeRDP on a forward to 3389 ([`Connector::open_rdp`]), or an .rdp file for
/// another client ([`Connector::save_rdp_file`]).
pub async fn rdp(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: RdpArgs,
) -> vdi_core::Result<()> {
    let reach = open(source, context, &args.target).await?;
    let _renewal = reach.admit(&args.target.member, true).await?;
    let Reach { connector, ns, .. } = reach;
    let member = &args.target.member;
    let id = match &args.rdp_file {
        Some(path) => {
            let saved = connector
                .save_rdp_file(&ns, member, args.port, path)
                .await?;
            out!(
                "RDP on {}; open {} with your RDP client (Ctrl-C ends the forward)",
                saved.session.local_address.as_deref().unwrap_or("?"),
                saved.path
            );
            saved.session.id
        }
        None => {
            let view = connector.open_rdp(&ns, member, args.port).await?;
            started("RDP", &view);
            view.id
        }
    };
    serve(&connector.supervisor, id).await
}

/// `ssh <member>`: ssh with a ProxyCommand that is this CLI's `port-forward --stdio` to port 22,
/// as virtctl does; ssh's own options and command after `--`.
pub async fn ssh(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: SshArgs,
    relaunch: Relaunch,
) -> vdi_core::Result<std::process::ExitCode> {
    let reach = open(source, context, &args.target).await?;
    // Refused here, in words, before ssh starts (its own output would drown the refusal);
    // the forward it runs renews the claim.
    reach.admit(&args.target.member, false).await?;
    let Reach { connector, ns, .. } = reach;
    let member = &args.target.member;
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
    let ssh = connect::ssh_through_proxy(
        &connector.helpers,
        &ns,
        member,
        args.login.as_deref(),
        &proxy,
        &args.ssh_args,
    )?;
    let status = tokio::process::Command::new(&ssh.program)
        .args(&ssh.args)
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

/// `keep <member>`: Keep on a reclaim notice — renews the caller's claim and records the time
/// (vdi-core `claim::renew::keep`); refused past the pool's `maxSession`, and for a member the
/// caller does not hold.
pub async fn keep(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: MemberArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| conn.default_namespace.clone());
    vdi_core::claim::check_unassign(&ns, &args.member)?;
    let actor = Actor::connect(conn.client).await?;
    let kept = vdi_core::claim::renew::keep(&actor, &ns, &args.member).await?;
    let now = actor.clock().now();
    out!(
        "kept {}: the claim now lasts until {} unless renewed",
        args.member,
        describe_instant(kept.renewed.expires_at, now)
    );
    if let Some(next) = kept.next_reclaim {
        let how = if next.keepable {
            "Keep or a session postpones it"
        } else {
            "nothing extends it"
        };
        out!(
            "next reclaim: {} ({}; {how})",
            describe_instant(next.at, now),
            next.why.as_str()
        );
    }
    Ok(())
}
