//! Credentials from exec plugins (client.authentication.k8s.io), renewed before they expire.
//!
//! kube-rs runs an exec plugin once when a client is built; a client certificate it returns is
//! then used until the process ends, even past its `expirationTimestamp`. A desktop app stays
//! open for days, so here the plugin is run by us: its certificate (or token) goes into the
//! client, and a task runs the plugin again before the expiry (a fifth of the lifetime before,
//! at most a minute) and swaps in a client with the new credentials. Requests already made keep
//! their connection; the next ones use the new one. When the plugin fails, the old credentials
//! stay in use while they last, the state says why (with the plugin's stderr), and the plugin is
//! tried again with a bounded backoff (5 s doubling to 5 minutes): never a flood.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, RwLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use data_encoding::BASE64;
use http::{Request, Response};
use jiff::Timestamp;
use kube::client::Body;
use kube::config::ExecConfig;
use kube::{Client, Config};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// How long a credential plugin may run, in seconds.
pub const PLUGIN_TIMEOUT_SECONDS: u64 = 60;
/// First wait before running a failing plugin again; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// Longest wait between two runs of a failing plugin.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Where the credentials of a connection stand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "kind"
)]
pub enum CredentialState {
    /// Credentials that do not expire (a certificate file, a token, or a plugin's answer
    /// without an expiry).
    Lasting,
    /// From an exec plugin, valid until `expires_at`; renewed before then.
    Renewing {
        /// When the current credentials expire.
        expires_at: Timestamp,
        /// How many times the plugin has run.
        runs: u32,
    },
    /// The exec plugin failed: the credentials in use expire at `expires_at` (if they are
    /// not expired already), and the plugin runs again in `retry_in_seconds`.
    Failing {
        /// The plugin, its exit status and the end of its stderr.
        message: String,
        /// When the credentials in use expire.
        expires_at: Option<Timestamp>,
        /// Seconds until the next try.
        retry_in_seconds: u64,
        /// How many times the plugin has run.
        runs: u32,
    },
}

/// What an exec plugin answered (the `status` of an ExecCredential).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecStatus {
    expiration_timestamp: Option<String>,
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ExecCredential {
    status: Option<ExecStatus>,
}

/// Fresh credentials from one run of a plugin.
struct Issued {
    status: ExecStatus,
    expires_at: Option<Timestamp>,
}

/// Runs the exec plugin of `exec` once (argument vector, its `env`, `KUBERNETES_EXEC_INFO`),
/// with [`PLUGIN_TIMEOUT_SECONDS`] at most.
///
/// Errors: a sentence naming the command, its exit status and the end of its stderr.
async fn run_plugin(exec: &ExecConfig) -> std::result::Result<Issued, String> {
    let command = exec
        .command
        .clone()
        .ok_or_else(|| "the exec plugin has no command".to_owned())?;
    let api_version = exec
        .api_version
        .clone()
        .unwrap_or_else(|| "client.authentication.k8s.io/v1".to_owned());
    let info = serde_json::json!({
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": { "interactive": false },
    });
    let mut cmd = tokio::process::Command::new(&command);
    cmd.args(exec.args.clone().unwrap_or_default())
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for pair in exec.env.clone().unwrap_or_default() {
        let pair: HashMap<String, String> = pair;
        if let (Some(name), Some(value)) = (pair.get("name"), pair.get("value")) {
            cmd.env(name, value);
        }
    }
    for name in exec.drop_env.clone().unwrap_or_default() {
        cmd.env_remove(name);
    }
    let out = tokio::time::timeout(Duration::from_secs(PLUGIN_TIMEOUT_SECONDS), cmd.output())
        .await
        .map_err(|_| format!("{command} did not answer within {PLUGIN_TIMEOUT_SECONDS} s"))?
        .map_err(|e| format!("{command} could not be run: {e}"))?;
    if !out.status.success() {
        // The plugin's words may carry a token: redacted before they reach a log or a banner.
        let stderr = crate::redact::secrets(&String::from_utf8_lossy(&out.stderr));
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "{command} failed ({}){}",
            out.status,
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {}", tail.join(" / "))
            }
        ));
    }
    let credential: ExecCredential = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{command} printed no ExecCredential: {e}"))?;
    let status = credential
        .status
        .ok_or_else(|| format!("{command}'s ExecCredential has no status"))?;
    let expires_at = match &status.expiration_timestamp {
        Some(t) => Some(
            t.parse::<Timestamp>()
                .map_err(|e| format!("{command}'s expirationTimestamp {t:?}: {e}"))?,
        ),
        None => None,
    };
    Ok(Issued { status, expires_at })
}

