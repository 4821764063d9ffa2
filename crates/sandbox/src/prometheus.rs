//! A real Prometheus (Debian's package `prometheus`) beside the broker's replicas, as an
//! operator's cluster has one: it scrapes each replica's `/metrics` every
//! [`SCRAPE_SECONDS`] (one static target per replica, labelled `replica=<identity>`), stores in
//! `<dir>/prometheus/data`, logs to `<dir>/logs/prometheus.log`, and answers its HTTP API on
//! 127.0.0.1 at a port of its own (written to `<dir>/`[`URL_FILE`], which `sandbox status`
//! prints). It dies with the sandbox, as its other processes do.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;
use tokio::process::Child;

use crate::broker::ReplicaInfo;
use crate::process::{command, find_program, free_port};

/// The program (Debian's package `prometheus`).
pub const PROGRAM: &str = "prometheus";
/// The file beside a sandbox's logs holding its Prometheus's URL.
pub const URL_FILE: &str = "prometheus/url";
/// How often each replica is scraped, in seconds.
pub const SCRAPE_SECONDS: u32 = 2;
/// How long [`Prometheus::start`] waits for its HTTP port.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running Prometheus.
pub struct Prometheus {
    /// Its base URL, `http://127.0.0.1:<port>` (the HTTP API under `/api/v1/`).
    pub url: String,
    _child: Child,
}

impl Prometheus {
    /// Writes the scrape configuration for `replicas` and starts Prometheus on it; returns once
    /// its HTTP port accepts connections.
    ///
    /// Errors: the program is missing (install `prometheus`: `scripts/install-deps.sh` does), a
    /// file cannot be written, the process does not start, or its port does not open in time.
    pub(crate) async fn start(dir: &Path, replicas: &[ReplicaInfo]) -> Result<Prometheus> {
        let program = find_program(PROGRAM).context(
            "prometheus is missing: install Debian's package prometheus (scripts/install-deps.sh \
             does)",
        )?;
        let folder = dir.join("prometheus");
        std::fs::create_dir_all(&folder).with_context(|| format!("create {}", folder.display()))?;
        let targets: Vec<_> = replicas
            .iter()
            .map(|r| {
                let target = r
                    .metrics
                    .trim_start_matches("http://")
                    .trim_end_matches("/metrics");
                json!({ "targets": [target], "labels": { "replica": r.identity } })
            })
            .collect();
        let config = json!({
            "global": {
                "scrape_interval": format!("{SCRAPE_SECONDS}s"),
                "evaluation_interval": format!("{SCRAPE_SECONDS}s"),
            },
            "scrape_configs": [{
                "job_name": "corral-vdi-broker",
                "metrics_path": "/metrics",
                "static_configs": targets,
            }],
        });
        let config_path = folder.join("prometheus.yml");
        std::fs::write(&config_path, serde_yaml::to_string(&config)?)
            .with_context(|| format!("write {}", config_path.display()))?;
        let port = free_port()?;
        let mut cmd = command(&program, &dir.join("logs").join("prometheus.log"))?;
        cmd.arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                folder.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1d")
            .arg("--log.level=warn");
        let child = cmd
            .spawn()
            .with_context(|| format!("start {}", program.display()))?;
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "prometheus did not open port {port} within {READY_TIMEOUT:?}: see {}",
                dir.join("logs").join("prometheus.log").display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let url = format!("http://127.0.0.1:{port}");
        let url_file = dir.join(URL_FILE);
        std::fs::write(&url_file, &url).with_context(|| format!("write {}", url_file.display()))?;
        Ok(Prometheus { url, _child: child })
    }
}
