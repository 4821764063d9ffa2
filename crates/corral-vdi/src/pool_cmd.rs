//! `pool create` and `pool delete`: thin adapters over `vdi_core::pool` (and, with a broker on
//! the cluster, `vdi_core::policy`: create makes the pool's DesktopPool once its members exist;
//! delete removes it before them).
//!
//! Results go to stdout, shaped like the seed's walkthrough (`pool "devpool" created: 3
//! members`, then one member per line); progress goes to stderr, one line per member step.
//! Any refusal or failure is returned as an error, which `main` prints and exits 1 on.
//!
//! Ctrl-C during `pool create` cancels it cleanly: the clones still running are deleted (so
//! none produces an unlabelled VM later) and the error lists the members that exist. A second
//! Ctrl-C quits at once; the next `pool create` then reports the leftover clone objects and
//! `pool delete` removes them.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use vdi_core::claim::cluster_half::side;
use vdi_core::clock::ServerClock;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::error::ErrorKind;
use vdi_core::managed::create;
use vdi_core::pool::{
    CancelHandle, CreateOptions, CreatePool, CreateProgress, CreateStep, DeletePool,
    MemberProgress, delete_pool,
};
use vdi_core::validate::parse_duration;

use crate::policy_cmd::{PolicyArgs, policy_text};

/// `pool create <name> --from <vm> --size N [-n ns] [--timeout 120s] [--allow-running]`.
#[derive(Args)]
pub struct CreateArgs {
    /// Pool name (a DNS-1123 label); members are <name>-1 … <name>-<size>.
    pub name: String,
    /// The golden VM to clone; it must be in the pool's namespace.
    #[arg(long = "from", value_name = "VM")]
    pub from: String,
    /// Number of members (1 to 500).
    #[arg(long, value_parser = crate::numbers::pool_size, allow_negative_numbers = true)]
    pub size: u32,
    /// Namespace of the golden VM and the pool (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How long each member's clone may take to produce its VM: 120s, 5m, 1m30s;
    /// 1 s to 24 h.
    #[arg(long, value_parser = parse_duration, default_value = "120s")]
    pub timeout: Duration,
    /// Clone a golden VM that is not stopped; its disk is then only crash-consistent.
    #[arg(long)]
    pub allow_running: bool,
    /// Clone a golden VM that is itself an unassigned pool member (never an assigned one).
    #[arg(long)]
    pub from_member: bool,
    /// The pool's policy (with a broker on the cluster, the pool gets a DesktopPool).
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Who may claim from the pool: a user (or system:serviceaccount:NS:NAME). May be
    /// repeated. Without --entitle-user or --entitle-group: everyone who may claim in the
    /// namespace.
    #[arg(long = "entitle-user", value_name = "USER")]
    pub entitle_users: Vec<String>,
    /// Who may claim from the pool: a group, as the cluster's authenticator reports it. May
    /// be repeated.
    #[arg(long = "entitle-group", value_name = "GROUP")]
    pub entitle_groups: Vec<String>,
}

/// `pool delete <name> [-n ns] [--force]`.
#[derive(Args)]
pub struct DeleteArgs {
    /// Pool name.
    pub name: String,
    /// Namespace of the pool (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Delete members that are assigned (or being claimed) too.
    #[arg(long)]
    pub force: bool,
    /// A pool with nothing left to delete is a success, not an error (as with kubectl).
    #[arg(long)]
    pub ignore_not_found: bool,
}

fn step_text(p: &MemberProgress) -> String {
    match p.step {
        CreateStep::Queued => "queued".to_owned(),
        CreateStep::CloneCreated => format!("clone {} created", p.clone),
        CreateStep::Cloning => {
            let phase = p.phase.as_deref().unwrap_or("pending");
            match p.message.as_deref() {
                Some(message) => format!("{phase}: {message}"),
                None => phase.to_owned(),
            }
        }
        CreateStep::Labelling => "labelling".to_owned(),
        CreateStep::Done => "done".to_owned(),
        CreateStep::Failed => format!("FAILED: {}", p.error.as_deref().unwrap_or("unknown error")),
    }
}

/// One stderr line per progress event.
fn print_progress(event: CreateProgress) {
    let mut err = std::io::stderr().lock();
    let _ = match event {
        CreateProgress::Started(s) => writeln!(
            err,
            "creating pool \"{}\" in namespace {}: {} member{} from golden VM \"{}\" \
             (VirtualMachineClone clone.kubevirt.io/{})",
            s.pool,
            s.namespace,
            s.members.len(),
            if s.members.len() == 1 { "" } else { "s" },
            s.golden,
            s.clone_api_version
        ),
        CreateProgress::Member(p) => writeln!(
            err,
            "[{:>6.1}s] {}: {}",
            f64::from(p.elapsed_ms) / 1000.0,
            p.member,
            step_text(&p)
        ),
    };
}

