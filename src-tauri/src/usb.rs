//! USB commands: the live list of local devices and redirecting one into your own running
//! desktop. The redirection is a session of the app's supervisor (kind `usb`), so it shows in
//! Sessions and ends when the app exits.

use tauri::{AppHandle, Manager, State};
use tauri_specta::Event;
use vdi_core::error::ErrorView;
use vdi_core::session::SessionView;
use vdi_core::usb::{self, DeviceSpec, UsbList};

use crate::AppState;
use crate::commands::{actor, stream_client};
use crate::events::UsbEvent;

/// Follows local USB devices (libusb hot-plug, else a re-list each second) and sends every
/// change to the window as a [`UsbEvent`] (the whole [`UsbList`]). Runs for the app's lifetime.
pub fn follow_devices(app: &AppHandle) {
    let watch = usb::UsbWatch::spawn();
    let mut rx = watch.subscribe();
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let _watch = watch;
        loop {
            let list = rx.borrow_and_update().clone();
            if let Err(e) = UsbEvent(list).emit(&app) {
                tracing::warn!(error = %e, "could not send USB devices to the window");
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}

/// The local USB devices now (read off the main thread: libusb and sysfs block).
#[tauri::command]
#[specta::specta]
pub async fn usb_devices() -> Result<UsbList, ErrorView> {
    tauri::async_runtime::spawn_blocking(usb::current)
        .await
        .map_err(|e| ErrorView {
            kind: vdi_core::error::ErrorKind::Other,
            message: format!("reading the USB devices failed: {e}"),
            suggestion: None,
            retryable: true,
        })
}

/// Redirects `device` (`vid:pid` or `bus-address`) into `member`, after the checks of
/// [`usb::check_redirect`] (your desktop, running, clientPassthrough, present, writable,
/// usbredirect installed). The window shows the security notice and asks first.
#[tauri::command]
#[specta::specta]
pub async fn usb_redirect(
    app: AppHandle,
    state: State<'_, AppState>,
    namespace: String,
    member: String,
    device: String,
) -> Result<SessionView, ErrorView> {
    let spec = DeviceSpec::parse(&device)?;
    let (actor, _) = actor(&state)?;
    let streams = stream_client(&state)?;
    let (found, program) = usb::check_redirect(&actor, &namespace, &member, &spec).await?;
    let supervisor = app.state::<AppState>().supervisor.clone();
    let id = supervisor
        .start_usb(streams, &namespace, &member, &found, &spec, &program)
        .await?;
    supervisor.get(id).ok_or_else(|| ErrorView {
        kind: vdi_core::error::ErrorKind::Other,
        message: format!("the redirection of {} ended at once", found.id),
        suggestion: Some("look at Sessions for the reason".into()),
        retryable: false,
    })
}
