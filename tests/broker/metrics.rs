//! What operators watch (issue 39): each replica serves `/metrics` in OpenMetrics text with the
//! names they alert on, and `/healthz` and `/readyz`; after a claim, a grant and a reclaim the
//! leader's counters say so, with sane values, and exactly one replica's leader gauge is 1
//! (`failover` checks that it moves).

use bytes::Bytes;
use corral_tests::{client_as, desktop_member, eventually, namespace, set_lease_spec};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use vdi_core::names::lease_name;

use crate::{CONVERGE, claim, leader, replicas_steady, wait_granted};

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
}