/// `config` with the issued credentials in place of the plugin.
fn with_issued(config: &Config, issued: &Issued) -> Config {
    let mut config = config.clone();
    config.auth_info.exec = None;
    let status = &issued.status;
    if let (Some(cert), Some(key)) = (&status.client_certificate_data, &status.client_key_data) {
        // The kubeconfig's *-data fields are base64; the plugin's are PEM text.
        config.auth_info.client_certificate_data = Some(BASE64.encode(cert.as_bytes()));
        config.auth_info.client_key_data = Some(BASE64.encode(key.as_bytes()).into());
    }
    if let Some(token) = &status.token {
        config.auth_info.token = Some(token.clone().into());
    }
    config
}

/// How long before `expires_at` to renew: a fifth of the lifetime, at most a minute, at least
/// a second.
fn renew_at(issued_at: Timestamp, expires_at: Timestamp) -> Timestamp {
    let lifetime = expires_at.duration_since(issued_at);
    let margin = (lifetime / 5)
        .min(jiff::SignedDuration::from_secs(60))
        .max(jiff::SignedDuration::from_secs(1));
    expires_at - margin
}

/// The clients of a connection: one for API calls, one for streams (no automatic retries,
/// [`crate::stream::stream_client`]).
#[derive(Clone)]
struct Pair {
    main: Client,
    streams: Client,
}

impl Pair {
    fn build(config: &Config) -> Result<Self> {
        Ok(Pair {
            main: Client::try_from(config.clone()).map_err(|e| Error::kube("build a client", e))?,
            streams: crate::stream::stream_client(config.clone())?,
        })
    }
}

/// A tower service sending each request with the main or the streams client of the moment.
#[derive(Clone)]
struct Swapping {
    current: Arc<RwLock<Pair>>,
    streams: bool,
}

impl tower::Service<Request<Body>> for Swapping {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = kube::Result<Response<Body>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<kube::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let pair = self
            .current
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        let client = if self.streams {
            pair.streams
        } else {
            pair.main
        };
        Box::pin(async move { client.send(request).await })
    }
}

/// The clients of a connection and where their credentials stand.
pub struct Clients {
    /// For API calls.
    pub main: Client,
    /// For KubeVirt's streams: no automatic retries.
    pub streams: Client,
    /// Where the credentials stand; changes when they are renewed or the plugin fails.
    pub state: watch::Receiver<CredentialState>,
}

