//! Leader election on the Lease `corral-vdi-broker` in `corral-vdi-system`, with
//! [`kube_lease_manager`] (server-side apply on a coordination.k8s.io/v1 Lease), and each
//! replica's heartbeat annotation on that Lease.
//!
//! Only the leader reconciles: [`run`] starts the reconciler when this replica takes the Lease
//! and aborts it the moment the Lease is lost. On SIGTERM or SIGINT it releases the Lease and
//! returns. A leader killed outright is replaced once its hold expires (the Lease's duration).
//!
//! Every replica also watches the Lease, because kube-lease-manager reads it only when it polls
//! (at its own renewal, or at the holder's expiry): a replica that does not lead joins again at
//! once when the Lease has no holder (released by a leader that stopped), so it leads within a
//! second rather than after the Lease's duration; and a leader that sees another holder (two
//! replicas starting at once can both judge the dead holder's hold expired, and one
//! force-release the other's fresh hold) stops reconciling at once instead of at its next
//! renewal.
//!
//! Field managers: kube-lease-manager applies only `spec` fields (holder, times, duration) and
//! patches the rest with strategic merge, so it never drops an annotation it did not apply. The
//! heartbeat applies only its own annotation. The two use distinct field managers, because a
//! server-side apply removes every field its manager applied before and omits now: under one
//! manager the heartbeat (annotations only) would strip the holder the election applied.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use futures::{Stream, StreamExt};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::task::JoinHandle;
use vdi_core::clock::ServerClock;
use vdi_core::names::{
    BROKER_NAME, BROKER_NAMESPACE, BROKER_REPLICA_ANNOTATION_PREFIX,
    BROKER_UNREADY_ANNOTATION_PREFIX,
};

use std::sync::Arc;

use crate::options::{Options, field_manager};
use crate::serve::{Health, Telemetry};

/// How long to wait before building the lease manager again after an API error.
const RETRY: Duration = Duration::from_secs(2);

/// The field manager of the election's own writes on the Lease:
/// `corral-vdi-broker/<identity>/election` (see the module doc for why it is not the
/// heartbeat's).
pub fn election_field_manager(identity: &str) -> String {
    format!("{}/election", field_manager(identity))
}

/// Resolves when the process is asked to stop (SIGTERM, as Kubernetes sends, or SIGINT).
///
/// Errors: the signal handlers cannot be installed.
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
        }
    })
}

/// Builds the lease manager for this replica (creating the Lease if it is missing).
async fn manager(
    client: &Client,
    identity: &str,
    options: &Options,
) -> kube_lease_manager::Result<LeaseManager> {
    LeaseManagerBuilder::new(client.clone(), BROKER_NAME)
        .with_namespace(BROKER_NAMESPACE)
        .with_identity(identity)
        .with_duration(options.lease_seconds)
        .with_grace(options.grace_seconds())
        .with_field_manager(election_field_manager(identity))
        .build()
        .await
}

/// Takes part in the election until `shutdown` resolves, running `lead()` (a spawned task)
/// while this replica holds the Lease and aborting it as soon as it does not. The heartbeat runs
/// beside it all along. On shutdown it aborts the reconciler, releases the Lease if held, and
/// returns.
///
/// API errors never end it: the reconciler is stopped (leadership is no longer known) and the
/// manager is built again after [`RETRY`].
pub async fn run<F>(
    client: Client,
    identity: String,
    options: Options,
    clock: ServerClock,
    shutdown: impl Future<Output = ()>,
    telemetry: Telemetry,
    mut lead: F,
) where
    F: FnMut() -> JoinHandle<()>,
{
    let heartbeat = tokio::spawn(heartbeat(
        client.clone(),
        identity.clone(),
        options.heartbeat_period(),
        clock,
        telemetry.health.clone(),
    ));
    tokio::pin!(shutdown);
    let mut holders = pin!(holders(&client));
    let mut reconciler: Option<JoinHandle<()>> = None;
    let stop = |reconciler: &mut Option<JoinHandle<()>>, why: &str| {
        if let Some(task) = reconciler.take() {
            task.abort();
            telemetry.metrics.leader.set(0);
            telemetry.metrics.members.clear();
            telemetry.metrics.depth.set(0);
            telemetry.health.leading(false);
            tracing::warn!(%identity, "{why}: reconciler stopped");
        }
    };
    'build: loop {
        let manager = tokio::select! {
            () = &mut shutdown => break 'build,
            built = manager(&client, &identity, &options) => match built {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot join the election on Lease {BROKER_NAMESPACE}/{BROKER_NAME}; retrying");
                    tokio::select! {
                        () = &mut shutdown => break 'build,
                        () = tokio::time::sleep(RETRY) => continue 'build,
                    }
                }
            },
        };
        loop {
            let leading = reconciler.is_some();
            tokio::select! {
                () = &mut shutdown => {
                    stop(&mut reconciler, "shutting down");
                    match manager.release().await {
                        Ok(()) if leading => tracing::info!(%identity, "released Lease {BROKER_NAMESPACE}/{BROKER_NAME}"),
                        Ok(()) => tracing::info!(%identity, "left the election (not leading)"),
                        Err(e) => tracing::warn!(error = %e, "cannot release Lease {BROKER_NAMESPACE}/{BROKER_NAME}; the other replica leads once it expires"),
                    }
                    break 'build;
                }
                changed = manager.changed() => match changed {
                    Ok(true) => {
                        tracing::info!(%identity, "leading: holds Lease {BROKER_NAMESPACE}/{BROKER_NAME}");
                        stop(&mut reconciler, "restarting");
                        telemetry.metrics.leader.set(1);
                        telemetry.health.leading(true);
                        reconciler = Some(lead());
                    }
                    Ok(false) => stop(&mut reconciler, "lost the leader Lease"),
                    Err(e) => {
                        tracing::warn!(error = %e, "leader election failed; rejoining");
                        stop(&mut reconciler, "leadership unknown");
                        tokio::time::sleep(RETRY).await;
                        continue 'build;
                    }
                },
                // kube-lease-manager learns of the Lease only when it polls it (at its own
                // renewal, or at the holder's expiry); the watch tells at once.
                Some(holder) = holders.next() => {
                    let ours = holder.as_deref() == Some(identity.as_str());
                    // An event from before this replica took the Lease may arrive after it did:
                    // a quorum read says whether the hold is still this replica's.
                    if leading && !ours && !holds(&client, &identity).await {
                        // Another replica took the Lease (its manager may force-release a hold
                        // it read as expired just before this one renewed): stop acting now.
                        stop(&mut reconciler, "the leader Lease names another holder");
                        continue 'build;
                    }
                    if !leading && holder.is_none() {
                        // Released by a leader that stopped: a new manager takes it at once.
                        tracing::info!(%identity, "Lease {BROKER_NAMESPACE}/{BROKER_NAME} has no holder: taking part again");
                        continue 'build;
                    }
                }
            }
        }
    }
    stop(&mut reconciler, "shutting down");
    heartbeat.abort();
}

