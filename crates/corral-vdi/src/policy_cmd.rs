//! `pool adopt`, `pool set`, `pool resize` and the policy line of `pool list`: thin adapters
//! over `vdi_core::policy` (SPEC "Pool policy and lifecycle"). Every refusal comes from
//! vdi-core, before anything is written.

use clap::Args;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::managed::change::{PolicyChanges, preview_resize, resize, set};
use vdi_core::managed::ops::{adopt, parse_assignment, parse_on_release};
use vdi_core::policy::{Assignment, DesktopPool, OnRelease, duration};

/// The policy flags of `pool set` and `pool create`.
#[derive(Args, Clone, Default)]
pub struct PolicyArgs {
    /// Free members kept running (0 to the size).
    #[arg(long, value_name = "N", value_parser = crate::numbers::warm, allow_negative_numbers = true)]
    pub warm: Option<u32>,
    /// How long a claim outlives its holder's last session (the Lease's duration): 30m, 1h,
    /// 1h30m; 10s to 168h.
    #[arg(long, value_name = "DURATION", value_parser = policy_duration)]
    pub disconnect_grace: Option<String>,
    /// The longest claim, from when it was taken: 8h; 10s to 8784h, or none (no limit).
    #[arg(long, value_name = "DURATION", value_parser = limit)]
    pub max_session: Option<String>,
    /// How long the desktop may have no logged-in user before its claim is reclaimed: 1h;
    /// 10s to 8784h, or none (never).
    #[arg(long, value_name = "DURATION", value_parser = limit)]
    pub idle_timeout: Option<String>,
    /// What a release does to the member: keep (stop it), restart, or reset (clone it again
    /// from the golden VM).
    #[arg(long, value_name = "WHAT", value_parser = parse_on_release)]
    pub on_release: Option<OnRelease>,
    /// How members are handed out: floating (a released member goes back to the pool) or
    /// dedicated (a user's first claim makes the member theirs; on release keep only).
    #[arg(long, value_name = "HOW", value_parser = parse_assignment)]
    pub assignment: Option<Assignment>,
}

/// A duration text the DesktopPool's spec takes (its bounds are checked with the rest).
fn policy_duration(text: &str) -> Result<String, String> {
    duration::parse(text).map(|_| text.to_owned())
}

/// A duration, or `none`.
fn limit(text: &str) -> Result<String, String> {
    if text == vdi_core::managed::change::NO_LIMIT {
        return Ok(text.to_owned());
    }
    policy_duration(text).map_err(|e| format!("{e}, or none"))
}

impl PolicyArgs {
    /// The changes these flags ask for.
    pub fn changes(&self) -> PolicyChanges {
        PolicyChanges {
            warm: self.warm,
            disconnect_grace: self.disconnect_grace.clone(),
            max_session: self.max_session.clone(),
            idle_timeout: self.idle_timeout.clone(),
            on_release: self.on_release,
            assignment: self.assignment,
        }
    }
}

