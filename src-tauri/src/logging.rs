//! Structured logs to a daily-rotated file in the app's log directory (the newest seven are
//! kept). Credentials never reach it: the client libraries log below the level kept here, and
//! our own events carry names, never tokens or certificates.

use std::path::{Path, PathBuf};

use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::EnvFilter;

const PREFIX: &str = "corral-vdi-console";

/// Starts logging into `dir`; the file of the day is [`current_file`].
pub fn init(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let appender = appender(dir)?;
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
    Ok(())
}

/// The daily-rotated file writer in `dir`, the newest seven files kept.
fn appender(dir: &Path) -> Result<RollingFileAppender, tracing_appender::rolling::InitError> {
    RollingFileAppender::builder()
        .rotation(Rotation::DAILY)
        .filename_prefix(PREFIX)
        .filename_suffix("log")
        .max_log_files(7)
        .build(dir)
}

/// The file the log goes to now: tracing-appender's daily rotation names it by the UTC date
/// (`corral-vdi-console.2026-12-06.log`), so it changes at midnight UTC, not at local midnight.
pub fn current_file(dir: &Path) -> PathBuf {
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    dir.join(format!("{PREFIX}.{today}.log"))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_file_named_is_the_one_the_appender_writes() {
        let dir = std::env::temp_dir().join(format!("corral-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let before = current_file(&dir);
        let mut writer = appender(&dir).unwrap();
        writer.write_all(b"a line\n").unwrap();
        writer.flush().unwrap();
        // Named before or after the write: a midnight (UTC) between them is no failure.
        let after = current_file(&dir);
        assert!(
            before.exists() || after.exists(),
            "{} or {} not written; the folder holds {:?}",
            before.display(),
            after.display(),
            std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect::<Vec<_>>()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
