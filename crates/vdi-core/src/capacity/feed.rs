//! The Capacity view, live: metadata-only watches on the four kinds admission reads (the
//! KubeVirt CR, Nodes, virt-launcher pods, VMIs) and the pools' VMs say *that* something
//! changed; the view is then read again whole ([`cluster_capacity`]), at most once per
//! [`SETTLE`], so a burst of changes (a pool of 50 starting) costs one read.
//!
//! Metadata watches (`PartialObjectMeta`) carry no spec or status, so they are cheap at 500
//! nodes; a node's allocatable changing bumps its resourceVersion, which is all the trigger
//! needs.

use std::pin::pin;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::objects::{LAUNCHER_LABEL, LAUNCHER_VALUE};
use super::read::cluster_capacity;
use super::view::ClusterCapacity;
use crate::error::Error;
use crate::names::POOL_LABEL;
use crate::watch::FeedStatus;

/// How long changes are gathered before the view is read again.
pub const SETTLE: Duration = Duration::from_millis(300);

/// What the Capacity view shows, sent whole on every change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct CapacitySnapshot {
    /// `syncing` until the first read; `failing` (with the error, naming the fix) while a
    /// read or a watch fails, keeping the last view.
    pub status: FeedStatus,
    /// The last view read; `null` before the first read succeeded.
    pub view: Option<ClusterCapacity>,
}

/// A running live Capacity view. Dropping it stops the watches.
pub struct CapacityFeed {
    rx: watch::Receiver<CapacitySnapshot>,
    task: JoinHandle<()>,
}

impl CapacityFeed {
    /// Starts the watches and the first read.
    pub fn spawn(client: Client) -> Self {
        let (tx, rx) = watch::channel(CapacitySnapshot {
            status: FeedStatus::Syncing,
            view: None,
        });
        let task = tokio::spawn(run(client, tx));
        CapacityFeed { rx, task }
    }

    /// A receiver of snapshots; `changed()` wakes on every new one.
    pub fn subscribe(&self) -> watch::Receiver<CapacitySnapshot> {
        self.rx.clone()
    }
}

impl Drop for CapacityFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One watch's news: something changed (`Ok`), or the watch failed and retries (`Err`).
type Signal = Result<(), Error>;

fn changes(api: Api<Meta>, labels: Option<&str>, what: &'static str) -> impl Stream<Item = Signal> {
    let mut config = watcher::Config::default();
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    // A refused watch (a user without RBAC for it) backs off to 30 s, not retrying at once.
    watcher(api, config)
        .backoff(crate::watch::default_backoff())
        .filter_map(move |event| {
            std::future::ready(match event {
                Ok(Event::Init | Event::InitApply(_)) => None,
                Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => Some(Ok(())),
                // A refused watch of an optional kind (the KubeVirt CR, pods or VMIs for a
                // user without RBAC) is already a note of the view; it is not a failure.
                Err(watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e))
                    if crate::error::is_status(&e, 403) || crate::error::is_status(&e, 404) =>
                {
                    None
                }
                Err(e) => Some(Err(Error::Config(format!("watch {what}: {e}")))),
            })
        })
}

/// Metadata-only objects of any kind (`Accept: ...;as=PartialObjectMetadata`).
type Meta = PartialObjectMeta<DynamicObject>;

fn all(client: &Client, resource: &ApiResource) -> Api<Meta> {
    Api::all_with(client.clone(), resource)
}

async fn run(client: Client, tx: watch::Sender<CapacitySnapshot>) {
    let kubevirt = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt"),
        "kubevirts",
    );
    let vmi = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    );
    let vm = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    );
    let launchers = format!("{LAUNCHER_LABEL}={LAUNCHER_VALUE}");
    let signals = stream::select_all([
        changes(
            all(&client, &ApiResource::erase::<Node>(&())),
            None,
            "Nodes",
        )
        .boxed(),
        changes(
            all(&client, &ApiResource::erase::<Pod>(&())),
            Some(&launchers),
            "virt-launcher pods",
        )
        .boxed(),
        changes(all(&client, &vmi), None, "VirtualMachineInstances").boxed(),
        changes(all(&client, &kubevirt), None, "the KubeVirt CR").boxed(),
        changes(all(&client, &vm), Some(POOL_LABEL), "pool VirtualMachines").boxed(),
    ]);
    let mut signals = pin!(signals);
    let mut dirty = true;
    loop {
        if dirty {
            tokio::time::sleep(SETTLE).await;
            // Take what arrived meanwhile: it is covered by the read below.
            while let Some(Some(_)) = signals.next().now_or_never() {}
            let next = match cluster_capacity(&client).await {
                Ok(view) => CapacitySnapshot {
                    status: FeedStatus::Live,
                    view: Some(view),
                },
                Err(e) => CapacitySnapshot {
                    status: FeedStatus::Failing { error: e.view() },
                    view: tx.borrow().view.clone(),
                },
            };
            tx.send_if_modified(|current| {
                let changed = *current != next;
                *current = next;
                changed
            });
            dirty = false;
        }
        match signals.next().await {
            None => return,
            Some(Ok(())) => dirty = true,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "capacity watch failing; it retries");
                tx.send_if_modified(|current| {
                    let status = FeedStatus::Failing { error: e.view() };
                    let changed = current.status != status;
                    current.status = status;
                    changed
                });
            }
        }
    }
}
