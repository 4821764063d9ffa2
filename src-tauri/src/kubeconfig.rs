//! Follows the kubeconfig files: when one is written, replaced or removed, the window is told
//! (`kubeconfig-changed`) and reads the contexts again; it reconnects when its context changed
//! or its connection was failing (a cluster that came back on a new address, a renewed token).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tauri::{AppHandle, Emitter};
use vdi_core::cluster::KubeconfigSource;
use vdi_core::model::KubeconfigChanged;

/// Event carrying a [`KubeconfigChanged`] once a burst of changes to the kubeconfig files has
/// settled.
pub const KUBECONFIG_EVENT: &str = "kubeconfig-changed";

/// Tools write a kubeconfig in several steps (a temporary file, then a rename): one event per
/// burst, once it has been quiet this long.
const SETTLE: Duration = Duration::from_millis(250);

/// Watches the folders holding the files of `source` (a file replaced by a rename is only seen
/// from its folder) and tells the window about changes to those files, naming the contexts
/// they changed. The watch lasts as long as the returned watcher; `None` (logged) when the
/// system refuses to watch.
pub fn follow(app: &AppHandle, source: KubeconfigSource) -> Option<RecommendedWatcher> {
    let files = source.paths();
    let wanted: HashSet<PathBuf> = files.iter().cloned().collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && !event.kind.is_access()
            && event.paths.iter().any(|p| wanted.contains(p))
        {
            let _ = tx.send(());
        }
    })
    .inspect_err(|e| tracing::warn!(error = %e, "cannot watch the kubeconfig files"))
    .ok()?;
    let folders: HashSet<PathBuf> = files
        .iter()
        .filter_map(|f| f.parent().map(PathBuf::from))
        .collect();
    for folder in &folders {
        if let Err(e) = watcher.watch(folder, RecursiveMode::NonRecursive) {
            tracing::warn!(folder = %folder.display(), error = %e, "cannot watch a kubeconfig folder");
        }
    }
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let mut last = source.fingerprints().unwrap_or_default();
        while rx.recv().await.is_some() {
            // Let the burst settle.
            while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {}
            let now = source.fingerprints().unwrap_or_default();
            let changed = KubeconfigChanged {
                changed_contexts: KubeconfigSource::changed_contexts(&last, &now),
            };
            last = now;
            tracing::info!(contexts = ?changed.changed_contexts, "the kubeconfig changed");
            if let Err(e) = app.emit(KUBECONFIG_EVENT, &changed) {
                tracing::warn!(error = %e, "could not tell the window the kubeconfig changed");
            }
        }
    });
    Some(watcher)
}
