//! Structured logs to a daily-rotated file in the app's log directory (the newest seven are
//! kept). Credentials never reach it: the client libraries log below the level kept here, and
//! our own events carry names, never tokens or certificates.

use std::path::{Path, PathBuf};

use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::EnvFilter;

const PREFIX: &str = "corral-vdi-console";

/// Starts logging into `dir` and returns the current log file's path.
pub fn init(dir: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let appender = RollingFileAppender::builder()
        .rotation(Rotation::DAILY)
        .filename_prefix(PREFIX)
        .filename_suffix("log")
        .max_log_files(7)
        .build(dir)?;
    // kube-runtime's watcher warns of each failed list or watch, a refused one (403) on every
    // retry, yet every such failure also reaches the live feed, which logs it itself, at DEBUG
    // when it only means "no DesktopPools here" (vdi_core::watch).
    let filter = EnvFilter::try_from_env("CORRAL_LOG").unwrap_or_else(|_| {
        EnvFilter::new(
            "info,kube=warn,kube_runtime::watcher=error,hyper=warn,rustls=warn,tao=warn,wry=warn",
        )
    });
    tracing_subscriber::fmt()
        .with_writer(appender)
        .with_ansi(false)
        .with_env_filter(filter)
        .json()
        .init();
    let today = jiff::Zoned::now().strftime("%Y-%m-%d").to_string();
    Ok(dir.join(format!("{PREFIX}.{today}.log")))
}
