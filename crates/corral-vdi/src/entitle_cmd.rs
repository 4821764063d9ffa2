//! `pool entitle` and `pool entitlements`: who may claim from which pool (SPEC "Entitlements"),
//! thin adapters over `vdi_core::entitlement`.

use clap::Args;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::entitlement::{self, Reach, Who, WhoInput};

/// How `pool entitlements` prints.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns: who, how far, the binding, who granted it.
    Table,
    /// A JSON array of entitlements (every field).
    Json,
}

/// Whom a pool is for, as flags (`pool entitle`, and `pool create`'s `--entitle-*`).
#[derive(Args, Default)]
pub struct WhoArgs {
    /// A user, as the cluster names them; `system:serviceaccount:NS:NAME` names a service
    /// account. May be repeated.
    #[arg(long = "user")]
    pub users: Vec<String>,
    /// A group, as the cluster's authenticator reports it (an identity provider's group). May
    /// be repeated.
    #[arg(long = "group")]
    pub groups: Vec<String>,
    /// Everyone who may claim in the namespace (the group system:authenticated, by the pool's
    /// name).
    #[arg(long)]
    pub everyone: bool,
}

impl WhoArgs {
    /// Whom they name, each checked.
    ///
    /// Errors: [`vdi_core::Error::Invalid`] naming a bad user or group.
    pub fn parse(&self) -> vdi_core::Result<Vec<Who>> {
        who(&self.users, &self.groups, self.everyone)
    }
}

/// Users, groups and maybe everyone, each checked.
///
/// Errors: [`vdi_core::Error::Invalid`] naming a bad user or group.
pub fn who(users: &[String], groups: &[String], everyone: bool) -> vdi_core::Result<Vec<Who>> {
    let users = users
        .iter()
        .map(|name| WhoInput::User { name: name.clone() });
    let groups = groups
        .iter()
        .map(|name| WhoInput::Group { name: name.clone() });
    users
        .chain(groups)
        .chain(everyone.then_some(WhoInput::Everyone))
        .map(|w| w.parse())
        .collect()
}

/// `pool entitle <pool> --user U | --group G | --everyone [--remove] [-n ns]`.
#[derive(Args)]
pub struct EntitleArgs {
    /// The pool (it need not have a DesktopPool: RBAC names need no object).
    pub pool: String,
    /// Whom.
    #[command(flatten)]
    pub who: WhoArgs,
    /// Take the grants back instead (claims running go on; the next claim is refused).
    #[arg(long)]
    pub remove: bool,
    /// Namespace of the pool (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// `pool entitlements <pool> [-n ns] [-o table|json]`.
#[derive(Args)]
pub struct EntitlementsArgs {
    /// The pool.
    pub pool: String,
    /// Namespace of the pool (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Runs `pool entitle`.
pub async fn entitle(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: EntitleArgs,
) -> vdi_core::Result<()> {
    let who = args.who.parse()?;
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    let said = if args.remove {
        entitlement::unentitle(&conn.client, &ns, &args.pool, &who).await?
    } else {
        let me = vdi_core::identity::whoami(&conn.client).await?;
        entitlement::entitle(&conn.client, &ns, &args.pool, &who, &me.username).await?
    };
    for line in said {
        out!("{line}");
    }
    Ok(())
}

fn reach_words(reach: Reach) -> &'static str {
    match reach {
        Reach::Pool => "this pool",
        Reach::Namespace => "every pool of the namespace",
        Reach::Cluster => "every pool of the cluster",
    }
}

/// Runs `pool entitlements`.
pub async fn list(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: EntitlementsArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    let (found, complete) = entitlement::list(&conn.client, &ns, &args.pool).await?;
    match args.output {
        Output::Json => {
            let text = serde_json::to_string_pretty(&found)
                .map_err(|e| vdi_core::Error::Config(format!("entitlements as JSON: {e}")))?;
            out!("{text}");
        }
        Output::Table => {
            if found.is_empty() {
                err!(
                    "nobody may claim from pool \"{}\" in namespace \"{ns}\" (administrators \
                     assign it); corral-vdi pool entitle {} --user U | --group G | --everyone -n \
                     {ns} opens it",
                    args.pool,
                    args.pool
                );
            } else {
                let header = ["WHO", "REACH", "VIA", "GRANTED BY"].map(str::to_owned);
                let rows: Vec<[String; 4]> = std::iter::once(header)
                    .chain(found.iter().map(|e| {
                        [
                            e.who.clone(),
                            reach_words(e.reach).to_owned(),
                            e.via.clone(),
                            e.granted_by.clone().unwrap_or_else(|| "-".into()),
                        ]
                    }))
                    .collect();
                crate::terminal::print_table(&rows, "");
            }
        }
    }
    if !complete {
        err!(
            "note: you may not read ClusterRoleBindings, so grants made cluster-wide are not \
             listed"
        );
    }
    Ok(())
}
