//! `corral-vdi-broker [--identity ID] [--lease-seconds 15] [--reclaim-margin-seconds 30]`: the
//! in-cluster broker ([`corral_vdi_broker`]). Logs go to stderr through `tracing` (filter with
//! `RUST_LOG`, default `info`); exit code 0 after SIGTERM, 1 on a fatal error, 2 on bad flags.

use std::process::ExitCode;

use clap::Parser;
use corral_vdi_broker::Options;

#[tokio::main]
async fn main() -> ExitCode {
    let options = Options::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file or a pod's log gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match corral_vdi_broker::run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("corral-vdi-broker: {e:#}");
            ExitCode::FAILURE
        }
    }
}