/// Whether the leader-election Lease, read now (a quorum read), names `identity` as its holder.
/// A failed read says no: leadership that cannot be confirmed is not acted on.
async fn holds(client: &Client, identity: &str) -> bool {
    let api: Api<Lease> = Api::namespaced(client.clone(), BROKER_NAMESPACE);
    api.get_opt(BROKER_NAME)
        .await
        .ok()
        .flatten()
        .is_some_and(|l| l.spec.and_then(|s| s.holder_identity).as_deref() == Some(identity))
}

/// The leader-election Lease's holder (`None`: no holder) each time the Lease is seen.
fn holders(client: &Client) -> impl Stream<Item = Option<String>> + use<> {
    let api: Api<Lease> = Api::namespaced(client.clone(), BROKER_NAMESPACE);
    let config = watcher::Config::default().fields(&format!("metadata.name={BROKER_NAME}"));
    watcher(api, config)
        .backoff(vdi_core::watch::default_backoff())
        .applied_objects()
        .filter_map(|lease| {
            let holder = lease.ok().map(|l| {
                l.spec
                    .and_then(|s| s.holder_identity)
                    .filter(|h| !h.is_empty())
            });
            std::future::ready(holder)
        })
}

/// Every `period`, applies `replica.corral.dev/<identity>` = now (RFC 3339, the API server's
/// time) and the replica's readiness record (`unready.corral.dev/<identity>`, [`Health::record`])
/// on the leader-election Lease, with field manager `corral-vdi-broker/<identity>`; each answer
/// (or failure) is the replica's readiness evidence (`health`).
/// Runs until aborted; a failed write is logged and retried at the next tick.
async fn heartbeat(
    client: Client,
    identity: String,
    period: Duration,
    clock: ServerClock,
    health: Arc<Health>,
) {
    let api: Api<Lease> = Api::namespaced(client, BROKER_NAMESPACE);
    let key = format!("{BROKER_REPLICA_ANNOTATION_PREFIX}{identity}");
    let unready_key = format!("{BROKER_UNREADY_ANNOTATION_PREFIX}{identity}");
    let params = PatchParams::apply(&field_manager(&identity));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = clock.now();
        let mut annotations = serde_json::json!({ &key: vdi_core::clock::annotation_time(now) });
        // Left out when it never was unready: this field manager's apply then drops it.
        if let Some(record) = health.record(now) {
            annotations[&unready_key] = serde_json::json!(record);
        }
        let patch = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": BROKER_NAME,
                "namespace": BROKER_NAMESPACE,
                "annotations": annotations,
            },
        });
        match api.patch(BROKER_NAME, &params, &Patch::Apply(patch)).await {
            Ok(_) => health.answered(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot write heartbeat {key} on Lease {BROKER_NAMESPACE}/{BROKER_NAME}");
                health.failed(format!(
                    "heartbeat on Lease {BROKER_NAMESPACE}/{BROKER_NAME}: {e}"
                ));
            }
        }
    }
}

/// Writes (`Some`) or removes (`None`) the annotation `key` on the leader Lease as the leader:
/// a merge patch of that one annotation, field manager `corral-vdi-broker` (the leader's
/// records: its last full reconcile, why it grants nothing). A failure is logged, never fatal.
pub async fn annotate_leader(client: &Client, key: &str, value: Option<&str>) {
    let api: Api<Lease> = Api::namespaced(client.clone(), BROKER_NAMESPACE);
    let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
    let params = PatchParams {
        field_manager: Some(BROKER_NAME.into()),
        ..PatchParams::default()
    };
    if let Err(e) = api.patch(BROKER_NAME, &params, &Patch::Merge(&patch)).await {
        tracing::warn!(error = %e, "cannot write {key} on Lease {BROKER_NAMESPACE}/{BROKER_NAME}");
    }
}
