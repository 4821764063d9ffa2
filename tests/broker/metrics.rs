//! What operators watch (issue 39): each replica serves `/metrics` in OpenMetrics text with the
//! names they alert on, and `/healthz` and `/readyz`; after a claim, a grant and a reclaim the
//! leader's counters say so, with sane values, and exactly one replica's leader gauge is 1
//! (`failover` checks that it moves); a paused API server turns `/readyz` unready within its
//! bound and ready again after, and `broker status` says so.

use bytes::Bytes;
use corral_tests::{client_as, desktop_member, eventually, namespace, set_lease_spec};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use vdi_core::names::lease_name;

use std::time::Duration;

use tokio::time::Instant;

use crate::{CONVERGE, claim, leader, replicas_mine, replicas_steady, wait_granted};

/// `GET url`: the status and the body; `None` when nothing answers (a replica starting).
pub(crate) async fn get(url: &str) -> Option<(u16, String)> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let response = client.get(url.parse().unwrap()).await.ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The value of the sample `series` (a name with its labels, as written) in OpenMetrics `text`.
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split(' ').next()?.parse().ok())
}

/// Replica `identity`'s `/metrics` now; `None` while it does not answer.
///
/// Panics: it answers anything but 200.
pub(crate) async fn scrape(identity: &str) -> Option<String> {
    let replicas = corral_tests::brokers().replicas();
    let replica = replicas
        .iter()
        .find(|r| r.identity == identity)
        .unwrap_or_else(|| panic!("no replica {identity} in {replicas:?}"));
    let (status, text) = get(&replica.metrics).await?;
    assert_eq!(status, 200, "{}: {text}", replica.metrics);
    Some(text)
}

/// [`scrape`] of a replica that runs.
async fn metrics_of(identity: &str) -> String {
    scrape(identity)
        .await
        .unwrap_or_else(|| panic!("{identity} serves no /metrics"))
}

