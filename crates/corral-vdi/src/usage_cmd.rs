//! `pool usage <pool> [-n ns] [-o table|csv|json]`: a managed pool's hourly usage history as the
//! broker keeps it in its DesktopPool's status (`vdi_core::policy::usage`): per hour, the most
//! members claimed at once, the fewest free at once, and the claims reclaimed, by why.

use clap::Args;
use vdi_core::cluster::KubeconfigSource;
use vdi_core::managed::ops;
use vdi_core::policy::usage::UsageBucket;

/// How `pool usage` prints.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns, oldest hour first.
    Table,
    /// CSV (RFC 4180): hour,peak_claimed,lowest_free,reclaims (`why=n;why=n`).
    Csv,
    /// The buckets as JSON (every field).
    Json,
}

/// `pool usage <pool> [-n ns] [-o table|csv|json]`.
#[derive(Args)]
pub struct UsageArgs {
    /// The managed pool.
    pub pool: String,
    /// Namespace of the pool (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// The CSV columns.
const CSV_COLUMNS: [&str; 4] = ["hour", "peak_claimed", "lowest_free", "reclaims"];

/// A bucket's reclaims as one cell: `disconnected=2;expired=1`, `-` for none.
fn reclaims(bucket: &UsageBucket) -> String {
    if bucket.reclaims.is_empty() {
        return "-".to_owned();
    }
    bucket
        .reclaims
        .iter()
        .map(|(why, n)| format!("{why}={n}"))
        .collect::<Vec<_>>()
        .join(";")
}

fn rows(usage: &[UsageBucket]) -> Vec<[String; 4]> {
    usage
        .iter()
        .map(|b| {
            [
                b.hour.clone(),
                b.peak_claimed.to_string(),
                b.lowest_free.to_string(),
                reclaims(b),
            ]
        })
        .collect()
}

/// The buckets as CSV, a header first.
fn csv_text(usage: &[UsageBucket]) -> String {
    let mut table = vec![CSV_COLUMNS.map(str::to_owned)];
    table.extend(rows(usage));
    crate::terminal::csv(&table)
}

/// Runs `pool usage`.
///
/// Errors: a bad name (no request); the pool has no DesktopPool (it keeps no history: adopt
/// it); the request failed.
pub async fn run(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: UsageArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    vdi_core::validate::namespace(&ns)?;
    vdi_core::validate::pool_name(&args.pool)?;
    let Some(pool) = ops::get(&conn.client, &ns, &args.pool).await? else {
        return Err(vdi_core::Error::Refused {
            message: format!(
                "pool \"{}\" in namespace \"{ns}\" has no DesktopPool, so the broker keeps no \
                 usage history for it",
                args.pool
            ),
            suggestion: Some(format!(
                "adopt it (corral-vdi pool adopt {} -n {ns}); its history starts then",
                args.pool
            )),
        });
    };
    let usage = pool.status.map(|s| s.usage).unwrap_or_default();
    match args.output {
        Output::Json => {
            let text = serde_json::to_string_pretty(&usage)
                .map_err(|e| vdi_core::Error::Config(format!("usage as JSON: {e}")))?;
            out!("{}", crate::terminal::json_safe(&text));
        }
        Output::Csv => out!("{}", csv_text(&usage).trim_end()),
        Output::Table if usage.is_empty() => err!(
            "pool \"{}\" has no usage recorded yet: the broker records it as it looks at the pool \
             (every 15 s)",
            args.pool
        ),
        Output::Table => {
            let header = ["HOUR", "PEAK CLAIMED", "LOWEST FREE", "RECLAIMS"].map(str::to_owned);
            let table: Vec<[String; 4]> = std::iter::once(header).chain(rows(&usage)).collect();
            crate::terminal::print_table(&table, "");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_a_header_and_one_line_an_hour() {
        let bucket = UsageBucket {
            hour: "2026-12-07T09:00:00Z".into(),
            peak_claimed: 3,
            lowest_free: 0,
            reclaims: [("expired".to_owned(), 1), ("idle".to_owned(), 2)].into(),
        };
        assert_eq!(
            csv_text(&[bucket]),
            "hour,peak_claimed,lowest_free,reclaims\n2026-12-07T09:00:00Z,3,0,expired=1;idle=2\n"
        );
    }
}