/// The clients for `config`. Without an exec plugin they are kube's own clients, and the state
/// stays [`CredentialState::Lasting`]. With one, the plugin is run here and again before its
/// credentials expire, and the returned clients always use the newest (see the module docs).
/// The renewal stops when every clone of the clients is dropped.
///
/// Errors: the plugin's first run fails ([`Error::Config`] naming the command, its status and
/// stderr), or the clients cannot be built from its answer.
pub async fn clients(config: Config) -> Result<Clients> {
    let Some(exec) = config.auth_info.exec.clone() else {
        let pair = Pair::build(&config)?;
        return Ok(Clients {
            main: pair.main,
            streams: pair.streams,
            state: watch::channel(CredentialState::Lasting).1,
        });
    };
    let issued_at = Timestamp::now();
    let issued = run_plugin(&exec).await.map_err(|message| {
        Error::Config(format!(
            "the credential plugin of this context failed: {message}"
        ))
    })?;
    let pair = Pair::build(&with_issued(&config, &issued))?;
    let Some(expires_at) = issued.expires_at else {
        return Ok(Clients {
            main: pair.main,
            streams: pair.streams,
            state: watch::channel(CredentialState::Lasting).1,
        });
    };
    let (tx, rx) = watch::channel(CredentialState::Renewing {
        expires_at,
        runs: 1,
    });
    let current = Arc::new(RwLock::new(pair));
    let swapping = |streams| Swapping {
        current: current.clone(),
        streams,
    };
    let namespace = config.default_namespace.clone();
    let clients = Clients {
        main: Client::new(swapping(false), namespace.clone()),
        streams: Client::new(swapping(true), namespace),
        state: rx,
    };
    tokio::spawn(renew(
        Arc::downgrade(&current),
        config,
        exec,
        tx,
        renew_at(issued_at, expires_at),
        expires_at,
    ));
    Ok(clients)
}

/// Runs the plugin again at `next`, and after each answer at the next renewal time, until the
/// client is gone. A failure keeps the old credentials and retries with a bounded backoff.
async fn renew(
    current: Weak<RwLock<Pair>>,
    config: Config,
    exec: ExecConfig,
    tx: watch::Sender<CredentialState>,
    mut next: Timestamp,
    mut expires_at: Timestamp,
) {
    let mut runs = 1u32;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let wait = next.duration_since(Timestamp::now());
        if let Ok(wait) = Duration::try_from(wait) {
            tokio::time::sleep(wait).await;
        }
        let Some(slot) = current.upgrade() else {
            return;
        };
        let issued_at = Timestamp::now();
        runs += 1;
        let outcome = run_plugin(&exec).await.and_then(|issued| {
            Pair::build(&with_issued(&config, &issued))
                .map(|pair| (pair, issued.expires_at))
                .map_err(|e| format!("the plugin's answer makes no client: {e}"))
        });
        match outcome {
            Ok((client, Some(expiry))) => {
                if let Ok(mut c) = slot.write() {
                    *c = client;
                }
                tracing::info!(expires_at = %expiry, runs, "credentials renewed");
                expires_at = expiry;
                next = renew_at(issued_at, expiry);
                backoff = FIRST_BACKOFF;
                tx.send_replace(CredentialState::Renewing { expires_at, runs });
            }
            Ok((client, None)) => {
                if let Ok(mut c) = slot.write() {
                    *c = client;
                }
                tx.send_replace(CredentialState::Lasting);
                return;
            }
            Err(message) => {
                tracing::warn!(%message, retry_in_seconds = backoff.as_secs(), "credential plugin failed");
                tx.send_replace(CredentialState::Failing {
                    message,
                    expires_at: Some(expires_at),
                    retry_in_seconds: backoff.as_secs(),
                    runs,
                });
                next =
                    Timestamp::now() + jiff::SignedDuration::try_from(backoff).unwrap_or_default();
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        drop(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_comes_a_fifth_of_the_lifetime_early_at_most_a_minute() {
        let t: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let two_minutes = t + jiff::SignedDuration::from_secs(120);
        assert_eq!(
            renew_at(t, two_minutes),
            two_minutes - jiff::SignedDuration::from_secs(24)
        );
        let a_day = t + jiff::SignedDuration::from_hours(24);
        assert_eq!(
            renew_at(t, a_day),
            a_day - jiff::SignedDuration::from_secs(60)
        );
        let two_seconds = t + jiff::SignedDuration::from_secs(2);
        assert_eq!(
            renew_at(t, two_seconds),
            two_seconds - jiff::SignedDuration::from_secs(1)
        );
    }
}
