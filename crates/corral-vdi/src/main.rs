//! `corral-vdi`: the Corral VDI command line, on the same core (vdi-core) as the desktop app.
//!
//! Like kubectl it honours `KUBECONFIG`, `--kubeconfig`, `--context` and `--as`; the namespace
//! defaults to the context's. Who acts is always the identity the cluster reports for the
//! credentials (SelfSubjectReview), never a name typed on the command line.

/// `println!` for the command's output, which ends the CLI quietly (exit 0) once stdout's
/// reader has gone (`corral-vdi pool list | head`): see [`terminal::write_out`].
macro_rules! out {
    () => {
        $crate::terminal::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::terminal::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` with the cluster's text made safe for a terminal ([`terminal::escaped`]).
macro_rules! err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::terminal::escaped(&format!($($arg)*), true))
    };
}

mod audit_cmd;
mod broker_cmd;
mod capacity_cmd;
mod connect_cmd;
mod entitle_cmd;
mod guard_cmd;
mod numbers;
mod policy_cmd;
mod pool_cmd;
mod terminal;
mod usage_cmd;
mod usb_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use vdi_core::claim::cluster_half::broker_badge;
use vdi_core::claim::{
    ClaimOptions, ClaimProgress, PowerAction, UnassignOptions, assign_with_progress, check_assign,
    check_unassign, unassign,
};
use vdi_core::clock::{ServerClock, describe_instant, exact_instant};
use vdi_core::cluster::{Impersonation, KubeconfigSource};
use vdi_core::identity::Actor;
use vdi_core::names::lease_name;
use vdi_core::scope::Scope;
use vdi_core::state::{ClaimSide, MemberState, MemberView, PoolView};
use vdi_core::validate::parse_duration;
use vdi_core::watch::list_pools_on;

#[derive(Parser)]
#[command(
    name = "corral-vdi",
    version,
    about = "Virtual-desktop pools on KubeVirt: create and list pools, assign and release desktops"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true)]
    context: Option<String>,
    /// Act as this user through the cluster's impersonation (like kubectl --as); RBAC must
    /// grant you `impersonate` on it.
    #[arg(long = "as", global = true, value_name = "USER")]
    as_user: Option<String>,
    /// A group to act with, with --as (repeatable).
    #[arg(
        long = "as-group",
        global = true,
        value_name = "GROUP",
        requires = "as_user"
    )]
    as_groups: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Desktop pools.
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Hand a free member of a pool to a user (claims its Lease, labels and starts the VM).
    Assign {
        /// The pool.
        pool: String,
        /// The user it is for: the identity the cluster knows them by.
        user: String,
        /// Namespace (default: the context's namespace).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Lease duration, in seconds (1 to 604800).
        #[arg(long, default_value_t = i64::from(vdi_core::names::DEFAULT_LEASE_SECONDS), allow_negative_numbers = true)]
        lease_seconds: i64,
        /// Hand out another member even if the user already holds one in this pool.
        #[arg(long)]
        another: bool,
        /// With a broker on the cluster: how long to wait, in all, for it to release a member
        /// when none is free and to bind access and start the member: 120s, 5m, 1m30s; 1 s to
        /// 24 h.
        #[arg(long, value_parser = parse_duration, default_value = "120s")]
        timeout: std::time::Duration,
        /// Assign to someone the pool is not for (an administrator's act; recorded on the
        /// claim, corral.dev/vdi-forced-by).
        #[arg(long)]
        force: bool,
    },
    /// Release a member: removes its assignment, stops the VM, releases its Lease.
    Unassign {
        /// The member (VirtualMachine name).
        member: String,
        /// Namespace (default: the context's namespace).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Asserts who you are: must equal the identity the cluster reports for your
        /// credentials (to act as someone else, use --as). Only the Lease's holder may release
        /// an active claim.
        #[arg(long)]
        user: Option<String>,
        /// Release someone else's active claim (an administrator's act; recorded as an Event
        /// on the VM).
        #[arg(long)]
        force: bool,
    },
    /// The server-side guard: admission policies that make the API server enforce the claim
    /// rules for everyone, kubectl users included.
    #[command(subcommand)]
    Guard(guard_cmd::GuardCommand),
    /// The in-cluster broker: grants each claim's holder their own desktop's console, forwards,
    /// USB and power, and nothing else.
    #[command(subcommand)]
    Broker(broker_cmd::BrokerCommand),
    /// Print every path that reaches a member (VNC, RDP, SSH), available or why not, and the
    /// command that opens it.
    Connect(connect_cmd::MemberArgs),
    /// Open a member's VNC console in the platform's viewer (or only forward it).
    Vnc(connect_cmd::VncArgs),
    /// Forward local ports on 127.0.0.1 to a member's guest ports.
    PortForward(connect_cmd::PortForwardArgs),
    /// Open RDP to a member (guest port 3389) with FreeRDP, or write an .rdp file.
    Rdp(connect_cmd::RdpArgs),
    /// SSH to a member (guest port 22) through a forward.
    Ssh(connect_cmd::SshArgs),
    /// Keep your claim on a member of a managed pool (on a reclaim notice): renews it and
    /// records the time; refused past the pool's maxSession.
    Keep(connect_cmd::MemberArgs),
    /// Local USB devices, and redirecting one into your desktop.
    #[command(subcommand)]
    Usb(usb_cmd::UsbCommand),
    /// GPUs and host devices: every node's devices and who holds them, or with --from whether
    /// a pool of --size clones of a golden VM fits now. Creates nothing.
    Capacity(capacity_cmd::CapacityArgs),
    /// The audit trail: claims, releases, reclaims, force releases, resizes and resets, from
    /// the namespace's Events.
    #[command(after_help = vdi_core::audit::TTL_NOTICE)]
    Audit(audit_cmd::AuditArgs),
}

#[derive(Subcommand)]
enum PoolCommand {
    /// List pools and their members: state, holder, when claimed, when the Lease ends, power.
    List {
        /// Namespace (default: the context's namespace).
        #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
        namespace: Option<String>,
        /// List pools in all namespaces (needs RBAC to list VirtualMachines cluster-wide).
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// After the list, keep watching and print it again on every change (like kubectl's
        /// --watch), until Ctrl-C; a failing watch is said once and retried.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Create a pool: clone N members of a golden VM, label them, leave them stopped.
    Create(pool_cmd::CreateArgs),
    /// Delete a pool: its DesktopPool, members, their Leases and leftover clone objects.
    Delete(pool_cmd::DeleteArgs),
    /// Make an existing pool managed: a DesktopPool with its golden VM and current size.
    Adopt(policy_cmd::AdoptArgs),
    /// Change a managed pool's policy: warm buffer, timeouts, what a release does.
    Set(policy_cmd::SetArgs),
    /// Change a managed pool's size; the broker clones or removes members.
    Resize(policy_cmd::ResizeArgs),
    /// Let users, groups or service accounts claim from a pool (RBAC: the verb claim on
    /// desktoppools.corral.dev with the pool's name), or with --remove take it back.
    Entitle(entitle_cmd::EntitleArgs),
    /// Who may claim from a pool: every RoleBinding (and ClusterRoleBinding) that grants it.
    Entitlements(entitle_cmd::EntitlementsArgs),
    /// Move a member of a dedicated pool to another owner, or free it (recorded as an Event).
    Owner(policy_cmd::OwnerArgs),
    /// A managed pool's hourly usage over the last 7 days: peak claimed, lowest free, reclaims.
    Usage(usage_cmd::UsageArgs),
}

/// `pool list --watch`: the live view of the app (watches, not polling), printed whole on
/// every change with the API server's time; a failure is printed once per distinct error while
/// the watches retry. Returns on Ctrl-C.
async fn watch_pools(client: kube::Client, scope: Scope, clock: ServerClock, side: ClaimSide) {
    let (_side, side) = tokio::sync::watch::channel(side);
    let feed = vdi_core::watch::PoolFeed::spawn_on(client.clone(), scope.clone(), clock, side);
    let mut rx = feed.subscribe();
    let mut last_error = None;
    // One listener for the whole watch: a fresh `ctrl_c()` per turn would miss a SIGINT that
    // arrives while a snapshot is printed (tokio has taken over the signal by then, so it would
    // be swallowed, not fatal).
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let snapshot = rx.borrow_and_update().clone();
        match &snapshot.status {
            vdi_core::watch::FeedStatus::Syncing => {}
            vdi_core::watch::FeedStatus::Live => {
                last_error = None;
                out!("--- {} (live)", exact_instant(snapshot.judged_at));
                let policies = vdi_core::watch::list_policies(&client, &scope).await;
                print_pools(&snapshot.pools, &policies, &scope, snapshot.judged_at);
            }
            vdi_core::watch::FeedStatus::Failing { error } => {
                if last_error.as_ref() != Some(error) {
                    err!("watch failing (retrying): {}", error.message);
                    if let Some(fix) = &error.suggestion {
                        err!("fix: {fix}");
                    }
                    last_error = Some(error.clone());
                }
            }
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = &mut interrupted => return,
        }
    }
}

fn init_logging() {
    use std::io::IsTerminal;
    // kube's client logs every failed request at ERROR; the CLI reports the error itself.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .init();
}

fn or_dash(value: Option<&str>) -> &str {
    value.filter(|v| !v.is_empty()).unwrap_or("-")
}

/// A member's row; its times as every message gives them, relative to `now` (the API server's
/// time): "2026-12-03 00:47:52 UTC (5m ago)". A claimed-at annotation that is not a valid time
/// is printed as written.
fn member_row(m: &MemberView, now: jiff::Timestamp) -> [String; 6] {
    // A member being removed: its Lease, if any, is the broker's hold, not a claim's end.
    let claim_lease = m
        .lease
        .as_ref()
        .filter(|_| m.state != MemberState::Removing);
    let expires = claim_lease.and_then(|l| {
        let at = describe_instant(l.expires_at?, now);
        // SPEC: a renewTime ahead of the API server's clock is flagged, never trusted quietly.
        let at = if l.renew_time_in_future {
            format!("{at} [renewTime ahead of the server's clock]")
        } else {
            at
        };
        // A managed pool's claim: when and why it is reclaimed, if not at the Lease's end.
        Some(match (m.reclaim_why, m.reclaim_at.as_deref()) {
            (Some(why), Some(reclaim))
                if why != vdi_core::policy::reclaim::ReclaimWhy::Disconnected =>
            {
                let reclaim = reclaim
                    .parse()
                    .map_or_else(|_| reclaim.to_owned(), |t| describe_instant(t, now));
                format!("{at} [reclaim {reclaim}: {}]", why.as_str())
            }
            _ => at,
        })
    });
    let claimed = m.claimed_at.as_deref().filter(|c| !c.is_empty()).map(|c| {
        c.parse()
            .map_or_else(|_| c.to_owned(), |t| describe_instant(t, now))
    });
    let holder = match (&m.holder, &m.label_holder) {
        (Some(lease), Some(label)) if m.state == MemberState::Conflict => {
            format!("{lease} (label: {label})")
        }
        (holder, _) => or_dash(holder.as_deref()).to_owned(),
    };
    // What the state says beyond its label (an unreadable Lease, the broker's reason, a member
    // that goes when released): the core's note, as the app shows it.
    let state = match &m.state_note {
        Some(note) => format!("{}: {note}", m.state_label),
        None => m.state_label.clone(),
    };
    [
        m.name.clone(),
        state,
        holder,
        or_dash(claimed.as_deref()).to_owned(),
        or_dash(expires.as_deref()).to_owned(),
        m.power.clone(),
    ]
}

/// Prints pools the way the seed's walkthrough shows them: a heading per pool, then one
/// aligned row per member, times relative to `now` (the API server's time).
fn print_pools(
    pools: &[PoolView],
    policies: &[vdi_core::policy::DesktopPool],
    scope: &Scope,
    now: jiff::Timestamp,
) {
    if pools.is_empty() {
        match scope {
            Scope::Namespace(ns) => out!("no pools in namespace {ns}"),
            Scope::All => out!("no pools in any namespace you may read"),
        }
        return;
    }
    let header = [
        "MEMBER",
        "STATE",
        "HOLDER",
        "CLAIMED",
        "LEASE-ENDS",
        "POWER",
    ]
    .map(str::to_owned);
    for (i, pool) in pools.iter().enumerate() {
        if i > 0 {
            out!();
        }
        out!(
            "{} (ns/{}, {} {}: {} free, {} claimed)",
            pool.name,
            pool.namespace,
            pool.counts.total,
            if pool.counts.total == 1 {
                "member"
            } else {
                "members"
            },
            pool.counts.free,
            pool.counts.claimed
        );
        let owners: Vec<String> = pool
            .members
            .iter()
            .filter_map(|m| Some(format!("{} {}", m.name, m.owner.as_deref()?)))
            .collect();
        if !owners.is_empty() {
            out!(
                "owners: {}; {} unowned",
                owners.join(", "),
                pool.members.len() - owners.len()
            );
        }
        policy_cmd::print_policy_of(pool, policies);
        if let Some(note) = &pool.resize_note {
            out!("  {note}");
        }
        let rows: Vec<[String; 6]> = std::iter::once(header.clone())
            .chain(pool.members.iter().map(|m| member_row(m, now)))
            .collect();
        terminal::print_table(&rows, "  ");
        for lease in &pool.stray_leases {
            out!(
                "  stray Lease {lease}: labelled for this pool, but not the claim of any of its \
                 members (a claim is the Lease corral-vdi-<member>); not joined, left alone"
            );
        }
    }
}

fn power_text(power: &PowerAction) -> String {
    match power {
        PowerAction::Started => "started".into(),
        PowerAction::AlreadyRunning(why) => format!("no start needed: {why}"),
        PowerAction::Stopped => "stopping".into(),
        PowerAction::AlreadyStopped => "already stopped".into(),
        PowerAction::AlreadyStopping => "already stopping".into(),
        PowerAction::BrokerStarted => "started by the broker".into(),
        PowerAction::BrokerReleases(effect) => format!("the broker acts: {}", effect.words),
        PowerAction::LeftAsIs(why) => format!("left as it is: {why}"),
    }
}

/// Who does the cluster's half of a claim here, read once; without a broker, says on stderr
/// what that means ([`vdi_core::claim::cluster_half::NO_BROKER_NOTICE`]), once per command.
pub(crate) async fn claim_side(client: &kube::Client) -> ClaimSide {
    let status = vdi_core::broker::status(client).await.ok();
    let side = vdi_core::claim::cluster_half::side(status.as_ref());
    if let Some(notice) = broker_badge(status).notice {
        err!("warning: {notice}");
    }
    side
}

/// One stderr line per step of a claim the broker finishes.
fn print_claim_progress(step: ClaimProgress) {
    err!(
        "[{:>6.1}s] {}: {}",
        step.elapsed_ms as f64 / 1000.0,
        step.member,
        step.message
    );
}

/// The namespace to use: `-n` if given (validated later, with every other input), else the
/// context's.
fn namespace_or(given: Option<String>, default: &str) -> String {
    given.unwrap_or_else(|| default.to_owned())
}

/// The global flags as arguments, for a command line this CLI runs itself.
fn global_args(global: &Global) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(path) = &global.kubeconfig {
        args.extend(["--kubeconfig".to_owned(), path.display().to_string()]);
    }
    if let Some(context) = &global.context {
        args.extend(["--context".to_owned(), context.clone()]);
    }
    if let Some(user) = &global.as_user {
        args.extend(["--as".to_owned(), user.clone()]);
    }
    for group in &global.as_groups {
        args.extend(["--as-group".to_owned(), group.clone()]);
    }
    args
}

async fn run(cli: Cli) -> vdi_core::Result<ExitCode> {
    let relaunch = connect_cmd::Relaunch {
        global: global_args(&cli.global),
    };
    let source = KubeconfigSource {
        path: cli.global.kubeconfig,
        impersonate: cli.global.as_user.map(|user| Impersonation {
            user,
            groups: cli.global.as_groups,
        }),
    };
    let context = cli.global.context.as_deref();
    match cli.command {
        Command::Pool(PoolCommand::Create(args)) => {
            pool_cmd::create(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Delete(args)) => {
            pool_cmd::delete(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Adopt(args)) => {
            policy_cmd::run_adopt(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Set(args)) => {
            policy_cmd::run_set(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Resize(args)) => {
            policy_cmd::run_resize(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Entitle(args)) => {
            entitle_cmd::entitle(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Owner(args)) => {
            policy_cmd::run_owner(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Entitlements(args)) => {
            entitle_cmd::list(&source, context, args).await?;
        }
        Command::Pool(PoolCommand::Usage(args)) => usage_cmd::run(&source, context, args).await?,
        Command::Audit(args) => audit_cmd::run(&source, context, args).await?,
        Command::Pool(PoolCommand::List {
            namespace,
            all_namespaces,
            watch,
        }) => {
            let conn = source.connect(context).await?;
            let scope = if all_namespaces {
                Scope::All
            } else {
                Scope::Namespace(namespace_or(namespace, &conn.default_namespace))
            };
            vdi_core::validate::scope(&scope)?;
            let clock = ServerClock::measure(&conn.client).await?;
            let side = claim_side(&conn.client).await;
            if watch {
                watch_pools(conn.client.clone(), scope, clock, side).await;
            } else {
                let pools = list_pools_on(&conn.client, &scope, &clock, side).await?;
                // No pools may mean no such namespace: say that, rather than "no pools".
                if let (true, Scope::Namespace(ns)) = (pools.is_empty(), &scope) {
                    vdi_core::pool::check_namespace(
                        &conn.client,
                        ns,
                        "kubectl get namespaces lists them; pick one with -n, or -A for all",
                    )
                    .await?;
                }
                let policies = vdi_core::watch::list_policies(&conn.client, &scope).await;
                print_pools(&pools, &policies, &scope, clock.now());
            }
        }
        Command::Assign {
            pool,
            user,
            namespace,
            lease_seconds,
            another,
            timeout,
            force,
        } => {
            let conn = source.connect(context).await?;
            let ns = namespace_or(namespace, &conn.default_namespace);
            let options = ClaimOptions {
                lease_seconds,
                another,
                timeout,
                force,
            };
            check_assign(&ns, &pool, &user, &options)?;
            // Who asks first: a refused identity (an impersonation not allowed) is the answer,
            // with no word about the broker read under it.
            let actor = Actor::connect(conn.client.clone()).await?;
            claim_side(&conn.client).await;
            let claimed =
                assign_with_progress(&actor, &ns, &pool, &user, &options, print_claim_progress)
                    .await?;
            let again = if claimed.resumed {
                " (already held: resumed)"
            } else {
                ""
            };
            out!("assigned {} → {}{again}", claimed.member, claimed.identity);
            out!(
                "lease: {} until {}",
                lease_name(&claimed.member),
                describe_instant(claimed.lease_expires_at, actor.clock().now())
            );
            out!("power: {}", power_text(&claimed.power));
            out!("connect: corral-vdi connect {}", claimed.member);
        }
        Command::Unassign {
            member,
            namespace,
            user,
            force,
        } => {
            let conn = source.connect(context).await?;
            let ns = namespace_or(namespace, &conn.default_namespace);
            if let Some(user) = &user {
                vdi_core::validate::identity(user)?;
            }
            check_unassign(&ns, &member)?;
            let actor = Actor::connect(conn.client).await?;
            actor.confirm_user(user.as_deref())?;
            let released = unassign(&actor, &ns, &member, &UnassignOptions { force }).await?;
            match &released.previous_holder {
                Some(holder) => out!("released {} (was {holder})", released.member),
                None if released.lease_released || released.label_removed => {
                    out!("released {} (it had no holder)", released.member);
                }
                None => out!("{} was not assigned: nothing to release", released.member),
            }
            if released.forced {
                out!(
                    "forced: recorded as an Event on VirtualMachine {} (kubectl describe vm -n {ns} {})",
                    released.member,
                    released.member
                );
            }
            out!("power: {}", power_text(&released.power));
        }
        Command::Guard(command) => return guard_cmd::run(&source, context, command).await,
        Command::Broker(command) => return broker_cmd::run(&source, context, command).await,
        Command::Connect(args) => connect_cmd::connect(&source, context, args).await?,
        Command::Vnc(args) => connect_cmd::vnc(&source, context, args).await?,
        Command::PortForward(args) => connect_cmd::port_forward(&source, context, args).await?,
        Command::Rdp(args) => connect_cmd::rdp(&source, context, args).await?,
        Command::Ssh(args) => return connect_cmd::ssh(&source, context, args, relaunch).await,
        Command::Keep(args) => connect_cmd::keep(&source, context, args).await?,
        Command::Usb(command) => usb_cmd::run(&source, context, command).await?,
        Command::Capacity(args) => return capacity_cmd::run(&source, context, args).await,
    }
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            err!("error: {err}");
            if let Some(fix) = err.suggestion() {
                err!("hint: {fix}");
            }
            ExitCode::FAILURE
        }
    }
}
