//! The broker's HTTP endpoints, each port of its own so that a NetworkPolicy or a probe can tell
//! them apart: `/metrics` ([`crate::metrics`], OpenMetrics text) on the metrics port, and on the
//! health port `/healthz` (liveness: the process runs and, on the leader, its watches have not
//! ended) and `/readyz` (readiness: the API server answered this replica within the stall bound
//! and, on the leader, its caches are synced and no watch has been failing for longer than the
//! bound; a standby is ready too). A probe's answer is 200 with `ok`, or 503 with the reason.
//! A change of readiness is logged once, with the reason, whether or not anything probes.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// The content type of `/metrics` (OpenMetrics 1.0 text).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a replica reports: its metrics and its health, shared by the election and the leader's
/// reconciler.
#[derive(Clone)]
pub struct Telemetry {
    /// The metrics `/metrics` serves.
    pub metrics: Arc<Metrics>,
    /// What `/healthz` and `/readyz` judge.
    pub health: Arc<Health>,
}

/// What the probes judge: updated by the election (leading, its heartbeat's answers) and by the
/// leader's watches.
pub struct Health {
    /// How long without an answer from the API server, or with a watch failing, a replica
    /// stays ready.
    stall: Duration,
    state: Mutex<State>,
}

struct State {
    /// When the API server last answered (a heartbeat written, a watch event).
    answered: Instant,
    /// The last failure of a request, if one failed since that answer.
    error: Option<String>,
    /// This replica holds the leader Lease.
    leading: bool,
    /// The leader's watches have all listed.
    listed: bool,
    /// Per watch of the leader that fails: since when, and why (cleared by that watch's next
    /// event).
    watch_failing: std::collections::BTreeMap<&'static str, (Instant, String)>,
    /// Why the leader's watches ended, if they did (the process should be restarted).
    ended: Option<String>,
    /// The readiness last logged.
    logged: Result<(), String>,
    /// Since when, and why, the replica is not ready, if it is not.
    unready: Option<(Instant, String)>,
    /// The last time it was not ready: from, to, why.
    last: Option<(Instant, Instant, String)>,
}

