//! `broker install | status | uninstall`: thin adapters over `vdi_core::broker`.

use clap::Subcommand;
use kube::ResourceExt;
use vdi_core::broker::claimants::{self, Claimant};
use vdi_core::broker::namespaces;
use vdi_core::broker::{self, BrokerState, BrokerStatus, ManifestStatus};
use vdi_core::clock::{ServerClock, describe_instant};
use vdi_core::cluster::KubeconfigSource;
use vdi_core::manifests::Verdict;

/// The broker's subcommands.
#[derive(Subcommand)]
pub enum BrokerCommand {
    /// Install (or update) the in-cluster broker: the guard (whose claim rules its grants rest
    /// on), its namespace, ServiceAccount, RBAC, its admission policy and the Deployment of two
    /// replicas (needs cluster-admin rights). Then `broker allow` says who may claim where.
    Install {
        /// A namespace that holds desktops, where the broker may then act (its RoleBinding
        /// corral-vdi:broker; it writes nowhere else). May be repeated; `broker allow` and pool
        /// create add theirs too.
        #[arg(short = 'n', long = "namespace")]
        namespaces: Vec<String>,
        /// The broker's image, for a private registry or a pinned digest
        /// (`registry.example.com/vdi/corral-vdi-broker:0.1.0`, `…@sha256:…`); default: this
        /// version's published image.
        #[arg(long)]
        image: Option<String>,
        /// Print the objects as YAML documents (as broker/chart renders them), write nothing:
        /// for review, GitOps or `kubectl apply -f -`.
        #[arg(long)]
        print: bool,
    },
    /// Say whether a broker runs: the leader, each replica's last heartbeat, the last reconcile,
    /// whether it grants (it grants nothing while the guard is missing), and (for
    /// administrators) how its objects differ from this version's. Exit status 1 unless a
    /// replica leads and grants and the objects, where readable, are as this version ships
    /// them.
    Status,
    /// Let users, groups or service accounts claim desktops in a namespace: writes the
    /// claimant Role corral-vdi:desktop-user there and adds them to its RoleBinding (the only
    /// way claimants get Lease rights: per namespace, never cluster-wide).
    Allow(Claimants),
    /// Take users, groups or service accounts off a namespace's claimants (their claims go on
    /// until released; new claims are refused).
    Disallow(Claimants),
    /// Remove the broker and every grant it made (asks first).
    Uninstall {
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
}

/// Who `broker allow | disallow` names, and where.
#[derive(clap::Args)]
pub struct Claimants {
    /// The namespace that holds the desktops (default: the context's namespace).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// A user, as the cluster names them; `system:serviceaccount:NS:NAME` names a service
    /// account. May be repeated.
    #[arg(long = "user")]
    users: Vec<String>,
    /// A group, as the cluster's authenticator reports it (an identity provider's group). May
    /// be repeated.
    #[arg(long = "group")]
    groups: Vec<String>,
}

impl Claimants {
    /// The claimants named, each checked.
    fn parse(&self) -> vdi_core::Result<Vec<Claimant>> {
        let users = self.users.iter().map(|u| Claimant::user(u));
        let groups = self.groups.iter().map(|g| Claimant::group(g));
        users.chain(groups).collect()
    }
}

/// The state in words, for the first line of `broker status`.
fn state_words(state: BrokerState) -> &'static str {
    match state {
        BrokerState::Running => "running",
        BrokerState::NoLeader => "installed, no leader",
        BrokerState::Absent => "absent",
        BrokerState::Unknown => "unknown",
    }
}

fn print_status(status: &BrokerStatus, clock: &ServerClock) {
    let now = clock.now();
    out!("broker: {}", state_words(status.state));
    out!("{}", status.summary);
    if let Some(leader) = &status.leader {
        out!("  leader          {leader}");
    }
    let mut rows = vec![[
        "REPLICA".to_owned(),
        "LAST HEARTBEAT".to_owned(),
        "ROLE".to_owned(),
        "NOT READY".to_owned(),
    ]];
    rows.extend(status.replicas.iter().map(|r| {
        let age = now.duration_since(r.last_seen).as_secs().max(0);
        [
            r.identity.clone(),
            format!("{age}s ago"),
            if r.leader { "leader" } else { "standby" }.to_owned(),
            r.unready.clone().unwrap_or_else(|| "-".to_owned()),
        ]
    }));
    if rows.len() > 1 {
        crate::terminal::print_table(&rows, "  ");
    }
    if let Some(at) = status.last_reconcile {
        out!("  last reconcile  {}", describe_instant(at, now));
    }
}

