//! The OS clipboard, for the window: text only, read and written through the backend
//! ([`arboard`]: X11 selections on Linux, the pasteboard on macOS, the Windows clipboard).
//!
//! Why not the page's own `navigator.clipboard`: WebKitGTK (the Linux webview) refuses a read
//! that no paste gesture started (`NotAllowedError`), and RDP in the app must hand the guest
//! the local clipboard whenever it changes, not on a paste. Neither command logs the text, only
//! its length.
//!
//! Reading is refused unless RDP in the app is active: the only time the window needs what the
//! user copied elsewhere (a password, say). Writing (the Copy buttons, the guest's copied text)
//! is always allowed.

use std::sync::Mutex;

use tauri::{AppHandle, Manager, State};
use vdi_core::error::{ErrorKind, ErrorView};

use crate::AppState;

/// The app's handle on the OS clipboard, opened on first use. It lives as long as the app: on
/// X11 text the app copied stays pasteable only while its owner does.
#[derive(Default)]
pub struct OsClipboard(Mutex<Option<arboard::Clipboard>>);

fn unavailable(e: impl std::fmt::Display) -> ErrorView {
    vdi_core::Error::rejected(
        ErrorKind::Config,
        format!("the OS clipboard is not available: {e}"),
        "check that the app runs in a desktop session (DISPLAY or WAYLAND_DISPLAY set)",
    )
    .view()
}

/// Runs `f` on the clipboard on a blocking thread (an X11 read waits for the owner's answer).
async fn with_clipboard<T: Send + 'static>(
    app: AppHandle,
    f: impl FnOnce(&mut arboard::Clipboard) -> Result<T, arboard::Error> + Send + 'static,
) -> Result<T, ErrorView> {
    tokio::task::spawn_blocking(move || {
        let state = app.state::<OsClipboard>();
        let mut guard = state.0.lock().map_err(unavailable)?;
        if guard.is_none() {
            *guard = Some(arboard::Clipboard::new().map_err(unavailable)?);
        }
        let clipboard = guard.as_mut().expect("opened above");
        f(clipboard).map_err(unavailable)
    })
    .await
    .map_err(unavailable)?
}

/// The text on the OS clipboard, or `None` when it holds none (empty, or only an image).
///
/// Errors: no RDP session in the app is active ([`ErrorKind::Refused`]; see the module doc); the
/// clipboard cannot be opened or read (no desktop session).
#[tauri::command]
#[specta::specta]
pub async fn clipboard_text(
    app: AppHandle,
    state: State<'_, AppState>,
) -> Result<Option<String>, ErrorView> {
    if !state.supervisor.rdp_in_app_active() {
        tracing::debug!("clipboard read refused: no RDP session in the app");
        return Err(vdi_core::Error::rejected(
            ErrorKind::Refused,
            "the app reads the clipboard only for RDP in the app, and no such session is open",
            "connect to a desktop with RDP in the app to share its clipboard",
        )
        .view());
    }
    let text = with_clipboard(app, |clipboard| match clipboard.get_text() {
        Ok(text) => Ok(Some(text)),
        Err(arboard::Error::ContentNotAvailable) => Ok(None),
        Err(e) => Err(e),
    })
    .await?;
    tracing::debug!(chars = text.as_deref().map(str::len), "clipboard read");
    Ok(text)
}

/// Puts `text` on the OS clipboard (it stays while the app runs).
///
/// Errors: the clipboard cannot be opened or written.
#[tauri::command]
#[specta::specta]
pub async fn set_clipboard_text(app: AppHandle, text: String) -> Result<(), ErrorView> {
    let chars = text.len();
    with_clipboard(app, move |clipboard| clipboard.set_text(text)).await?;
    tracing::debug!(chars, "clipboard written");
    Ok(())
}
