//! Connect commands: the paths that reach a member, the in-app console, native viewers, RDP,
//! SSH, and the session list. Every stream, forward and helper runs in the app's one
//! [`Supervisor`], so the Sessions view lists them and they all end when the app exits.

use tauri::{AppHandle, Manager, State};
use tauri_specta::Event;
use vdi_core::connect::{self, Connector, MemberPaths, RdpFileSaved, SshOpened};
use vdi_core::error::{ErrorKind, ErrorView};
use vdi_core::session::{ConsoleEndpoint, SessionView};

use crate::AppState;
use crate::commands::stream_client;
use crate::events::SessionsEvent;

/// Forwards the supervisor's changes to the window as [`SessionsEvent`]s (the whole list).
pub fn forward_session_changes(app: &AppHandle) {
    let state = app.state::<AppState>();
    let supervisor = state.supervisor.clone();
    let mut changes = supervisor.subscribe();
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        loop {
            if let Err(e) = SessionsEvent(supervisor.list()).emit(&app) {
                tracing::warn!(error = %e, "could not send sessions to the window");
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Which paths reach `member` (VNC, RDP, SSH), each available or with the reason.
#[tauri::command]
#[specta::specta]
pub async fn member_paths(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<MemberPaths, ErrorView> {
    let client = stream_client(&state)?;
    connect::paths(&client, &namespace, &member)
        .await
        .map_err(ErrorView::from)
}

/// Opens `member`'s console for the in-app viewer (noVNC): a websocket on 127.0.0.1 with a
/// secret path. Without `take_over`, someone else viewing makes it fail with kind `busy`.
#[tauri::command]
#[specta::specta]
pub async fn open_console(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
    take_over: bool,
) -> Result<ConsoleEndpoint, ErrorView> {
    let client = stream_client(&state)?;
    state
        .supervisor
        .start_console(client, &namespace, &member, !take_over)
        .await
        .map_err(ErrorView::from)
}

/// Opens `member`'s console in the platform's viewer (remote-viewer, else TigerVNC):
/// [`Connector::open_viewer`].
#[tauri::command]
#[specta::specta]
pub async fn open_viewer(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
    take_over: bool,
) -> Result<SessionView, ErrorView> {
    connector(&state)?
        .open_viewer(&namespace, &member, take_over, None)
        .await
        .map_err(ErrorView::from)
}

/// Opens RDP to `member` with FreeRDP through a forward to guest port 3389:
/// [`Connector::open_rdp`].
#[tauri::command]
#[specta::specta]
pub async fn open_rdp(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<SessionView, ErrorView> {
    connector(&state)?
        .open_rdp(&namespace, &member, None)
        .await
        .map_err(ErrorView::from)
}

/// Starts a forward to `member`'s port 3389 and writes an `.rdp` file pointing at it into the
/// user's downloads folder (else the home folder), for another RDP client:
/// [`Connector::save_rdp_file`].
#[tauri::command]
#[specta::specta]
pub async fn save_rdp_file(
    app: AppHandle,
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<RdpFileSaved, ErrorView> {
    let dir = app
        .path()
        .download_dir()
        .or_else(|_| app.path().home_dir())
        .map_err(|e| config_error(format!("no folder to save the .rdp file in: {e}")))?;
    let path = dir.join(format!("{member}.rdp"));
    connector(&state)?
        .save_rdp_file(&namespace, &member, None, &path)
        .await
        .map_err(ErrorView::from)
}

/// Starts a forward to `member`'s port 22, and ssh in the system's terminal when one is found,
/// with the member's host key known under the same alias as the CLI's `ssh`:
/// [`Connector::open_ssh`].
#[tauri::command]
#[specta::specta]
pub async fn open_ssh(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
    user: String,
) -> Result<SshOpened, ErrorView> {
    connector(&state)?
        .open_ssh(&namespace, &member, &user)
        .await
        .map_err(ErrorView::from)
}

/// Checks a login on a desktop's guest for SSH without contacting anything
/// ([`vdi_core::validate::guest_login`], the rule [`open_ssh`] and the CLI's `ssh` apply
/// first): the dialog shows its refusal as you type.
#[tauri::command]
#[specta::specta]
pub fn validate_guest_login(login: String) -> Result<(), ErrorView> {
    vdi_core::validate::guest_login(&login).map_err(ErrorView::from)
}

/// Every session (console, viewers, forwards, helpers), oldest first.
#[tauri::command]
#[specta::specta]
pub fn list_sessions(state: State<'_, AppState>) -> Vec<SessionView> {
    state.supervisor.list()
}

/// Stops session `id` (its streams, listener and helper). Returns whether it was running.
#[tauri::command]
#[specta::specta]
pub fn stop_session(state: State<'_, AppState>, id: u32) -> bool {
    state.supervisor.stop(id)
}

/// Removes ended sessions from the list.
#[tauri::command]
#[specta::specta]
pub fn clear_ended_sessions(state: State<'_, AppState>) {
    state.supervisor.forget_ended();
}

/// The connect actions on the open cluster link's stream client, their sessions kept by the
/// app's one supervisor.
fn connector(state: &State<'_, AppState>) -> Result<Connector, ErrorView> {
    Ok(Connector::new(
        stream_client(state)?,
        state.supervisor.clone(),
    ))
}

fn config_error(message: String) -> ErrorView {
    ErrorView {
        kind: ErrorKind::Other,
        message,
        suggestion: None,
        retryable: false,
    }
}
