//! Another Unix user, to check that a local listener serves only its owner: made on first
//! use, and a probe run as that user.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::target_dir;

/// The Unix user that tests connect as, to check that a local listener serves only its owner.
pub const OTHER_USER: &str = "corral-test-other";

/// [`OTHER_USER`]'s uid, made on first use (`useradd --system`, idempotently: an existing one is
/// kept). Needs root, as CI has: panics, saying so, when this test runs as anyone else.
pub fn other_user() -> u32 {
    static UID: OnceLock<u32> = OnceLock::new();
    *UID.get_or_init(|| {
        let me = std::process::Command::new("id")
            .arg("-u")
            .output()
            .expect("id -u");
        assert!(
            String::from_utf8_lossy(&me.stdout).trim() == "0",
            "this test makes a second Unix user ({OTHER_USER}) and connects as it, which needs \
             root: run it as root (CI does), e.g. sudo -E cargo test --workspace --all-features \
             --test local_owner"
        );
        let uid = || {
            std::process::Command::new("id")
                .args(["-u", OTHER_USER])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        };
        if let Some(uid) = uid() {
            return uid;
        }
        let made = std::process::Command::new("useradd")
            .args([
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                OTHER_USER,
            ])
            .output()
            .expect("useradd (Debian: passwd)");
        // 9: made meanwhile by another test binary.
        assert!(
            made.status.success() || made.status.code() == Some(9),
            "useradd {OTHER_USER}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        uid().unwrap_or_else(|| panic!("{OTHER_USER} has no uid after useradd"))
    })
}

/// What [`probe_as_other`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Bytes received.
    pub bytes: u64,
    /// How the connection ended: `closed` (by the listener), `reset`, `timeout` (still open
    /// after the wait), `refused` (nothing listens).
    pub ended: String,
    /// The first bytes received (up to 64, lossy UTF-8).
    pub head: String,
}

/// The probe stand-in (stand-ins/probe.rs), copied where [`OTHER_USER`] may run it (a build
/// under root's home is not).
fn probe_binary() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("corral-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("corral-test-probe");
        std::fs::copy(target_dir().join("corral-test-probe"), &target)
            .expect("the probe stand-in (cargo build -p corral-tests)");
        for path in [&dir, &target] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        target
    })
    .clone()
}

/// Connects to `addr` as [`OTHER_USER`] (the probe stand-in run through `setpriv`, with that
/// user's uid and group and no other groups), sends `send`, and reads for up to `wait`.
pub async fn probe_as_other(addr: std::net::SocketAddr, send: &[u8], wait: Duration) -> Probe {
    other_user();
    let hex: String = send.iter().map(|b| format!("{b:02x}")).collect();
    let out = tokio::process::Command::new("setpriv")
        .args([
            &format!("--reuid={OTHER_USER}"),
            &format!("--regid={OTHER_USER}"),
            "--clear-groups",
            "--",
        ])
        .arg(probe_binary())
        .args([addr.to_string(), hex, wait.as_millis().to_string()])
        .output()
        .await
        .expect("setpriv (util-linux)");
    assert!(
        out.status.success(),
        "the probe as {OTHER_USER}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the probe's answer: {e}: {:?}", out.stdout));
    Probe {
        bytes: seen["bytes"].as_u64().unwrap_or_default(),
        ended: seen["ended"].as_str().unwrap_or_default().to_owned(),
        head: seen["head"].as_str().unwrap_or_default().to_owned(),
    }
}

/// Asserts that [`OTHER_USER`] gets nothing from `addr` (`what`, for the message): no byte,
/// and the connection closed by the listener well within `wait`, not left open.
pub async fn assert_other_gets_nothing(what: &str, addr: std::net::SocketAddr, send: &[u8]) {
    let wait = Duration::from_secs(5);
    let began = std::time::Instant::now();
    let seen = probe_as_other(addr, send, wait).await;
    assert_eq!(seen.bytes, 0, "{what}: {OTHER_USER} got {seen:?}");
    assert!(
        seen.ended == "closed" || seen.ended == "reset",
        "{what}: closed at once for {OTHER_USER}, not {seen:?}"
    );
    assert!(
        began.elapsed() < wait,
        "{what}: closed at once, not after {:?}",
        began.elapsed()
    );
}