#[tokio::test]
async fn the_leader_counts_claims_grants_and_reclaims_and_both_replicas_are_ready() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let (Some(lead), _) = leader(&admin).await else {
        panic!("no broker leads");
    };
    let before = metrics_of(&lead).await;
    let reclaims_before =
        sample(&before, "corral_vdi_reclaims_total{why=\"expired\"}").unwrap_or(0.0);
    let grants_before = sample(&before, "corral_vdi_claim_grant_seconds_count").unwrap_or(0.0);

    let ns = namespace("metrics").await;
    desktop_member(&ns, "mt", "mt-1", true).await;
    claim("alice", &ns, "mt").await;
    wait_granted(&ns, "mt-1", "alice", CONVERGE).await;
    // As if alice's client had stopped renewing an hour ago: reclaimed.
    let renewed = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    set_lease_spec(
        &admin,
        &ns,
        &lease_name("mt-1"),
        json!({ "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
                "leaseDurationSeconds": 60 }),
    )
    .await;

    let text = eventually("the reclaim counted", CONVERGE, || async {
        let text = scrape(&lead).await?;
        let reclaims = sample(&text, "corral_vdi_reclaims_total{why=\"expired\"}")?;
        (reclaims > reclaims_before).then_some(text)
    })
    .await;
    eprintln!("{lead}'s metrics after a claim and a reclaim:\n{text}");
    let value =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series} missing:\n{text}"));
    assert!(value("corral_vdi_claim_grant_seconds_count") > grants_before);
    let grant_sum = value("corral_vdi_claim_grant_seconds_sum");
    assert!(grant_sum > 0.0, "grant seconds {grant_sum}");
    assert!(value("corral_vdi_reconcile_total{result=\"ok\"}") >= 1.0);
    assert!(value("corral_vdi_reconcile_duration_seconds_count") >= 1.0);
    assert!(value("corral_vdi_workqueue_queue_duration_seconds_count") >= 1.0);
    assert!(value("corral_vdi_workqueue_depth") >= 0.0);
    assert!(value("corral_vdi_reconcile_errors_total") >= 0.0);
    assert_eq!(value("corral_vdi_leader"), 1.0);
    assert!(text.trim_end().ends_with("# EOF"), "not OpenMetrics text");
    // The pool's members at the next full pass (every 15 s): one, free again (stopped).
    let free = format!("corral_vdi_pool_members{{namespace=\"{ns}\",pool=\"mt\",state=\"free\"}}");
    eventually("the pool's census", CONVERGE, || async {
        (sample(&scrape(&lead).await?, &free) == Some(1.0)).then_some(())
    })
    .await;

    // Exactly one leader; every replica live and ready (the standby too).
    let replicas = corral_tests::brokers().replicas();
    let mut leaders = 0.0;
    for replica in &replicas {
        let text = metrics_of(&replica.identity).await;
        leaders += sample(&text, "corral_vdi_leader").unwrap_or(-1.0);
        for probe in ["/healthz", "/readyz"] {
            let url = format!("{}{probe}", replica.health);
            let (status, body) = get(&url)
                .await
                .unwrap_or_else(|| panic!("{url}: no answer"));
            assert_eq!(
                (status, body.trim()),
                (200, "ok"),
                "{} {probe}",
                replica.identity
            );
        }
    }
    assert_eq!(leaders, 1.0, "leader gauges over {replicas:?}");
    // Nothing that is not a probe or the metrics.
    let not_here = format!("{}/metrics", replicas[0].health);
    assert_eq!(get(&not_here).await.map(|(s, _)| s), Some(404));

    // The sandbox's Prometheus scrapes both replicas and finds every name, and exactly one
    // replica leading.
    let prometheus = crate::with_broker()
        .prometheus
        .clone()
        .expect("the broker tests' sandbox runs Prometheus");
    let names = [
        "corral_vdi_reconcile_total",
        "corral_vdi_reconcile_errors_total",
        "corral_vdi_reconcile_duration_seconds_count",
        "corral_vdi_workqueue_depth",
        "corral_vdi_workqueue_queue_duration_seconds_count",
        "corral_vdi_pool_members",
        "corral_vdi_claim_grant_seconds_count",
        "corral_vdi_reclaims_total",
        "corral_vdi_leader",
    ];
    let query = |q: &'static str| {
        let url = format!("{prometheus}/api/v1/{q}");
        async move {
            let (status, body) = get(&url).await?;
            (status == 200).then_some(())?;
            serde_json::from_str::<serde_json::Value>(&body).ok()
        }
    };
    eventually("every name in Prometheus", CONVERGE, || async {
        let answer = query("label/__name__/values").await?;
        let found: Vec<&str> = answer["data"]
            .as_array()?
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        names.iter().all(|n| found.contains(n)).then_some(())
    })
    .await;
    let leaders = eventually(
        "both replicas' leader gauges in Prometheus",
        CONVERGE,
        || async {
            let answer = query("query?query=corral_vdi_leader").await?;
            let series = answer["data"]["result"].as_array()?.clone();
            let values: Vec<(String, f64)> = series
                .iter()
                .filter_map(|s| {
                    let replica = s["metric"]["replica"].as_str()?.to_owned();
                    Some((replica, s["value"][1].as_str()?.parse().ok()?))
                })
                .collect();
            (values.len() == 2).then_some(values)
        },
    )
    .await;
    eprintln!("leader gauges in Prometheus: {leaders:?}");
    assert_eq!(
        leaders.iter().map(|(_, v)| v).sum::<f64>(),
        1.0,
        "{leaders:?}"
    );
    assert!(
        leaders.iter().any(|(r, v)| *r == lead && *v == 1.0),
        "{leaders:?}"
    );
}

