//! The desktop shell: Tauri commands as thin adapters over vdi-core, and the live pools feed
//! forwarded to the window as `pools-snapshot` events. No cluster logic lives here.

mod commands;
mod connect;
mod logging;
mod usb;

use std::sync::Mutex;

use tauri::Manager;
use vdi_core::cluster::KubeconfigSource;

/// Event carrying a whole [`vdi_core::model::PoolsSnapshot`] on every change.
pub const POOLS_EVENT: &str = "pools-snapshot";
/// Event carrying one [`vdi_core::model::CreateProgress`] step of a running pool create.
pub const CREATE_PROGRESS_EVENT: &str = "pool-create-progress";

/// What the commands share.
pub struct AppState {
    /// Where the kubeconfig comes from (`KUBECONFIG`, else `~/.kube/config`).
    pub source: KubeconfigSource,
    /// The open session: its live feed and the task forwarding it to the window.
    pub session: Mutex<Option<commands::Session>>,
    /// The log file the app writes (shown in the app).
    pub log_file: std::path::PathBuf,
    /// Every stream, forward and helper process the app started; all end when it exits.
    pub supervisor: vdi_core::session::Supervisor,
}

/// Builds and runs the app until its window closes.
pub fn run() {
    tauri::Builder::default()
        .setup(|app| {
            let log_dir = app.path().app_log_dir()?;
            let log_file = logging::init(&log_dir)?;
            tracing::info!(log = %log_file.display(), version = env!("CARGO_PKG_VERSION"), "Corral VDI Console starting");
            app.manage(AppState {
                source: KubeconfigSource::default(),
                session: Mutex::new(None),
                log_file,
                supervisor: vdi_core::session::Supervisor::new(),
            });
            connect::forward_session_changes(app.handle());
            usb::follow_devices(app.handle());
            stop_on_signals(app.handle());
            Ok(())
        })
        .invoke_handler(tauri::generate_handler![
            commands::app_info,
            commands::list_contexts,
            commands::open_session,
            commands::permissions,
            commands::assign_member,
            commands::claim_desktop,
            commands::unassign_member,
            commands::golden_candidates,
            commands::validate_new_pool,
            commands::create_pool,
            commands::delete_pool,
            connect::member_paths,
            connect::open_console,
            connect::open_viewer,
            connect::open_rdp,
            connect::save_rdp_file,
            connect::open_ssh,
            connect::list_sessions,
            connect::stop_session,
            connect::clear_ended_sessions,
            usb::usb_devices,
            usb::usb_redirect,
        ])
        .build(tauri::generate_context!())
        .unwrap_or_else(|err| {
            eprintln!("Corral VDI Console could not start: {err}");
            std::process::exit(1);
        })
        .run(|app, event| {
            if let tauri::RunEvent::Exit = event {
                // Every session ends with the app: streams closed, ports freed, helpers killed.
                app.state::<AppState>().supervisor.stop_all();
                tracing::info!("Corral VDI Console exiting");
            }
        });
}

/// SIGTERM and SIGINT end the app like closing its window, so its sessions end too.
fn stop_on_signals(app: &tauri::AppHandle) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("signal received: closing");
        app.state::<AppState>().supervisor.stop_all();
        app.exit(0);
    });
}
