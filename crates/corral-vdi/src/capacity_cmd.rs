//! `corral-vdi capacity`: GPUs and host devices, a thin adapter over `vdi_core::capacity`.
//!
//! With `--from <golden>`: the per-node table for a pool of `--size` clones of that VM (node,
//! resource, class, allocatable, held, free, needed, fits), and whether `pool create` would
//! admit it ("fits 3 of the 4 you ask for"); exit status 1 when it would not. Without: every
//! node's devices and who holds them (VM and pool). Creates nothing either way.

use std::process::ExitCode;

use clap::Args;
use vdi_core::capacity::{cluster_capacity, cluster_table, plan_table};
use vdi_core::cluster::KubeconfigSource;
use vdi_core::pool::capacity_preview;

/// `capacity [--from <golden> [--size N] [-n NAMESPACE]]`.
#[derive(Args)]
pub struct CapacityArgs {
    /// A golden VM: show whether a pool of --size clones of it fits now (exit status 1 when it
    /// does not). Without it, every node's devices and who holds them.
    #[arg(long = "from", value_name = "VM")]
    pub from: Option<String>,
    /// How many clones of the golden VM (1 to 500).
    #[arg(long, default_value_t = 1, requires = "from", value_parser = crate::numbers::pool_size, allow_negative_numbers = true)]
    pub size: u32,
    /// Namespace of the golden VM (default: the context's namespace).
    #[arg(short = 'n', long, requires = "from")]
    pub namespace: Option<String>,
}

/// Runs `capacity`; the exit status says whether the pool fits (with `--from`).
pub async fn run(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: CapacityArgs,
) -> vdi_core::Result<ExitCode> {
    let conn = source.connect(context).await?;
    let Some(golden) = args.from else {
        let view = cluster_capacity(&conn.client).await?;
        out!("devices per node, and who holds them (VM, pool):");
        crate::terminal::write_out(format_args!("{}", cluster_table(&view)));
        return Ok(ExitCode::SUCCESS);
    };
    let namespace = args.namespace.unwrap_or(conn.default_namespace.clone());
    let plan = capacity_preview(&conn.client, &namespace, &golden, args.size).await?;
    if plan.needs.is_empty() {
        out!(
            "golden VM \"{golden}\" (ns/{namespace}) asks for no GPU or host device: a pool of \
             any size passes capacity admission without a check"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let needs: Vec<String> = plan
        .needs
        .iter()
        .map(|n| {
            format!(
                "{} {} ({}: {})",
                n.per_vm,
                n.resource,
                n.class.label(),
                n.entries.join(", ")
            )
        })
        .collect();
    out!(
        "golden VM \"{golden}\" (ns/{namespace}): each VM needs {}, all on one node; a pool of \
         {} needs {}",
        needs.join(" and "),
        plan.size,
        plan.needs
            .iter()
            .map(|n| format!("{} {}", n.per_vm.saturating_mul(plan.size), n.resource))
            .collect::<Vec<_>>()
            .join(" and ")
    );
    crate::terminal::write_out(format_args!("{}", plan_table(&plan)));
    out!("{}", plan.words.verdict);
    for note in &plan.notes {
        out!("note: {note}");
    }
    out!("{}", plan.words.caveat);
    Ok(if plan.admitted {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
