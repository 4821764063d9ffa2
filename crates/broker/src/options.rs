//! The broker's command line: `corral-vdi-broker [--identity ID] [--lease-seconds 15]
//! [--reclaim-margin-seconds 30] [--bind-address 0.0.0.0] [--metrics-port 8080]
//! [--health-port 8081] [--stall-seconds 30]`.
//!
//! A bad value is refused by clap before anything touches the cluster, with a sentence naming
//! the flag and exit code 2 (clap's usage-error code).

use std::time::Duration;

use clap::Parser;
use vdi_core::names::{BROKER_NAME, BROKER_REPLICA_ANNOTATION_PREFIX, is_valid_label_value};

/// The parsed command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "corral-vdi-broker",
    version,
    about = "Corral VDI's in-cluster broker: grants each claim's holder their own desktop, \
             does the cluster's half of a claim, reclaims expired claims (leader-elected)"
)]
pub struct Options {
    /// This replica's name in the leader election and its heartbeat annotation
    /// (`replica.corral.dev/<identity>`): a label value (letters, digits, `-`, `_`, `.`, at most
    /// 63 characters). Default: $POD_NAME, else the host name.
    #[arg(long, env = "POD_NAME", value_parser = parse_identity)]
    pub identity: Option<String>,
    /// Duration of the leader-election Lease, in seconds (3..=300): a replica that stops renewing
    /// is replaced within this time. The leader renews a third of it before expiry.
    #[arg(long, default_value_t = 15, allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(3..=300))]
    pub lease_seconds: u64,
    /// How long past a claim Lease's expiry (renewTime + leaseDurationSeconds, by the API
    /// server's clock) the broker waits before it reclaims the member, in seconds (0..=86400):
    /// the clock-skew allowance of clients still renewing.
    #[arg(long, default_value_t = 30, allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub reclaim_margin_seconds: u64,
    /// The address `/metrics`, `/healthz` and `/readyz` listen on (all of the pod's by default).
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: std::net::IpAddr,
    /// The port of `/metrics` (OpenMetrics text; 0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub metrics_port: u16,
    /// The port of `/healthz` and `/readyz`, the Deployment's probes (0: any free port).
    #[arg(long, default_value_t = 8081)]
    pub health_port: u16,
    /// How long, in seconds (5..=600), this replica stays ready without an answer from the API
    /// server, or, leading, with a watch failing.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(5..=600))]
    pub stall_seconds: u64,
}

/// Accepts an identity that can name an annotation key (`replica.corral.dev/<identity>`).
fn parse_identity(value: &str) -> Result<String, String> {
    if !value.is_empty() && is_valid_label_value(value) {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "\"{value}\" cannot name the annotation {BROKER_REPLICA_ANNOTATION_PREFIX}<identity>: \
             use 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or \
             digit (a pod name is one)"
        ))
    }
}

impl Options {
    /// This replica's identity: `--identity`, else `$POD_NAME` (both through clap), else the
    /// host name (`/proc/sys/kernel/hostname`).
    ///
    /// Errors: neither is given and the host name is unreadable or not a label value; the
    /// message says to pass `--identity`.
    pub fn identity(&self) -> anyhow::Result<String> {
        if let Some(identity) = &self.identity {
            return Ok(identity.clone());
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the host name for this replica's identity ({e}): pass \
                     --identity or set POD_NAME"
                )
            })?;
        parse_identity(&host)
            .map_err(|e| anyhow::anyhow!("the host name as identity: {e}; pass --identity"))
    }

    /// Grace of the leader-election Lease, in seconds: the leader renews this long before its
    /// hold expires (a third of the Lease, at least 1 s; always shorter than the Lease).
    pub fn grace_seconds(&self) -> u64 {
        (self.lease_seconds / 3).max(1)
    }

    /// How often each replica writes its heartbeat annotation: a third of the Lease.
    pub fn heartbeat_period(&self) -> Duration {
        Duration::from_millis(self.lease_seconds * 1000 / 3)
    }

    /// The reclaim margin past a claim Lease's expiry.
    pub fn reclaim_margin(&self) -> jiff::SignedDuration {
        jiff::SignedDuration::from_secs(self.reclaim_margin_seconds as i64)
    }
}

/// The field manager of this replica's writes on the leader-election Lease (its heartbeat):
/// `corral-vdi-broker/<identity>`.
pub fn field_manager(identity: &str) -> String {
    format!("{BROKER_NAME}/{identity}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(std::iter::once("corral-vdi-broker").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_and_bounds() {
        let o = parse(&["--identity", "broker-0"]).unwrap();
        assert_eq!((o.lease_seconds, o.reclaim_margin_seconds), (15, 30));
        assert_eq!(
            (o.metrics_port, o.health_port, o.stall_seconds),
            (8080, 8081, 30)
        );
        assert!(parse(&["--stall-seconds", "1"]).is_err());
        assert!(parse(&["--metrics-port", "70000"]).is_err());
        assert_eq!(o.grace_seconds(), 5);
        assert_eq!(o.identity().unwrap(), "broker-0");
        assert!(parse(&["--lease-seconds", "2"]).is_err());
        assert!(parse(&["--lease-seconds", "x"]).is_err());
        assert!(parse(&["--reclaim-margin-seconds", "-1"]).is_err());
        let e = parse(&["--identity", "a/b"]).unwrap_err().to_string();
        assert!(e.contains("replica.corral.dev/<identity>"), "{e}");
    }
}