/// Sends `signal` (`STOP`, `CONT`) to the sandbox's kube-apiserver.
fn signal_apiserver(signal: &str) {
    let pid = crate::with_broker()
        .apiserver_pid
        .expect("the sandbox's kube-apiserver runs");
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

#[tokio::test]
async fn a_paused_api_server_turns_readyz_unready_within_its_bound_and_broker_status_says_so() {
    let _mine = replicas_mine().await;
    let replicas = corral_tests::brokers().replicas();
    let stall = Duration::from_secs(u64::from(sandbox::broker::STALL_SECONDS));
    // What a replica may take beyond the bound to see it passed (it judges every second).
    let slack = Duration::from_secs(5);
    // Ready first (a leader that just took over lists its caches before it is).
    for replica in &replicas {
        let url = format!("{}/readyz", replica.health);
        eventually(&format!("{} ready", replica.identity), CONVERGE, || async {
            get(&url).await.filter(|(status, _)| *status == 200)
        })
        .await;
    }
    signal_apiserver("STOP");
    let paused = Instant::now();
    let mut took = Vec::new();
    for replica in &replicas {
        let url = format!("{}/readyz", replica.health);
        eventually(
            &format!("{} unready", replica.identity),
            stall * 3,
            || async {
                get(&url).await.filter(|(status, body)| {
                    *status == 503 && body.contains("no answer from the API")
                })
            },
        )
        .await;
        took.push(paused.elapsed());
        // Alive all along: nothing for a liveness probe to restart.
        let live = get(&format!("{}/healthz", replica.health)).await;
        assert_eq!(live.map(|(s, _)| s), Some(200));
    }
    signal_apiserver("CONT");
    eprintln!("unready {took:?} after the API server paused (bound {stall:?})");
    for (replica, took) in replicas.iter().zip(&took) {
        assert!(
            *took < stall + slack + Duration::from_secs(1),
            "{} turned unready {took:?} after the pause, not within {stall:?}",
            replica.identity
        );
        let url = format!("{}/readyz", replica.health);
        eventually(
            &format!("{} ready again", replica.identity),
            CONVERGE,
            || async { get(&url).await.filter(|(status, _)| *status == 200) },
        )
        .await;
    }
    // broker status names the episode for each replica.
    let admin = client_as("admin").await;
    let deadline = Instant::now() + CONVERGE;
    let status = loop {
        let status = vdi_core::broker::status(&admin).await.unwrap();
        let told = status.replicas.iter().all(|r| {
            r.unready
                .as_deref()
                .is_some_and(|u| u.starts_with("from ") && u.contains("no answer"))
        });
        if told {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "broker status without both episodes after {CONVERGE:?}: {:?}",
            status.replicas
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("{:?}", status.replicas);
    let (ok, stdout, _) = crate::cli_as("admin", &["broker", "status"]);
    assert!(
        ok && stdout.contains("NOT READY") && stdout.contains("no answer from the API server"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_managed_pool_keeps_its_hourly_usage_and_the_cli_prints_it() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("usage").await;
    corral_tests::golden_vm(&ns, "golden", "Halted", |_| {}).await;
    let spec = vdi_core::policy::DesktopPoolSpec {
        golden: "golden".into(),
        size: 1,
        ..Default::default()
    };
    corral_tests::managed_pool_in(&ns, "us", spec, Duration::from_secs(90)).await;
    let member = claim("alice", &ns, "us").await.member;
    wait_granted(&ns, &member, "alice", CONVERGE).await;
    // As if alice's client had stopped renewing an hour ago: reclaimed.
    let renewed = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    set_lease_spec(
        &admin,
        &ns,
        &lease_name(&member),
        json!({ "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
                "leaseDurationSeconds": 60 }),
    )
    .await;
    crate::wait_event(&ns, &member, "Reclaimed", "alice", CONVERGE).await;

    // Its hours (one, or two if an hour began meanwhile): one claimed at the peak, none free
    // then, one reclaim (a managed pool's stale claim is a disconnect: past disconnectGrace).
    let buckets = eventually("the usage in the CLI's JSON", CONVERGE, || async {
        let (ok, json, _) =
            crate::cli_as("admin", &["pool", "usage", "us", "-n", &ns, "-o", "json"]);
        let buckets: Vec<serde_json::Value> = serde_json::from_str(&json).ok().filter(|_| ok)?;
        let disconnected: i64 = buckets
            .iter()
            .filter_map(|b| b["reclaims"]["disconnected"].as_i64())
            .sum();
        (disconnected == 1).then_some(buckets)
    })
    .await;
    let peak = buckets
        .iter()
        .filter_map(|b| b["peakClaimed"].as_i64())
        .max();
    let lowest = buckets
        .iter()
        .filter_map(|b| b["lowestFree"].as_i64())
        .min();
    assert_eq!((peak, lowest), (Some(1), Some(0)), "{buckets:?}");
    // The last bucket is this hour's, or the last one's if an hour began since the last look.
    let now = jiff::Timestamp::now();
    let hours = [now, now - jiff::SignedDuration::from_hours(1)]
        .map(|t| json!(vdi_core::policy::usage::hour_of(t)));
    let last = buckets
        .last()
        .map(|b| b["hour"].clone())
        .unwrap_or_default();
    assert!(hours.contains(&last), "{buckets:?}");
    let (ok, csv, _) = crate::cli_as("admin", &["pool", "usage", "us", "-n", &ns, "-o", "csv"]);
    assert!(ok);
    eprintln!("pool usage us -o csv:\n{csv}");
    assert!(
        csv.starts_with("hour,peak_claimed,lowest_free,reclaims\n"),
        "{csv}"
    );
    assert_eq!(csv.trim_end().lines().count(), buckets.len() + 1, "{csv}");
    assert!(
        csv.contains(",1,0,") && csv.contains("disconnected=1"),
        "{csv}"
    );

    // A pool without a DesktopPool keeps no history: said, nothing else.
    corral_tests::stopped_pool(&admin, &ns, "plain", 1)
        .await
        .unwrap();
    let (ok, _, stderr) = crate::cli_as("admin", &["pool", "usage", "plain", "-n", &ns]);
    assert!(
        !ok && stderr.contains("has no DesktopPool") && stderr.contains("pool adopt plain"),
        "{stderr}"
    );
}