/// `pool owner <member> --user U | --none [-n ns]`.
#[derive(Args)]
pub struct OwnerArgs {
    /// The member (a VM of a dedicated pool).
    pub member: String,
    /// Its new owner, as the cluster names them (system:serviceaccount:NS:NAME for a service
    /// account).
    #[arg(long, conflicts_with = "none", required_unless_present = "none")]
    pub user: Option<String>,
    /// Free it: nobody's, the next claimant's.
    #[arg(long)]
    pub none: bool,
    /// Namespace (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// Runs `pool owner`.
pub async fn run_owner(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: OwnerArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    let actor = vdi_core::identity::Actor::connect(conn.client.clone()).await?;
    let change =
        vdi_core::managed::owner::set_owner(&actor, &ns, &args.member, args.user.as_deref())
            .await?;
    out!("{}", change.sentence());
    Ok(())
}

/// `pool adopt <pool> [--from <golden>]`.
#[derive(Args)]
pub struct AdoptArgs {
    /// The pool (its members carry corral.dev/vdi-pool=<pool>).
    pub pool: String,
    /// The golden VM its members were cloned from (default: the one they name).
    #[arg(long = "from", value_name = "VM")]
    pub from: Option<String>,
    /// Namespace (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// `pool set <pool> [--warm N] [--disconnect-grace D] …`.
#[derive(Args)]
pub struct SetArgs {
    /// The pool.
    pub pool: String,
    /// Namespace (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// `pool resize <pool> --size N [--warm N]`.
#[derive(Args)]
pub struct ResizeArgs {
    /// The pool.
    pub pool: String,
    /// Members wanted (1 to 500): the broker clones the missing ones, or removes free ones,
    /// highest index first.
    #[arg(long, value_parser = crate::numbers::pool_size, allow_negative_numbers = true)]
    pub size: u32,
    /// Free members kept running, set in the same write (0 to the size).
    #[arg(long, value_name = "N", value_parser = crate::numbers::warm, allow_negative_numbers = true)]
    pub warm: Option<u32>,
    /// Namespace (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// The pool's policy, one line: `size 4, warm 1, disconnect grace 1h, max session 8h, idle
/// timeout none, on release keep`, or the spec's problem.
pub fn policy_text(pool: &DesktopPool) -> String {
    match pool.policy() {
        Ok(p) => {
            let limit = |d: Option<jiff::SignedDuration>| d.map_or("none".into(), duration::format);
            format!(
                "size {}, warm {}, disconnect grace {}, max session {}, idle timeout {}, on release {}, {}",
                p.size,
                p.warm,
                duration::format(p.disconnect_grace),
                limit(p.max_session),
                limit(p.idle_timeout),
                p.on_release.as_str(),
                p.assignment.as_str()
            )
        }
        Err(problem) => format!("unreadable ({problem}): the broker leaves the pool as it is"),
    }
}

/// The broker's counts: `4 members: 2 free, 1 claimed, 1 warm, 0 creating`, or that it has
/// not reported on this spec yet.
pub fn status_text(pool: &DesktopPool) -> String {
    match &pool.status {
        Some(s) => {
            let behind = match (s.observed_generation, pool.metadata.generation) {
                (Some(seen), Some(now)) if seen < now => {
                    " (the broker has not acted on the last change yet)"
                }
                (None, Some(_)) => " (the broker has not acted on it yet)",
                _ => "",
            };
            let members = if s.members == 1 { "member" } else { "members" };
            format!(
                "{} {members}: {} free, {} claimed, {} warm, {} creating{behind}",
                s.members, s.free, s.claimed, s.warm, s.creating
            )
        }
        None => "no status yet (the broker has not acted on it)".into(),
    }
}

/// Prints a DesktopPool as written.
fn print_written(verb: &str, pool: &DesktopPool) {
    out!(
        "pool \"{}\" {verb}: DesktopPool {} in namespace {}",
        pool.metadata.name.as_deref().unwrap_or_default(),
        pool.metadata.name.as_deref().unwrap_or_default(),
        pool.metadata.namespace.as_deref().unwrap_or_default()
    );
    out!("golden VM: {}", pool.spec.golden);
    out!("policy: {}", policy_text(pool));
}

/// Runs `pool adopt`.
pub async fn run_adopt(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: AdoptArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    let made = adopt(&conn.client, &ns, &args.pool, args.from.as_deref()).await?;
    print_written("adopted", &made);
    Ok(())
}

/// Runs `pool set`.
pub async fn run_set(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: SetArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    let written = set(&conn.client, &ns, &args.pool, &args.policy.changes()).await?;
    print_written("updated", &written);
    Ok(())
}

/// Runs `pool resize`.
pub async fn run_resize(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: ResizeArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    // What the broker will do, by its own rule, member by member (one that stays is not named),
    // judged before the write: the broker acts on the new size at once.
    let preview = preview_resize(&conn.client, &ns, &args.pool, args.size).await?;
    let written = resize(&conn.client, &ns, &args.pool, args.size, args.warm).await?;
    print_written("resized", &written);
    for member in &preview.now {
        out!("  removes {member} now");
    }
    for member in &preview.once_released {
        out!("  removes {member} once released");
    }
    for member in &preview.cloned {
        out!("  clones {member}");
    }
    out!("corral-vdi pool list -n {ns} shows the broker's progress");
    Ok(())
}

/// Under a managed pool's heading in `pool list`: its policy and the broker's counts. An
/// unmanaged pool prints nothing more.
pub fn print_policy_of(pool: &vdi_core::state::PoolView, policies: &[DesktopPool]) {
    let found = policies.iter().find(|p| {
        p.metadata.name.as_deref() == Some(pool.name.as_str())
            && p.metadata.namespace.as_deref() == Some(pool.namespace.as_str())
    });
    if let Some(policy) = found {
        out!("  policy: {}", policy_text(policy));
        out!("  broker: {}", status_text(policy));
    }
}