impl Health {
    /// A replica that starts: ready until the stall bound passes without an answer.
    pub fn new(stall: Duration) -> Arc<Self> {
        Arc::new(Health {
            stall,
            state: Mutex::new(State {
                answered: Instant::now(),
                error: None,
                leading: false,
                listed: false,
                watch_failing: Default::default(),
                ended: None,
                logged: Ok(()),
                unready: None,
                last: None,
            }),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }

    /// The API server answered a request of this replica.
    pub fn answered(&self) {
        self.with(|s| {
            s.answered = Instant::now();
            s.error = None;
        });
    }

    /// A request of this replica failed (`why`).
    pub fn failed(&self, why: String) {
        self.with(|s| s.error = Some(why));
    }

    /// This replica took (`true`) or lost the leader Lease: its caches list anew.
    pub fn leading(&self, leading: bool) {
        self.with(|s| {
            s.leading = leading;
            s.listed = false;
            s.watch_failing.clear();
            s.ended = None;
        });
    }

    /// The leader's watches have all listed.
    pub fn listed(&self) {
        self.with(|s| s.listed = true);
    }

    /// The watch of `what` delivered an event: it works, and the API server answers.
    pub fn watch_ok(&self, what: &'static str) {
        self.with(|s| {
            s.watch_failing.remove(what);
            s.answered = Instant::now();
            s.error = None;
        });
    }

    /// The watch of `what` failed with `error` (it retries).
    pub fn watch_failed(&self, what: &'static str, error: &str) {
        self.with(|s| {
            s.watch_failing
                .entry(what)
                .or_insert_with(|| (Instant::now(), format!("the watch of {what}: {error}")));
        });
    }

    /// The leader's watches ended (`why`): not live any more.
    pub fn ended(&self, why: &str) {
        self.with(|s| s.ended = Some(why.to_owned()));
    }

    /// Liveness: `Err` with the reason once the leader's watches ended.
    pub fn live(&self) -> Result<(), String> {
        self.with(|s| match &s.ended {
            Some(why) => Err(format!("the leader's watches ended: {why}")),
            None => Ok(()),
        })
    }

    /// Readiness now (see the module doc), logged when it changes.
    pub fn ready(&self) -> Result<(), String> {
        let stall = self.stall;
        self.with(|s| {
            let now = Instant::now();
            let silent = now.duration_since(s.answered);
            let verdict = if silent > stall {
                Err(format!(
                    "no answer from the API server for {} s (bound {} s){}",
                    silent.as_secs(),
                    stall.as_secs(),
                    s.error
                        .as_deref()
                        .map(|e| format!("; last error: {e}"))
                        .unwrap_or_default()
                ))
            } else if s.leading && !s.listed {
                Err("leading, and its caches are not synced yet".to_owned())
            } else {
                let longest = s.watch_failing.values().min_by_key(|(since, _)| *since);
                match longest {
                    Some((since, why)) if now.duration_since(*since) > stall => Err(format!(
                        "{why} (failing for {} s, bound {} s)",
                        now.duration_since(*since).as_secs(),
                        stall.as_secs()
                    )),
                    _ => Ok(()),
                }
            };
            if verdict != s.logged {
                match &verdict {
                    Ok(()) => tracing::info!("ready again"),
                    Err(why) => tracing::warn!(%why, "not ready"),
                }
                s.logged = verdict.clone();
            }
            match (&verdict, s.unready.take()) {
                (Ok(()), Some((since, why))) => s.last = Some((since, now, why)),
                (Err(_), Some(episode)) => s.unready = Some(episode),
                (Err(why), None) => s.unready = Some((now, why.clone())),
                (Ok(()), None) => {}
            }
            verdict
        })
    }

    /// The readiness record `broker status` shows (`vdi_core::names::
    /// BROKER_UNREADY_ANNOTATION_PREFIX`), with times in the clock whose now is `now`: "since
    /// <time>: <why>" while not ready, "from <time> to <time>: <why>" for the last time it was
    /// not, `None` when it never was.
    pub fn record(&self, now: jiff::Timestamp) -> Option<String> {
        self.with(|s| {
            let at = |i: Instant| {
                let ago = jiff::SignedDuration::try_from(i.elapsed()).unwrap_or_default();
                vdi_core::clock::annotation_time(now.checked_sub(ago).unwrap_or(now))
            };
            match (&s.unready, &s.last) {
                (Some((since, why)), _) => Some(format!("since {}: {why}", at(*since))),
                (None, Some((from, to, why))) => {
                    Some(format!("from {} to {}: {why}", at(*from), at(*to)))
                }
                (None, None) => None,
            }
        })
    }
}

fn answer(verdict: Result<(), String>) -> (StatusCode, String) {
    match verdict {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// Binds the metrics and health ports on `address` and serves them until the process ends; a
/// task judges readiness every second so that a change is logged even when nothing probes.
///
/// Errors: a port cannot be bound (in use, or a privileged port without the right).
pub async fn serve(
    Telemetry { metrics, health }: Telemetry,
    address: IpAddr,
    metrics_port: u16,
    health_port: u16,
) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let bind = |port: u16, what: &'static str| async move {
        tokio::net::TcpListener::bind((address, port))
            .await
            .with_context(|| format!("listen for {what} on {address}:{port}"))
    };
    let metrics_listener = bind(metrics_port, "/metrics").await?;
    let health_listener = bind(health_port, "/healthz and /readyz").await?;
    let addresses = (
        metrics_listener.local_addr()?,
        health_listener.local_addr()?,
    );
    let metrics_app = Router::new().route(
        "/metrics",
        get(move || {
            let text = metrics.encode();
            async move { ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response() }
        }),
    );
    let (live, ready) = (health.clone(), health.clone());
    let health_app = Router::new()
        .route(
            "/healthz",
            get(move || std::future::ready(answer(live.live()))),
        )
        .route(
            "/readyz",
            get(move || std::future::ready(answer(ready.ready()))),
        );
    for (listener, app) in [
        (metrics_listener, metrics_app),
        (health_listener, health_app),
    ] {
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "an HTTP endpoint stopped");
            }
        });
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let _ = health.ready();
        }
    });
    tracing::info!(metrics = %addresses.0, health = %addresses.1, "serving /metrics, /healthz and /readyz");
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_leader_is_ready_once_listed_and_unready_while_the_api_server_is_silent() {
        let health = Health::new(Duration::from_secs(30));
        assert_eq!(health.ready(), Ok(()), "a standby is ready");
        health.leading(true);
        assert!(health.ready().unwrap_err().contains("not synced"));
        health.listed();
        assert_eq!(health.ready(), Ok(()));
        health.watch_failed("claim Leases", "connection refused");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(health.ready(), Ok(()), "within the bound");
        health.failed("heartbeat: connection refused".into());
        tokio::time::advance(Duration::from_secs(25)).await;
        let why = health.ready().unwrap_err();
        assert!(
            why.contains("no answer from the API server for 35 s")
                && why.contains("heartbeat: connection refused"),
            "{why}"
        );
        health.answered();
        let why = health.ready().unwrap_err();
        assert!(why.contains("the watch of claim Leases"), "{why}");
        let now: jiff::Timestamp = "2026-12-07T00:00:00Z".parse().unwrap();
        let record = health.record(now).unwrap();
        assert!(
            record.starts_with("since 2026-12-07T00:00:00Z: no answer from the API server"),
            "{record}"
        );
        // Another watch's events do not clear it.
        health.watch_ok("DesktopPools");
        assert!(health.ready().is_err());
        health.watch_ok("claim Leases");
        assert_eq!(health.ready(), Ok(()));
        let record = health.record(now).unwrap();
        assert!(
            record.starts_with("from ") && record.contains(" to 2026-12-07T00:00:00Z"),
            "{record}"
        );
        assert_eq!(health.live(), Ok(()));
        health.ended("the watches ended");
        assert!(health.live().is_err());
    }
}
