//! The desktop shell: Tauri commands as thin adapters over vdi-core, and the live pools feed
//! forwarded to the window through the channel it connected the cluster with. No cluster logic
//! lives here.

pub mod bindings;
mod capacity;
mod clipboard;
mod commands;
mod connect;
mod entitlements;
mod events;
mod kubeconfig;
mod logging;
mod policy;
mod rdp;
mod usb;

use std::sync::Mutex;

use tauri::Manager;
use vdi_core::cluster::KubeconfigSource;

/// What the commands share.
pub struct AppState {
    /// Where the kubeconfig comes from (`KUBECONFIG`, else `~/.kube/config`).
    pub source: KubeconfigSource,
    /// The open cluster link: its live feed and the task forwarding it to the window.
    pub cluster: Mutex<Option<commands::ClusterLink>>,
    /// The cluster link opened while the window starts, until the window's first `connect_cluster`.
    pub prepared: Mutex<Option<commands::Prepared>>,
    /// Where the app's log files are (the file of the day is shown in the app:
    /// [`logging::current_file`]).
    pub log_dir: std::path::PathBuf,
    /// Every stream, forward and helper process the app started; all end when it exits.
    pub supervisor: vdi_core::session::Supervisor,
    /// Whether the window's page has finished loading once.
    pub page_loaded: std::sync::atomic::AtomicBool,
    /// The live Capacity view, while it is open.
    pub capacity: Mutex<Option<capacity::CapacityWatch>>,
}

/// What the app changed in its environment before the window system started, for the log.
static DISPLAY_NOTES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Sets up the display before anything else runs (call it first in `main`, while the process
/// has one thread): on Linux, WebKitGTK's DMA-BUF renderer is turned off unless the user chose
/// (`WEBKIT_DISABLE_DMABUF_RENDERER=1`: without it some GPU drivers and virtual machines show a
/// blank window), and a dead Wayland socket falls back to X11 when there is an X display, or
/// ends the app with the reason and the fix.
#[allow(unsafe_code)]
pub fn prepare_display() {
    #[cfg(target_os = "linux")]
    {
        let mut notes = Vec::new();
        if std::env::var_os("WEBKIT_DISABLE_DMABUF_RENDERER").is_none() {
            // SAFETY: called first in main, before any other thread exists.
            unsafe { std::env::set_var("WEBKIT_DISABLE_DMABUF_RENDERER", "1") };
            notes.push(
                "set WEBKIT_DISABLE_DMABUF_RENDERER=1 (blank windows on some GPUs otherwise)"
                    .to_owned(),
            );
        }
        if let Some(wayland) = std::env::var_os("WAYLAND_DISPLAY") {
            let socket = std::path::Path::new(&wayland);
            let path = if socket.is_absolute() {
                socket.to_path_buf()
            } else {
                std::env::var_os("XDG_RUNTIME_DIR")
                    .map(std::path::PathBuf::from)
                    .unwrap_or_default()
                    .join(socket)
            };
            if !path.exists() {
                if std::env::var_os("DISPLAY").is_some() {
                    // SAFETY: as above, still single-threaded.
                    unsafe {
                        std::env::remove_var("WAYLAND_DISPLAY");
                        std::env::set_var("GDK_BACKEND", "x11");
                    }
                    notes.push(format!(
                        "the Wayland socket {} does not exist: using X11 (DISPLAY) instead",
                        path.display()
                    ));
                } else {
                    eprintln!(
                        "Corral VDI Console cannot open a window: WAYLAND_DISPLAY names {}, which does \
                         not exist, and there is no X display (DISPLAY).\n\
                         fix: start it from your graphical login, or set WAYLAND_DISPLAY or \
                         DISPLAY to a running one",
                        path.display()
                    );
                    std::process::exit(1);
                }
            }
        }
        if let Ok(mut all) = DISPLAY_NOTES.lock() {
            all.extend(notes);
        }
    }
}

/// How long the page may take to load before the log says what to try.
const BLANK_WINDOW_HINT_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Builds and runs the app until its window closes.
pub fn run() {
    // The cluster's first answers take longest: ask for them while GTK and WebKit start (what
    // happens before the log is set up is recorded when the window connects to the cluster).
    let source = KubeconfigSource::default();
    let prepared = commands::Prepared::start(&source);
    let bindings = bindings::builder();
    let invoke_handler = bindings.invoke_handler();
    tauri::Builder::default()
        .setup(move |app| {
            // Before anything sends an event (sending one not mounted panics).
            bindings.mount_events(app);
            let log_dir = app.path().app_log_dir()?;
            logging::init(&log_dir)?;
            tracing::info!(log = %logging::current_file(&log_dir).display(), version = env!("CARGO_PKG_VERSION"), "Corral VDI Console starting");
            for note in DISPLAY_NOTES.lock().map(|n| n.clone()).unwrap_or_default() {
                tracing::info!(note, "display");
            }
            hint_if_blank(app.handle());
            kubeconfig::follow(app.handle(), source.clone());
            app.manage(clipboard::OsClipboard::default());
            app.manage(AppState {
                source,
                cluster: Mutex::new(None),
                prepared: Mutex::new(prepared),
                log_dir,
                supervisor: vdi_core::session::Supervisor::new(),
                page_loaded: std::sync::atomic::AtomicBool::new(false),
                capacity: Mutex::new(None),
            });
            connect::forward_session_changes(app.handle());
            usb::follow_devices(app.handle());
            stop_on_signals(app.handle());
            Ok(())
        })
        .on_page_load(|webview, payload| {
            if payload.event() == tauri::webview::PageLoadEvent::Finished {
                webview
                    .app_handle()
                    .state::<AppState>()
                    .page_loaded
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(url = %payload.url(), "page loaded");
            }
        })
        .invoke_handler(invoke_handler)
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

/// Logs which variables to try if the page has not loaded after a while (a blank window).
fn hint_if_blank(app: &tauri::AppHandle) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        tokio::time::sleep(BLANK_WINDOW_HINT_AFTER).await;
        let loaded = app
            .state::<AppState>()
            .page_loaded
            .load(std::sync::atomic::Ordering::Relaxed);
        if !loaded {
            tracing::warn!(
                after_seconds = BLANK_WINDOW_HINT_AFTER.as_secs(),
                "the window's page has not finished loading: if it stays blank, start the app \
                 with WEBKIT_DISABLE_COMPOSITING_MODE=1, or GDK_BACKEND=x11 (on Wayland); \
                 WEBKIT_DISABLE_DMABUF_RENDERER=1 is already set unless you set it"
            );
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