/// Stops listening for Ctrl-C when dropped.
struct CtrlC(tokio::task::JoinHandle<()>);

impl Drop for CtrlC {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// First Ctrl-C: cancel cleanly. Second: quit at once (exit status 130, as for SIGINT).
async fn cancel_on_ctrl_c(cancel: CancelHandle) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    err!(
        "cancelling: deleting this run's unfinished clones (press Ctrl-C again to quit at once \
         and leave them)"
    );
    cancel.cancel();
    if tokio::signal::ctrl_c().await.is_ok() {
        std::process::exit(130);
    }
}

/// Runs `pool create`.
pub async fn create(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: CreateArgs,
) -> vdi_core::Result<()> {
    let who = crate::entitle_cmd::who(&args.entitle_users, &args.entitle_groups, false)?;
    let conn = source.connect(context).await?;
    let cancel = CancelHandle::new();
    let _ctrl_c = CtrlC(tokio::spawn(cancel_on_ctrl_c(cancel.clone())));
    let request = CreatePool {
        namespace: args.namespace.unwrap_or(conn.default_namespace.clone()),
        name: args.name,
        golden: args.from,
        size: args.size,
        options: CreateOptions {
            timeout: args.timeout,
            allow_running: args.allow_running,
            allow_member: args.from_member,
            cancel: Some(cancel),
            ..CreateOptions::default()
        },
    };
    // With a broker the pool is managed: the broker's status decides, read once.
    let broker = vdi_core::broker::status(&conn.client).await?;
    let created = create::create(
        &conn.client,
        &request,
        &args.policy.changes(),
        &who,
        side(Some(&broker)),
        print_progress,
    )
    .await?;
    let policy = created.policy;
    let created = created.pool;
    for warning in &created.warnings {
        err!("warning: {warning}");
    }
    out!(
        "pool \"{}\" created: {} member{}",
        created.name,
        created.members.len(),
        if created.members.len() == 1 { "" } else { "s" }
    );
    for member in &created.members {
        out!("{member}");
    }
    for line in &created.entitled {
        out!("{line}");
    }
    if let Some(policy) = policy {
        out!(
            "policy (DesktopPool {}): {}",
            created.name,
            policy_text(&policy)
        );
    }
    Ok(())
}

/// Runs `pool delete`.
pub async fn delete(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: DeleteArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let request = DeletePool {
        namespace: args.namespace.unwrap_or(conn.default_namespace.clone()),
        name: args.name,
        force: args.force,
    };
    let clock = ServerClock::measure(&conn.client).await?;
    let deleted = delete_pool(&conn.client, &request, &clock).await?;
    if deleted.is_empty() {
        if args.ignore_not_found {
            out!(
                "pool \"{}\" in namespace {}: nothing to delete",
                deleted.name,
                deleted.namespace
            );
            print_left_alone(&deleted.left_alone);
            return Ok(());
        }
        let left_alone = if deleted.left_alone.is_empty() {
            String::new()
        } else {
            format!("; not ours, left alone: {}", deleted.left_alone.join("; "))
        };
        return Err(vdi_core::Error::rejected(
            ErrorKind::NotFound,
            format!(
                "pool \"{}\" not found in namespace \"{}\": no member, Lease or clone object of it exists{left_alone}",
                deleted.name, deleted.namespace
            ),
            format!(
                "check the name and the namespace (corral-vdi pool list -n {}); pass \
                 --ignore-not-found to make a pool that is already gone a success",
                deleted.namespace
            ),
        ));
    }
    out!(
        "pool \"{}\" deleted: {} member{}",
        deleted.name,
        deleted.members.len(),
        if deleted.members.len() == 1 { "" } else { "s" }
    );
    for member in &deleted.members {
        out!("{member}");
    }
    if !deleted.leases.is_empty() {
        out!("leases removed: {}", deleted.leases.join(", "));
    }
    if !deleted.clones.is_empty() {
        out!(
            "leftover clone objects removed: {}",
            deleted.clones.join(", ")
        );
    }
    if !deleted.unlabelled.is_empty() {
        out!(
            "VMs made by this pool's clone objects but never labelled, removed: {}",
            deleted.unlabelled.join(", ")
        );
    }
    if !deleted.forced.is_empty() {
        err!(
            "note: deleted while assigned (--force): {}",
            deleted.forced.join(", ")
        );
    }
    print_left_alone(&deleted.left_alone);
    Ok(())
}

/// What claimed to belong to the pool but was not proven ours: one line each, on stdout with
/// the rest of the result.
fn print_left_alone(left_alone: &[String]) {
    if !left_alone.is_empty() {
        out!("not ours, left alone:");
        for item in left_alone {
            out!("  {item}");
        }
    }
}
