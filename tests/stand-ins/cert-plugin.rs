//! A client-go exec credential plugin for tests, playing a real identity provider: it hands out
//! short-lived client certificates signed by a sandbox's CA (as a cloud's plugin hands out
//! short-lived credentials), printing an ExecCredential with `expirationTimestamp`.
//!
//! `corral-test-cert-plugin --pki <dir> --user <name> --seconds <lifetime> [--log <file>]
//! [--fail-if <file>]`: each run appends a line to the log; while the `--fail-if` file exists
//! it fails like a plugin whose login expired (stderr naming the revoked token, and status 1).

use std::io::Write;

/// The token its failure names; the tests check that it never reaches a banner.
const REVOKED_TOKEN: &str = "1//0gRevokedT0kenAbc123XyZ456";
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (Some(pki), Some(user)) = (value("--pki"), value("--user")) else {
        eprintln!("usage: corral-test-cert-plugin --pki DIR --user NAME [--seconds N]");
        return ExitCode::from(2);
    };
    let seconds: u64 = value("--seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    if let Some(log) = value("--log")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
    {
        let _ = writeln!(file, "{}", jiff::Timestamp::now());
    }
    if value("--fail-if").is_some_and(|f| std::path::Path::new(&f).exists()) {
        // As plugins do, it echoes the secret it was refused with: redacted before anyone
        // shows it (vdi_core::redact).
        eprintln!(
            "identity provider: the refresh token was revoked (refresh_token={REVOKED_TOKEN}); log in again"
        );
        return ExitCode::from(1);
    }
    let Ok((cert, expiry)) = sandbox::pki::issue_client_cert(
        std::path::Path::new(&pki),
        &user,
        &[],
        Duration::from_secs(seconds),
    ) else {
        eprintln!("identity provider: cannot issue a certificate");
        return ExitCode::from(1);
    };
    let credential = serde_json::json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "expirationTimestamp": expiry.to_string(),
            "clientCertificateData": cert.cert_pem,
            "clientKeyData": cert.key_pem,
        }
    });
    println!("{credential}");
    ExitCode::SUCCESS
}
