//! Tauri commands: each is one call into vdi-core. Errors cross to the UI as
//! [`vdi_core::model::ErrorView`] (kind, message, suggestion), never as bare strings.

use tauri::{AppHandle, Emitter, State};
use vdi_core::claim::{self, ClaimOptions, Claimed, Released};
use vdi_core::cluster::{ServerClock, whoami};
use vdi_core::golden::{self, GoldenCandidate, NewPool};
use vdi_core::model::{AppInfo, Contexts, ErrorView, Scope, SessionInfo};
use vdi_core::model::{PoolCreated, PoolDeleted};
use vdi_core::pool::{self, CreatePool, DeletePool};
use vdi_core::watch::PoolFeed;

use crate::{AppState, CREATE_PROGRESS_EVENT, POOLS_EVENT};

/// An open session: dropping it stops the feed and its forwarding.
pub struct Session {
    client: kube::Client,
    identity: Option<String>,
    clock: ServerClock,
    _feed: PoolFeed,
    forward: tauri::async_runtime::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.forward.abort();
    }
}

/// Version, log file and kubeconfig paths.
#[tauri::command]
pub fn app_info(state: State<'_, AppState>) -> AppInfo {
    AppInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        log_path: state.log_file.display().to_string(),
        kubeconfig_paths: state
            .source
            .paths()
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    }
}

/// The kubeconfig's contexts.
#[tauri::command]
pub fn list_contexts(state: State<'_, AppState>) -> Result<Contexts, ErrorView> {
    state.source.contexts().map_err(|e| e.view())
}

