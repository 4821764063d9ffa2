//! `corral-vdi audit`: the trail of claims, releases, reclaims, force releases, resizes and
//! resets (SPEC "Audit"), read from the namespace's Events by `vdi_core::audit::list`, as a
//! table (the default), JSON or CSV. The table and the help say how long Events are kept
//! ([`TTL_NOTICE`], the help through `main`'s `after_help`); with JSON or CSV the notice goes
//! to stderr, so the output parses.

use clap::{Args, ValueEnum};
use vdi_core::audit::{AuditEntry, AuditFilter, TTL_NOTICE, list};
use vdi_core::clock::{ServerClock, exact_instant};
use vdi_core::cluster::KubeconfigSource;
use vdi_core::validate::parse_duration;

use crate::terminal::json_safe;

/// The CSV columns, in order.
pub const CSV_COLUMNS: [&str; 8] = [
    "time", "reason", "user", "by", "member", "pool", "why", "message",
];

/// How `audit` prints.
#[derive(Clone, Copy, ValueEnum)]
pub enum Output {
    /// Aligned columns, then the notice about the event TTL.
    Table,
    /// A JSON array of entries (every field).
    Json,
    /// CSV with a header: time (RFC 3339 UTC), reason, user, by, member, pool, why, message.
    Csv,
}

/// `audit [--pool P] [--member M] [--since 24h] [-o table|json|csv] [-n ns]`.
#[derive(Args)]
pub struct AuditArgs {
    /// Only this pool's acts.
    #[arg(long)]
    pub pool: Option<String>,
    /// Only this member's acts.
    #[arg(long)]
    pub member: Option<String>,
    /// Only acts within this long before now (the API server's time): 24h, 90m, 1h30m.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub since: Option<std::time::Duration>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Namespace (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// Runs `audit`.
pub async fn run(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: AuditArgs,
) -> vdi_core::Result<()> {
    let conn = source.connect(context).await?;
    let ns = args.namespace.unwrap_or(conn.default_namespace.clone());
    let since = match args.since {
        Some(back) => {
            let clock = ServerClock::measure(&conn.client).await?;
            // Further back than the calendar goes: everything.
            jiff::SignedDuration::try_from(back)
                .ok()
                .and_then(|back| clock.now().checked_sub(back).ok())
        }
        None => None,
    };
    let filter = AuditFilter {
        pool: args.pool,
        member: args.member,
        since,
    };
    let entries = list(&conn.client, &ns, &filter).await?;
    match args.output {
        Output::Table => print_table(&entries, &ns),
        Output::Json => {
            err!("note: {TTL_NOTICE}");
            let json = serde_json::to_string_pretty(&entries).unwrap_or_else(|_| "[]".into());
            out!("{}", json_safe(&json));
        }
        Output::Csv => {
            err!("note: {TTL_NOTICE}");
            out!("{}", csv_text(&entries).trim_end());
        }
    }
    Ok(())
}

fn or_dash(value: Option<&str>) -> String {
    value.filter(|v| !v.is_empty()).unwrap_or("-").to_owned()
}

/// The table, or a line saying there is nothing; the notice last.
fn print_table(entries: &[AuditEntry], ns: &str) {
    if entries.is_empty() {
        out!("no audit events in namespace {ns} for this filter");
    } else {
        let header = [
            "TIME", "REASON", "USER", "BY", "MEMBER", "POOL", "WHY", "MESSAGE",
        ]
        .map(str::to_owned);
        let rows: Vec<[String; 8]> = std::iter::once(header)
            .chain(entries.iter().map(|e| {
                [
                    exact_instant(e.time),
                    if e.count > 1 {
                        format!("{} (x{})", e.reason, e.count)
                    } else {
                        e.reason.clone()
                    },
                    or_dash(e.user.as_deref()),
                    or_dash(e.by.as_deref()),
                    or_dash(e.member.as_deref()),
                    e.pool.clone(),
                    or_dash(e.why.as_deref()),
                    e.message.clone(),
                ]
            }))
            .collect();
        crate::terminal::print_table(&rows, "");
    }
    out!();
    out!("{TTL_NOTICE}");
}

/// The entries as CSV ([`CSV_COLUMNS`], one record a line; [`crate::terminal::csv`]).
fn csv_text(entries: &[AuditEntry]) -> String {
    let mut rows = vec![CSV_COLUMNS.map(str::to_owned)];
    rows.extend(entries.iter().map(|e| {
        [
            e.time.to_string(),
            e.reason.clone(),
            e.user.clone().unwrap_or_default(),
            e.by.clone().unwrap_or_default(),
            e.member.clone().unwrap_or_default(),
            e.pool.clone(),
            e.why.clone().unwrap_or_default(),
            e.message.clone(),
        ]
    }));
    crate::terminal::csv(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(message: &str) -> AuditEntry {
        AuditEntry {
            time: "2026-12-04T10:00:00Z".parse().unwrap(),
            namespace: "ns".into(),
            reason: "Reclaimed".into(),
            action: None,
            warning: false,
            user: Some("alice, \"the\" admin".into()),
            by: None,
            who: "alice, \"the\" admin".into(),
            member: Some("lab-1".into()),
            pool: "lab".into(),
            why: Some("idle".into()),
            message: message.into(),
            count: 1,
            reporter: "corral-vdi-broker".into(),
        }
    }

    #[test]
    fn csv_quotes_and_keeps_one_record_a_line() {
        let text = csv_text(&[entry("line one\nline two, \u{202e}")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert_eq!(
            lines[1],
            "2026-12-04T10:00:00Z,Reclaimed,\"alice, \"\"the\"\" admin\",,lab-1,lab,idle,\
             \"line one\\u{a}line two, \\u{202e}\""
        );
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn json_escapes_what_a_terminal_would_act_on_and_stays_json() {
        let json = serde_json::to_string(&[entry("x\u{202e}\u{9b}y")]).unwrap();
        let safe = json_safe(&json);
        assert!(!safe.contains('\u{202e}'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back[0]["message"], "x\u{202e}\u{9b}y");
    }
}
