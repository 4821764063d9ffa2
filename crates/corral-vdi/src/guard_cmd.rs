//! `guard install | status | uninstall`: thin adapters over `vdi_core::guard`.

use clap::Subcommand;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::guard::{self, GuardStatus};

/// The guard's subcommands.
#[derive(Subcommand)]
pub enum GuardCommand {
    /// Install (or update) the guard's admission policies (needs cluster-admin rights).
    Install,
    /// Say whether the cluster has the guard, and how it differs from this version's (exit
    /// status 1 unless it is installed as this version ships it).
    Status,
    /// Remove the guard's admission policies.
    Uninstall,
}

fn print_status(status: &GuardStatus) {
    out!("{}", status.summary);
    for object in &status.objects {
        let state = match (object.present, object.current) {
            (false, _) => "missing",
            (true, true) => "current",
            (true, false) => "differs (see above)",
        };
        out!("  {:<34} {:<42} {state}", object.kind, object.name);
    }
}

/// Runs a guard subcommand.
pub async fn run(
    source: &KubeconfigSource,
    context: Option<&str>,
    command: GuardCommand,
) -> vdi_core::Result<std::process::ExitCode> {
    let conn = source.connect(context).await?;
    match command {
        GuardCommand::Install => {
            let status = guard::install(&conn.client).await?;
            print_status(&status);
        }
        GuardCommand::Status => {
            let status = guard::status(&conn.client).await?;
            print_status(&status);
            // A script that watches the guard must see a guard that differs from this
            // version's, or is missing, without reading the words.
            if status.state != guard::GuardState::Installed {
                return Ok(std::process::ExitCode::FAILURE);
            }
        }
        GuardCommand::Uninstall => {
            let deleted = guard::uninstall(&conn.client).await?;
            if deleted.is_empty() {
                out!("the Corral VDI guard was not installed: nothing to remove");
            } else {
                out!("removed the Corral VDI guard: {}", deleted.join(", "));
            }
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}
