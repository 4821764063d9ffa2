//! Corral VDI's in-cluster broker (SPEC "Broker: access follows the claim").
//!
//! Two replicas run as a Deployment; the one holding the Lease `corral-vdi-broker` in
//! `corral-vdi-system` ([`election`]) reconciles every pool member from the cluster's current
//! state: it grants each active claim's holder a Role limited to their own member, labels and
//! starts the member, and on release or expiry revokes the grant, cuts the console, clears the
//! labels and stops the VM.

pub mod context;
pub mod controller;
pub mod decide;
pub mod election;
pub mod enforcement;
pub mod entitled;
pub mod events;
pub mod grant;
pub mod idle;
pub mod metrics;
pub mod options;
pub mod pool;
pub mod reconcile;
pub mod serve;

use kube::Client;

pub use options::Options;

/// Runs the broker until SIGTERM or SIGINT: connects with kube's `Config::infer()` (KUBECONFIG,
/// else the in-cluster service account), reads the API server's clock, serves its metrics and
/// probes ([`serve`]), and takes part in the election.
///
/// Errors: the identity cannot be worked out, no kubeconfig or in-cluster configuration is
/// found, the API server cannot be reached for its clock, or a port cannot be bound.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let identity = options.identity()?;
    let config = kube::Config::infer().await.map_err(|e| {
        anyhow::anyhow!(
            "no cluster to run against ({e}): set KUBECONFIG, or run in a pod with a service account"
        )
    })?;
    let streams = vdi_core::stream::stream_client(config.clone())?;
    let client = Client::try_from(config)?;
    let clock = vdi_core::clock::ServerClock::measure(&client).await?;
    tracing::info!(%identity, lease_seconds = options.lease_seconds,
        reclaim_margin_seconds = options.reclaim_margin_seconds, "corral-vdi-broker starting");
    let telemetry = serve::Telemetry {
        metrics: std::sync::Arc::new(metrics::Metrics::default()),
        health: serve::Health::new(std::time::Duration::from_secs(options.stall_seconds)),
    };
    serve::serve(
        telemetry.clone(),
        options.bind_address,
        options.metrics_port,
        options.health_port,
    )
    .await?;
    let shutdown = election::shutdown_signal()?;
    let margin = options.reclaim_margin();
    let leader = (client.clone(), streams, identity.clone(), telemetry.clone());
    election::run(
        client,
        identity,
        options,
        clock,
        shutdown,
        telemetry,
        move || {
            let (client, streams, identity, telemetry) = leader.clone();
            tokio::spawn(controller::lead(
                client, streams, identity, clock, margin, telemetry,
            ))
        },
    )
    .await;
    Ok(())
}