fn print_manifests(manifests: &ManifestStatus) {
    out!("{}", manifests.summary);
    let rows: Vec<[String; 3]> = manifests
        .objects
        .iter()
        .map(|o| {
            let state = match (o.present, o.current) {
                (false, _) => "missing",
                (true, true) => "current",
                (true, false) => "differs (see above)",
            };
            [o.kind.clone(), o.name.clone(), state.to_owned()]
        })
        .collect();
    crate::terminal::print_table(&rows, "  ");
}

/// Runs a broker subcommand.
pub async fn run(
    source: &KubeconfigSource,
    context: Option<&str>,
    command: BrokerCommand,
) -> vdi_core::Result<std::process::ExitCode> {
    // Printing needs no cluster.
    if let BrokerCommand::Install {
        namespaces,
        image,
        print: true,
    } = &command
    {
        for obj in broker::install_objects(image.as_deref(), namespaces)? {
            let yaml = serde_yaml::to_string(&obj)
                .map_err(|e| vdi_core::Error::Config(format!("print {}: {e}", obj.name_any())))?;
            out!("---\n{}", yaml.trim_end());
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let conn = source.connect(context).await?;
    match command {
        BrokerCommand::Install {
            namespaces, image, ..
        } => {
            for ns in &namespaces {
                vdi_core::validate::namespace(ns)?;
            }
            for done in broker::install(&conn.client, image.as_deref()).await? {
                out!("{done}");
            }
            for ns in &namespaces {
                out!("{}", namespaces::serve(&conn.client, ns).await?);
            }
            out!(
                "installed the Corral VDI broker: its replicas elect a leader once their pods \
                 run (`corral-vdi broker status`)"
            );
        }
        BrokerCommand::Status => {
            let status = broker::status(&conn.client).await?;
            let clock = ServerClock::measure(&conn.client).await?;
            print_status(&status, &clock);
            // The claim rules the broker's grants rest on (it grants nothing without them).
            let guard = vdi_core::guard::status(&conn.client).await?;
            if guard.state != vdi_core::guard::GuardState::Installed {
                out!("guard: {}", guard.summary);
            }
            let manifests = broker::manifest_status(&conn.client).await?;
            // Ordinary users may not read the broker's objects: only administrators see them.
            if manifests.verdict.is_some() {
                print_manifests(&manifests);
            }
            // Where it acts, and where desktops are that it cannot reach (administrators only
            // may list them).
            let served = namespaces::served(&conn.client).await?;
            if let Some(served) = &served {
                let list = if served.is_empty() {
                    "none (`corral-vdi broker install --namespace NS`)".to_owned()
                } else {
                    served.join(", ")
                };
                out!("  acts in         {list}");
            }
            let unserved = match &served {
                Some(served) => namespaces::unserved(&conn.client, served).await?,
                None => None,
            };
            // Lease writes given to people cluster-wide (administrators only may list them).
            let wide = claimants::cluster_wide_lease_writers(&conn.client).await?;
            for warning in wide.iter().chain(unserved.iter()).flatten() {
                out!("warning: {warning}");
            }
            // A script that watches the broker sees one that does not lead, or whose objects
            // differ from this version's, without reading the words.
            let objects_ok = manifests.verdict.is_none_or(|v| v == Verdict::Installed);
            if status.state != BrokerState::Running || status.refusing.is_some() || !objects_ok {
                return Ok(std::process::ExitCode::FAILURE);
            }
        }
        BrokerCommand::Allow(named) => {
            let who = named.parse()?;
            let ns = named.namespace.unwrap_or(conn.default_namespace.clone());
            for done in claimants::allow(&conn.client, &ns, &who).await? {
                out!("{done}");
            }
        }
        BrokerCommand::Disallow(named) => {
            let who = named.parse()?;
            let ns = named.namespace.unwrap_or(conn.default_namespace.clone());
            for done in claimants::disallow(&conn.client, &ns, &who).await? {
                out!("{done}");
            }
        }
        BrokerCommand::Uninstall { yes } => {
            if !yes
                && !crate::terminal::ask_yes(
                    "Removing the Corral VDI broker: every desktop's holder loses the access it \
                     grants, and without a broker anyone who may claim can open any desktop's \
                     console.\nRemove it? [y/N] ",
                )
            {
                return Err(vdi_core::Error::invalid(
                    "the broker was not removed: the question was not answered y",
                    "answer y to remove it, or pass --yes",
                ));
            }
            let deleted = broker::uninstall(&conn.client).await?;
            if deleted.is_empty() {
                out!("the Corral VDI broker was not installed: nothing to remove");
            } else {
                out!("removed the Corral VDI broker: {}", deleted.join(", "));
            }
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}
