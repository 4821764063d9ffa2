//! Follows the kubeconfig files: when one is written, replaced or removed, the window is told
//! (`kubeconfig-changed`) and reads the contexts again; it reconnects when its context changed
//! or its connection was failing (a cluster that came back on a new address, a renewed token).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tauri::AppHandle;
use tauri_specta::Event;
use vdi_core::cluster::{KubeconfigChanged, KubeconfigSource};

use crate::events::KubeconfigEvent;

/// Tools write a kubeconfig in several steps (a temporary file, then a rename): one event per
/// burst, once it has been quiet this long.
const SETTLE: Duration = Duration::from_millis(250);

/// Where the change of `file` is seen: its folder, or while that is missing the nearest folder
/// above it that exists, from which the missing one is seen being made again (`sandbox down`
/// removes a sandbox's folder with its kubeconfig, `sandbox up` makes both again).
fn watch_point(file: &Path) -> Option<PathBuf> {
    file.ancestors()
        .skip(1)
        .find(|p| p.is_dir())
        .map(PathBuf::from)
}

/// Moves the watches of `watcher` from `points` to where `files` are seen now
/// ([`watch_point`]). A folder removed has already lost its watch; unwatching it fails
/// harmlessly.
fn rearm(watcher: &mut RecommendedWatcher, files: &[PathBuf], points: &mut HashSet<PathBuf>) {
    let wanted: HashSet<PathBuf> = files.iter().filter_map(|f| watch_point(f)).collect();
    for gone in points.difference(&wanted) {
        let _ = watcher.unwatch(gone);
    }
    for new in wanted.difference(points) {
        if let Err(e) = watcher.watch(new, RecursiveMode::NonRecursive) {
            tracing::warn!(folder = %new.display(), error = %e, "cannot watch a kubeconfig folder");
        }
    }
    *points = wanted;
}

/// Watches the folders holding the files of `source` (a file replaced by a rename is only seen
/// from its folder; a folder removed, from the folder above it until it is made again) and
/// tells the window about changes to those files, naming the contexts they changed. The watch
/// lasts as long as the app; nothing is watched (logged) when the system refuses.
pub fn follow(app: &AppHandle, source: KubeconfigSource) {
    let files = source.paths();
    let wanted = files.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    // A kubeconfig file, or a folder on the way to one (made, removed or renamed).
    let mut watcher =
        match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if let Ok(event) = event
                && !event.kind.is_access()
                && event
                    .paths
                    .iter()
                    .any(|p| wanted.iter().any(|file| file.starts_with(p)))
            {
                let _ = tx.send(());
            }
        }) {
            Ok(watcher) => watcher,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the kubeconfig files");
                return;
            }
        };
    let mut points = HashSet::new();
    rearm(&mut watcher, &files, &mut points);
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let mut last = source.fingerprints().unwrap_or_default();
        while rx.recv().await.is_some() {
            rearm(&mut watcher, &files, &mut points);
            // Let the burst settle, following folders as they come and go.
            while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {
                rearm(&mut watcher, &files, &mut points);
            }
            let now = source.fingerprints().unwrap_or_default();
            let changed = KubeconfigChanged {
                changed_contexts: KubeconfigSource::changed_contexts(&last, &now),
            };
            last = now;
            tracing::info!(contexts = ?changed.changed_contexts, "the kubeconfig changed");
            if let Err(e) = KubeconfigEvent(changed).emit(&app) {
                tracing::warn!(error = %e, "could not tell the window the kubeconfig changed");
            }
        }
    });
}