/// Connects to `context` (`null`: current) and starts the live pools feed for `scope`,
/// replacing the previous session. Identity failures do not fail the call: the feed reports
/// reachability and RBAC problems itself.
#[tauri::command]
pub async fn open_session(
    app: AppHandle,
    state: State<'_, AppState>,
    context: Option<String>,
    scope: Scope,
) -> Result<SessionInfo, ErrorView> {
    // Stop the old feed first, so no stale snapshot arrives after the new one.
    drop(state.session.lock().map_err(|_| poisoned())?.take());
    let conn = state
        .source
        .connect(context.as_deref())
        .await
        .map_err(|e| e.view())?;
    let (identity, identity_error) = match whoami(&conn.client).await {
        Ok(id) => (Some(id), None),
        Err(e) => {
            tracing::warn!(error = %e, "identity unknown");
            (None, Some(e.view()))
        }
    };
    let clock = ServerClock::measure(&conn.client)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "API server clock unknown; judging with the local clock");
            ServerClock::default()
        });
    tracing::info!(
        context = context.as_deref().unwrap_or("(current)"),
        namespace = scope.namespace().unwrap_or("(all)"),
        user = identity
            .as_ref()
            .map_or("(unknown)", |i| i.username.as_str()),
        "session opened"
    );
    let feed = PoolFeed::spawn(conn.client.clone(), scope.clone(), clock);
    let mut rx = feed.subscribe();
    let forward = tauri::async_runtime::spawn(async move {
        loop {
            let snapshot = rx.borrow_and_update().clone();
            if let Err(e) = app.emit(POOLS_EVENT, &snapshot) {
                tracing::warn!(error = %e, "could not send pools to the window");
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    *state.session.lock().map_err(|_| poisoned())? = Some(Session {
        client: conn.client.clone(),
        identity: identity.as_ref().map(|i| i.username.clone()),
        clock,
        _feed: feed,
        forward,
    });
    Ok(SessionInfo {
        context,
        identity,
        identity_error,
        scope,
    })
}

/// The open session's client, identity and clock.
fn current(
    state: &State<'_, AppState>,
) -> Result<(kube::Client, Option<String>, ServerClock), ErrorView> {
    let guard = state.session.lock().map_err(|_| poisoned())?;
    let session = guard.as_ref().ok_or_else(|| ErrorView {
        kind: vdi_core::model::ErrorKind::Invalid,
        message: "not connected to a cluster".into(),
        suggestion: Some("pick a context first".into()),
        retryable: false,
    })?;
    Ok((
        session.client.clone(),
        session.identity.clone(),
        session.clock,
    ))
}

fn identity_required(identity: Option<String>) -> Result<String, ErrorView> {
    identity.ok_or_else(|| ErrorView {
        kind: vdi_core::model::ErrorKind::Unauthorized,
        message: "the cluster did not say who you are (SelfSubjectReview failed)".into(),
        suggestion: Some("check your credentials, then pick the context again".into()),
        retryable: false,
    })
}

/// Hands a free member of `pool` to `user` (an administrator's assign).
#[tauri::command]
pub async fn assign_member(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
    user: String,
) -> Result<Claimed, ErrorView> {
    let (client, _, clock) = current(&state)?;
    let user = user.trim().to_owned();
    claim::assign(
        &client,
        &namespace,
        &pool,
        &user,
        &clock,
        &ClaimOptions::default(),
    )
    .await
    .map_err(|e| e.view())
}

/// Claims a member of `pool` for the identity the cluster reports ("Get a desktop").
#[tauri::command]
pub async fn claim_desktop(
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
) -> Result<Claimed, ErrorView> {
    let (client, identity, clock) = current(&state)?;
    let me = identity_required(identity)?;
    claim::assign(
        &client,
        &namespace,
        &pool,
        &me,
        &clock,
        &ClaimOptions::default(),
    )
    .await
    .map_err(|e| e.view())
}

/// Releases `member` as the identity the cluster reports (only a Lease's holder may release
/// an active claim).
#[tauri::command]
pub async fn unassign_member(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
) -> Result<Released, ErrorView> {
    let (client, identity, clock) = current(&state)?;
    let me = identity_required(identity)?;
    claim::unassign(&client, &namespace, &member, &me, &clock)
        .await
        .map_err(|e| e.view())
}

/// The namespace's VMs that could be golden VMs, with power state and clone problems.
#[tauri::command]
pub async fn golden_candidates(
    state: State<'_, AppState>,
    namespace: String,
) -> Result<Vec<GoldenCandidate>, ErrorView> {
    let (client, _, _) = current(&state)?;
    golden::golden_candidates(&client, &namespace)
        .await
        .map_err(|e| e.view())
}

/// Checks a "New pool" request without contacting the cluster (the same rules as the CLI):
/// returns the member names it would create, or why it is refused.
#[tauri::command]
pub fn validate_new_pool(request: NewPool) -> Result<Vec<String>, ErrorView> {
    pool::validate_create(&CreatePool::from(request)).map_err(|e| e.view())
}

/// Creates a pool, sending each step as a `pool-create-progress` event
/// ([`vdi_core::model::CreateProgress`]) while it runs.
#[tauri::command]
pub async fn create_pool(
    app: AppHandle,
    state: State<'_, AppState>,
    request: NewPool,
) -> Result<PoolCreated, ErrorView> {
    let (client, _, _) = current(&state)?;
    let request = CreatePool::from(request);
    tracing::info!(namespace = %request.namespace, pool = %request.name, golden = %request.golden, size = request.size, "pool create requested");
    pool::create_pool(&client, &request, |step| {
        if let Err(e) = app.emit(CREATE_PROGRESS_EVENT, &step) {
            tracing::warn!(error = %e, "could not send create progress to the window");
        }
    })
    .await
    .map_err(|e| e.view())
}

/// Deletes a pool (members, Leases, leftover clones); refuses while members are assigned
/// unless `force`.
#[tauri::command]
pub async fn delete_pool(
    state: State<'_, AppState>,
    namespace: String,
    name: String,
    force: bool,
) -> Result<PoolDeleted, ErrorView> {
    let (client, _, clock) = current(&state)?;
    tracing::info!(%namespace, pool = %name, force, "pool delete requested");
    let request = DeletePool {
        namespace,
        name,
        force,
    };
    pool::delete_pool(&client, &request, &clock)
        .await
        .map_err(|e| e.view())
}

fn poisoned() -> ErrorView {
    ErrorView {
        kind: vdi_core::model::ErrorKind::Other,
        message: "internal error: the session lock was poisoned".into(),
        suggestion: Some("restart the app".into()),
        retryable: false,
    }
}
