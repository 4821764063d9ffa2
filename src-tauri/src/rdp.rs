//! RDP in the app: the commands behind the RDP view. The web client (IronRDP, in the window)
//! speaks RDP; the backend starts its proxy session ([`Supervisor::start_rdp`]), keeps the
//! certificates the user accepted (trust on first use, by member) and, only when the user
//! ticks "remember", the user name and password in the OS keyring (Secret Service on Linux,
//! the Keychain on macOS, Credential Manager on Windows) — never in a file or a log.
//!
//! [`Supervisor::start_rdp`]: vdi_core::session::Supervisor::start_rdp

use serde::{Deserialize, Serialize};
use tauri::{AppHandle, Manager, State};
use vdi_core::error::{ErrorKind, ErrorView};
use vdi_core::rdp::trust::{KnownCertificates, Trust};
use vdi_core::session::RdpEndpoint;

use crate::AppState;
use crate::commands::stream_client;

/// An RDP session started for the RDP view, and what the user must be asked first.
#[derive(Debug, Clone, Serialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct RdpOpened {
    /// The proxy session, for the web client.
    pub endpoint: RdpEndpoint,
    /// The guest's certificate to the user: known, new or changed (then the user is asked
    /// before the web client connects).
    pub trust: Trust,
}

/// A user name and password for a member's RDP server.
#[derive(Debug, Clone, Serialize, Deserialize, specta::Type)]
#[serde(rename_all = "camelCase")]
pub struct RdpLogin {
    /// The user name (`user`, `DOMAIN\user` or `user@domain`).
    pub username: String,
    /// The password.
    pub password: String,
}

fn failure(kind: ErrorKind, message: String, suggestion: &str) -> ErrorView {
    vdi_core::Error::rejected(kind, message, suggestion).view()
}

fn known(app: &AppHandle) -> Result<KnownCertificates, ErrorView> {
    let dir = app.path().app_data_dir().map_err(|e| {
        failure(
            ErrorKind::Config,
            format!("no data folder for the accepted RDP certificates: {e}"),
            "set HOME (or XDG_DATA_HOME) for the app",
        )
    })?;
    Ok(KnownCertificates::new(dir.join("rdp-certificates.json")))
}

/// Starts RDP in the app for `member` ([`Supervisor::start_rdp`]) and says whether its
/// certificate is the one accepted before.
///
/// [`Supervisor::start_rdp`]: vdi_core::session::Supervisor::start_rdp
#[tauri::command]
#[specta::specta]
pub async fn open_rdp_in_app(
    app: AppHandle,
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<RdpOpened, ErrorView> {
    let client = stream_client(&state)?;
    let endpoint = state
        .supervisor
        .start_rdp(client, &namespace, &member)
        .await?;
    let trust = known(&app)?.check(
        &namespace,
        &member,
        endpoint.vm_uid.as_deref(),
        &endpoint.probe.fingerprint,
    );
    Ok(RdpOpened { endpoint, trust })
}

/// Records that the user accepted `fingerprint` as `member`'s RDP certificate, on its
/// VirtualMachine with `vm_uid` (the session's, [`RdpEndpoint::vm_uid`]).
#[tauri::command]
#[specta::specta]
pub async fn accept_rdp_certificate(
    app: AppHandle,
    namespace: String,
    member: String,
    vm_uid: Option<String>,
    fingerprint: String,
) -> Result<(), ErrorView> {
    known(&app)?
        .accept(&namespace, &member, vm_uid.as_deref(), &fingerprint)
        .map_err(|why| failure(ErrorKind::Config, why, "check the app's data folder"))
}

/// The keyring entry of `member`'s login (service `dev.corral.vdi-console/rdp`, account
/// `<namespace>/<member>`).
fn entry(namespace: &str, member: &str) -> Result<keyring::Entry, ErrorView> {
    keyring::Entry::new(
        "dev.corral.vdi-console/rdp",
        &format!("{namespace}/{member}"),
    )
    .map_err(keyring_failure)
}

fn keyring_failure(e: keyring::Error) -> ErrorView {
    failure(
        ErrorKind::Config,
        format!("the OS keyring is not available: {e}"),
        "on Linux, start a Secret Service (GNOME Keyring, KWallet) in your session; or leave \
         \"remember\" unticked and type the password each time",
    )
}

/// The login remembered for `member`, if any. A keyring that is not available remembers
/// nothing.
#[tauri::command]
#[specta::specta]
pub async fn saved_rdp_login(namespace: String, member: String) -> Option<RdpLogin> {
    let entry = entry(&namespace, &member).ok()?;
    let secret = entry.get_password().ok()?;
    serde_json::from_str(&secret).ok()
}

/// Remembers `login` for `member` in the OS keyring.
///
/// Errors: no keyring (kind `config`, with the fix).
#[tauri::command]
#[specta::specta]
pub async fn remember_rdp_login(
    namespace: String,
    member: String,
    login: RdpLogin,
) -> Result<(), ErrorView> {
    let secret = serde_json::to_string(&login)
        .map_err(|e| failure(ErrorKind::Other, e.to_string(), "report this as a bug"))?;
    entry(&namespace, &member)?
        .set_password(&secret)
        .map_err(keyring_failure)
}

/// Forgets the login remembered for `member` (nothing remembered is no error).
#[tauri::command]
#[specta::specta]
pub async fn forget_rdp_login(namespace: String, member: String) -> Result<(), ErrorView> {
    match entry(&namespace, &member)?.delete_credential() {
        Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
        Err(e) => Err(keyring_failure(e)),
    }
}
