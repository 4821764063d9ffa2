//! GPU and host-device capacity: the New pool preview and the live Capacity view, forwarded to
//! the window as `capacity-snapshot` events while the view is open.

use tauri::{AppHandle, State};
use tauri_specta::Event;
use vdi_core::capacity::{CapacityFeed, CapacityPlan};
use vdi_core::error::ErrorView;

use crate::AppState;
use crate::commands::{current, poisoned};
use crate::events::CapacityEvent;

/// The live Capacity view while it is open: dropping it stops the watches and forwarding.
pub struct CapacityWatch {
    _feed: CapacityFeed,
    forward: tauri::async_runtime::JoinHandle<()>,
}

impl Drop for CapacityWatch {
    fn drop(&mut self) {
        self.forward.abort();
    }
}

/// Whether a pool of `size` cloned from `golden` in `namespace` fits the cluster's devices
/// now, node by node ([`vdi_core::pool::capacity_preview`]); creates nothing. A golden VM
/// without devices is admitted after one read of the VM.
#[tauri::command]
#[specta::specta]
pub async fn capacity_preview(
    state: State<'_, AppState>,
    namespace: String,
    golden: String,
    size: u32,
) -> Result<CapacityPlan, ErrorView> {
    let (client, _) = current(&state)?;
    vdi_core::pool::capacity_preview(&client, &namespace, &golden, size)
        .await
        .map_err(ErrorView::from)
}

/// Starts (or restarts, on the connected cluster) the live Capacity view: a snapshot now
/// and on every change, as `capacity-snapshot` events, until [`unwatch_capacity`]. Async: the
/// feed's tasks need the async runtime, which synchronous commands (run on the main thread)
/// do not have.
#[tauri::command]
#[specta::specta]
pub async fn watch_capacity(app: AppHandle, state: State<'_, AppState>) -> Result<(), ErrorView> {
    let (client, _) = current(&state)?;
    let mut slot = state.capacity.lock().map_err(|_| poisoned())?;
    drop(slot.take());
    let feed = CapacityFeed::spawn(client);
    let mut rx = feed.subscribe();
    let forward = tauri::async_runtime::spawn(async move {
        loop {
            let snapshot = rx.borrow_and_update().clone();
            if let Err(e) = CapacityEvent(snapshot).emit(&app) {
                tracing::warn!(error = %e, "could not send capacity to the window");
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    *slot = Some(CapacityWatch {
        _feed: feed,
        forward,
    });
    Ok(())
}

/// Stops the live Capacity view's watches (the view closed).
#[tauri::command]
#[specta::specta]
pub async fn unwatch_capacity(state: State<'_, AppState>) -> Result<(), ErrorView> {
    drop(state.capacity.lock().map_err(|_| poisoned())?.take());
    Ok(())
}
