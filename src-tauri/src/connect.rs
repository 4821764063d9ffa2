//! Connect commands: the paths that reach a member, the in-app console, native viewers, RDP,
//! SSH, and the session list. Every stream, forward and helper runs in the app's one
//! [`Supervisor`], so the Sessions view lists them and they all end when the app exits.

use tauri::{AppHandle, Emitter, Manager, State};
use vdi_core::connect::{self, MemberPaths, RDP_PORT, RdpFileSaved, SSH_PORT, SshOpened};
use vdi_core::error::{ErrorKind, ErrorView};
use vdi_core::session::{ConsoleEndpoint, SessionKind, SessionView, Target};

use crate::AppState;
use crate::commands::stream_client;

/// Event carrying the whole session list (`SessionView[]`) on every change.
pub const SESSIONS_EVENT: &str = "sessions-changed";

/// Forwards the supervisor's changes to the window as [`SESSIONS_EVENT`] events.
pub fn forward_session_changes(app: &AppHandle) {
    let state = app.state::<AppState>();
    let supervisor = state.supervisor.clone();
    let mut changes = supervisor.subscribe();
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        loop {
            if let Err(e) = app.emit(SESSIONS_EVENT, supervisor.list()) {
                tracing::warn!(error = %e, "could not send sessions to the window");
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

fn view(e: vdi_core::Error) -> ErrorView {
    e.view()
}

/// Which paths reach `member` (VNC, RDP, SSH), each available or with the reason.
#[tauri::command]
pub async fn member_paths(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<MemberPaths, ErrorView> {
    let client = stream_client(&state)?;
    connect::paths(&client, &namespace, &member)
        .await
        .map_err(view)
}

/// Opens `member`'s console for the in-app viewer (noVNC): a websocket on 127.0.0.1 with a
/// secret path. Without `take_over`, someone else viewing makes it fail with kind `busy`.
#[tauri::command]
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
        .map_err(view)
}

/// Opens `member`'s console in the platform's viewer (remote-viewer, else TigerVNC).
#[tauri::command]
pub async fn open_viewer(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
    take_over: bool,
) -> Result<SessionView, ErrorView> {
    let launch = connect::viewer_command(0, &member).map_err(view)?;
    let client = stream_client(&state)?;
    // Try the console once first, so a refusal is said now rather than in the viewer.
    let probe = vdi_core::stream::open(
        &client,
        &namespace,
        &member,
        vdi_core::stream::Subresource::Vnc {
            preserve_session: !take_over,
        },
    )
    .await
    .map_err(view)?;
    drop(probe);
    let started = state
        .supervisor
        .start_forward(
            client,
            &namespace,
            &member,
            SessionKind::Viewer,
            Target::Vnc {
                preserve_session: !take_over,
            },
            None,
        )
        .await
        .map_err(view)?;
    let launch = connect::viewer_command(started.local.port(), &format!("{member} ({namespace})"))
        .unwrap_or(launch);
    helper(&state, started.id, launch)
}

/// Opens RDP to `member` with FreeRDP through a forward to guest port 3389.
#[tauri::command]
pub async fn open_rdp(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<SessionView, ErrorView> {
    // Find the client before listening, so a missing one leaves nothing behind.
    connect::rdp_command(0, &member).map_err(view)?;
    let started = forward(&state, &namespace, &member, SessionKind::Rdp, RDP_PORT).await?;
    let launch = connect::rdp_command(started.local.port(), &member).map_err(view)?;
    helper(&state, started.id, launch)
}

/// Starts a forward to `member`'s port 3389 and writes an `.rdp` file pointing at it into the
/// user's downloads folder, for another RDP client.
#[tauri::command]
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
    let started = forward(&state, &namespace, &member, SessionKind::Rdp, RDP_PORT).await?;
    let path = dir.join(format!("{member}.rdp"));
    if let Err(e) = std::fs::write(&path, connect::rdp_file(started.local.port())) {
        state.supervisor.stop(started.id);
        return Err(config_error(format!(
            "cannot write {}: {e}",
            path.display()
        )));
    }
    Ok(RdpFileSaved {
        session: session(&state, started.id)?,
        path: path.display().to_string(),
    })
}

/// Starts a forward to `member`'s port 22, and ssh in the system's terminal when one is found,
/// with the member's host key known under the same alias as the CLI's `ssh`
/// ([`connect::ssh_host_alias`]).
#[tauri::command]
pub async fn open_ssh(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
    user: String,
) -> Result<SshOpened, ErrorView> {
    vdi_core::validate::identity(&user).map_err(view)?;
    let started = forward(&state, &namespace, &member, SessionKind::Ssh, SSH_PORT).await?;
    let port = started.local.port();
    let command_line = connect::ssh_line(port, &user, &namespace, &member);
    let mut ssh = vec!["ssh".to_owned()];
    ssh.extend(connect::ssh_args(port, &user, &namespace, &member));
    let terminal = match connect::terminal_command(&ssh) {
        Some(launch) => state
            .supervisor
            .attach_helper(started.id, &launch.program, &launch.args, None)
            .is_ok(),
        None => false,
    };
    Ok(SshOpened {
        session: session(&state, started.id)?,
        command_line,
        terminal,
    })
}

/// Every session (console, viewers, forwards, helpers), oldest first.
#[tauri::command]
pub fn list_sessions(state: State<'_, AppState>) -> Vec<SessionView> {
    state.supervisor.list()
}

/// Stops session `id` (its streams, listener and helper). Returns whether it was running.
#[tauri::command]
pub fn stop_session(state: State<'_, AppState>, id: u32) -> bool {
    state.supervisor.stop(id)
}

/// Removes ended sessions from the list.
#[tauri::command]
pub fn clear_ended_sessions(state: State<'_, AppState>) {
    state.supervisor.forget_ended();
}

async fn forward(
    state: &State<'_, AppState>,
    namespace: &str,
    member: &str,
    kind: SessionKind,
    port: u16,
) -> Result<vdi_core::session::Started, ErrorView> {
    let client = stream_client(state)?;
    // Try the port once first, so a closed port is said now, before anything listens.
    let probe = vdi_core::stream::open(
        &client,
        namespace,
        member,
        vdi_core::stream::Subresource::PortForward { port },
    )
    .await
    .map_err(view)?;
    drop(probe);
    state
        .supervisor
        .start_forward(client, namespace, member, kind, Target::Port(port), None)
        .await
        .map_err(view)
}

fn helper(
    state: &State<'_, AppState>,
    id: u32,
    launch: connect::Launch,
) -> Result<SessionView, ErrorView> {
    if let Err(e) = state
        .supervisor
        .attach_helper(id, &launch.program, &launch.args, launch.stdin)
    {
        state.supervisor.stop(id);
        return Err(view(e));
    }
    session(state, id)
}

fn session(state: &State<'_, AppState>, id: u32) -> Result<SessionView, ErrorView> {
    state
        .supervisor
        .get(id)
        .ok_or_else(|| config_error(format!("session {id} ended at once")))
}

fn config_error(message: String) -> ErrorView {
    ErrorView {
        kind: ErrorKind::Other,
        message,
        suggestion: None,
        retryable: false,
    }
}
