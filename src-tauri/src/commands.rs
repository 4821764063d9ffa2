//! Tauri commands: each is one call into vdi-core. Errors cross to the UI as
//! [`vdi_core::error::ErrorView`] (kind, message, suggestion), never as bare strings.

use std::sync::atomic::{AtomicU32, Ordering};

use tauri::ipc::Channel;
use tauri::{AppHandle, State};
use tauri_specta::Event;
use vdi_core::claim::cluster_half::BrokerBadge;
use vdi_core::claim::{self, ClaimOptions, Claimed, Released, UnassignOptions};
use vdi_core::clock::ServerClock;
use vdi_core::cluster::{AppInfo, ClusterInfo, Contexts};
use vdi_core::credentials::CredentialState;
use vdi_core::error::ErrorView;
use vdi_core::guard::GuardStatus;
use vdi_core::identity::{self, Actor, Permissions};
use vdi_core::link::{self, Forwarding, Link, Sinks};
use vdi_core::managed::create::{self, NewPool};
use vdi_core::pool::{self, DeletePool, GoldenCandidate, PoolCreated, PoolDeleted};
use vdi_core::scope::Scope;
use vdi_core::state::ClaimSide;
use vdi_core::watch::PoolsUpdate;

use crate::AppState;
use crate::events::{BrokerEvent, ClaimProgressEvent, CreateProgressEvent};

/// The number of the next cluster link's pools feed (see [`vdi_core::watch::PoolsUpdate::feed`]).
static NEXT_FEED: AtomicU32 = AtomicU32::new(1);

/// The open connection to a cluster: dropping it stops the feed and its forwarding.
pub struct ClusterLink {
    /// The clients, who acts, the clock, the guard and the live feed.
    link: Link,
    /// Sends the pools and the credentials to the window's channels and the broker's badge as
    /// a `broker-status` event ([`Link::forward`]); stopped when dropped.
    _forwarding: Forwarding,
    /// Renews the identity's claims while the app has a session open on them (managed pools;
    /// [`vdi_core::session::ClaimRenewal`]): dropped with the link, so a new context's identity
    /// never renews the old one's claims. `None` while the cluster does not say who you are.
    _renewal: Option<vdi_core::session::ClaimRenewal>,
}

/// Version, log file and kubeconfig paths.
#[tauri::command]
#[specta::specta]
pub fn app_info(state: State<'_, AppState>) -> AppInfo {
    AppInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        log_path: crate::logging::current_file(&state.log_dir)
            .display()
            .to_string(),
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
#[specta::specta]
pub fn list_contexts(state: State<'_, AppState>) -> Result<Contexts, ErrorView> {
    state.source.contexts().map_err(ErrorView::from)
}

/// The cluster link the app opens while GTK, WebKit and its window start, for the kubeconfig's
/// current context in the namespace the window will ask for
/// ([`vdi_core::cluster::ContextInfo::start_namespace`]): the window's first `connect_cluster`
/// takes it over instead of starting from nothing, so the cluster's first answers arrive while
/// WebKit is still starting.
pub struct Prepared {
    /// The current context's name when it was prepared.
    context: String,
    scope: Scope,
    opening: tauri::async_runtime::JoinHandle<vdi_core::Result<Link>>,
}

impl Prepared {
    /// Starts connecting to the current context; `None` when the kubeconfig names no
    /// current context (the window lets the user pick one) or cannot be read (the window says
    /// why).
    pub fn start(source: &vdi_core::cluster::KubeconfigSource) -> Option<Prepared> {
        let (current, scope) = source.start_scope(None).ok()?;
        let (source, task_scope) = (source.clone(), scope.clone());
        let opening = tauri::async_runtime::spawn(async move {
            link::establish(&source, None, &task_scope).await
        });
        Some(Prepared {
            context: current,
            scope,
            opening,
        })
    }

    /// The prepared link, once open, when a request for `context` (`None`: current) and
    /// `scope` is the one prepared; `None` when it is another, or the prepared one failed or
    /// was cut short (the caller connects afresh rather than show an old error).
    async fn take_over(mut self, context: Option<&str>, scope: &Scope) -> Option<Link> {
        if !(context.is_none_or(|c| c == self.context) && *scope == self.scope) {
            return None;
        }
        (&mut self.opening).await.ok()?.ok()
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // Not taken over: its feed must not keep watching.
        self.opening.abort();
    }
}

/// Connects to `context` (`null`: current) and starts the live pools feed for `scope` (`null`:
/// the context's start namespace, [`vdi_core::cluster::ContextInfo::start_namespace`], so that
/// the window can ask before it has read the contexts), replacing the previous link (the
/// first call takes over the link prepared at start, [`Prepared`], when it asks for the
/// same). Identity failures do not fail the call: the feed reports reachability and RBAC
/// problems itself.
///
/// Errors: `scope` is null and the kubeconfig names no current context (or not `context`);
/// the kubeconfig cannot be read; a bad namespace name.
///
/// The link streams to the window through the two channels it passes (Tauri channels, not
/// events: ordered, bound to this link, and a large message is fetched by the page rather
/// than evaluated as a script): `pools` gets a [`PoolsUpdate`] now and on every change (the
/// whole list first, then the pools that changed), `credentials` the [`CredentialState`] now
/// and on every change (an exec plugin's credentials renewed, or the plugin failing). Both end
/// when the next `connect_cluster` replaces this link.
#[tauri::command]
#[specta::specta]
pub async fn connect_cluster(
    app: AppHandle,
    state: State<'_, AppState>,
    context: Option<String>,
    scope: Option<Scope>,
    pools: Channel<PoolsUpdate>,
    credentials: Channel<CredentialState>,
) -> Result<ClusterInfo, ErrorView> {
    // Stop the old feed first, so no stale snapshot arrives after the new one.
    drop(state.cluster.lock().map_err(|_| poisoned())?.take());
    // The Capacity view watched the old cluster: the window starts it again if it is open.
    drop(state.capacity.lock().map_err(|_| poisoned())?.take());
    let prepared = state.prepared.lock().map_err(|_| poisoned())?.take();
    let scope = match scope {
        Some(scope) => scope,
        None => state.source.start_scope(context.as_deref())?.1,
    };
    let taken = match prepared {
        Some(prepared) => prepared.take_over(context.as_deref(), &scope).await,
        None => None,
    };
    let from_start = taken.is_some();
    let link = match taken {
        Some(link) => link,
        None => link::establish(&state.source, context.as_deref(), &scope).await?,
    };
    let actor = link.actor.as_ref().ok();
    // Logged here, not where it happened: a link prepared at start-up may get that far before
    // the log is set up.
    let identity_error = link.actor.as_ref().err().map(vdi_core::Error::view);
    tracing::info!(
        context = context.as_deref().unwrap_or("(current)"),
        namespace = scope.namespace().unwrap_or("(all)"),
        user = actor.map_or("(unknown)", |a| a.username()),
        guard = ?link.guard.as_ref().map(|g| g.state),
        broker = ?link.broker.as_ref().map(|b| b.state),
        prepared = from_start,
        "cluster connected"
    );
    if let Some(e) = &identity_error {
        tracing::warn!(error = %e.message, "identity unknown");
    }
    let forwarding = link.forward(
        NEXT_FEED.fetch_add(1, Ordering::Relaxed),
        Sinks {
            pools: Box::new(move |update| {
                if let Err(e) = pools.send(update) {
                    tracing::warn!(error = %e, "could not send pools to the window");
                }
            }),
            credentials: Box::new(move |state| {
                if let Err(e) = credentials.send(state) {
                    tracing::warn!(error = %e, "could not send the credential state to the window");
                }
            }),
            broker: Box::new(move |badge| {
                if let Err(e) = BrokerEvent(badge).emit(&app) {
                    tracing::warn!(error = %e, "could not send the broker's status to the window");
                }
            }),
        },
    );
    let info = ClusterInfo {
        context,
        identity: actor.map(|a| a.identity().clone()),
        identity_error,
        scope,
        guard: link.guard.clone(),
    };
    let renewal = actor.map(|a| state.supervisor.renew_claims(a.clone()));
    *state.cluster.lock().map_err(|_| poisoned())? = Some(ClusterLink {
        link,
        _forwarding: forwarding,
        _renewal: renewal,
    });
    Ok(info)
}

/// The open cluster link's broker: its badge beside the guard's ("broker: <leader>", "broker:
/// no leader", "no broker") with its detail, and the notice the client-side flow gets. Kept
/// current while the link lives; each change after this is sent as a `broker-status` event.
#[tauri::command]
#[specta::specta]
pub fn broker_status(state: State<'_, AppState>) -> Result<BrokerBadge, ErrorView> {
    let guard = state.cluster.lock().map_err(|_| poisoned())?;
    let cluster = guard.as_ref().ok_or_else(not_connected)?;
    Ok(cluster.link.broker_live.borrow().clone())
}

/// The open cluster link's client and clock; an error naming the fix when none is open.
pub fn current(state: &State<'_, AppState>) -> Result<(kube::Client, ServerClock), ErrorView> {
    let guard = state.cluster.lock().map_err(|_| poisoned())?;
    let cluster = guard.as_ref().ok_or_else(not_connected)?;
    Ok((cluster.link.conn.client.clone(), cluster.link.clock))
}

/// The open cluster link's client for streams.
pub fn stream_client(state: &State<'_, AppState>) -> Result<kube::Client, ErrorView> {
    let guard = state.cluster.lock().map_err(|_| poisoned())?;
    let cluster = guard.as_ref().ok_or_else(not_connected)?;
    Ok(cluster.link.conn.streams.clone())
}

/// The members of `pool` in `namespace` as the broker's pool loop reads them, from the open
/// cluster link's watches, by the API server's clock now.
pub fn pool_seen(
    state: &State<'_, AppState>,
    namespace: &str,
    pool: &str,
) -> Result<Vec<vdi_core::policy::plan::Seen>, ErrorView> {
    let guard = state.cluster.lock().map_err(|_| poisoned())?;
    let cluster = guard.as_ref().ok_or_else(not_connected)?;
    let now = cluster.link.clock.now();
    Ok(cluster.link.feed.pool_seen(namespace, pool, now))
}

fn not_connected() -> ErrorView {
    ErrorView {
        kind: vdi_core::error::ErrorKind::Invalid,
        message: "not connected to a cluster".into(),
        suggestion: Some("pick a context first".into()),
        retryable: false,
    }
}

/// The open cluster link's actor (who acts, from the cluster), and whether the guard is enforced.
pub fn actor(state: &State<'_, AppState>) -> Result<(Actor, bool), ErrorView> {
    let guard = state.cluster.lock().map_err(|_| poisoned())?;
    let cluster = guard.as_ref().ok_or_else(not_connected)?;
    let actor = cluster
        .link
        .actor
        .as_ref()
        .ok()
        .cloned()
        .ok_or_else(|| ErrorView {
            kind: vdi_core::error::ErrorKind::Unauthorized,
            message: "the cluster did not say who you are (SelfSubjectReview failed)".into(),
            suggestion: Some("check your credentials, then pick the context again".into()),
            retryable: false,
        })?;
    let enforced = cluster
        .link
        .guard
        .as_ref()
        .is_some_and(GuardStatus::enforced);
    Ok((actor, enforced))
}

/// What the identity may do in `namespace` (SelfSubjectAccessReviews, and the guard's rules):
/// the app shows what it may not do as disabled, with the reason. Claims are judged as the
/// link's broker badge says they are done: with a broker a claim is the Lease alone, so an
/// ordinary user without VM patch or power rights may still get a desktop.
#[tauri::command]
#[specta::specta]
pub async fn permissions(
    state: State<'_, AppState>,
    namespace: String,
) -> Result<Permissions, ErrorView> {
    vdi_core::validate::namespace(&namespace)?;
    let (actor, guarded) = actor(&state)?;
    let side = {
        let guard = state.cluster.lock().map_err(|_| poisoned())?;
        let cluster = guard.as_ref().ok_or_else(not_connected)?;
        claim::cluster_half::side(cluster.link.broker_live.borrow().status.as_ref())
    };
    Ok(identity::permissions_on(&actor, &namespace, guarded, side).await)
}

/// Hands a free member of `pool` to `user` (an administrator's assign). `user` is taken as
/// typed: a name with a space around it is refused by the shared validation, as in the CLI.
/// With a broker, each step of the wait for its grant is sent as a `claim-progress` event.
#[tauri::command]
#[specta::specta]
pub async fn assign_member(
    app: AppHandle,
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
    user: String,
) -> Result<Claimed, ErrorView> {
    let (actor, _) = actor(&state)?;
    claim_with_progress(&app, &actor, &namespace, &pool, &user).await
}

/// Claims a member of `pool` for the identity the cluster reports ("Get a desktop"). With a
/// broker, each step of the wait for its grant is sent as a `claim-progress` event.
#[tauri::command]
#[specta::specta]
pub async fn claim_desktop(
    app: AppHandle,
    state: State<'_, AppState>,
    namespace: String,
    pool: String,
) -> Result<Claimed, ErrorView> {
    let (actor, _) = actor(&state)?;
    let me = actor.username().to_owned();
    claim_with_progress(&app, &actor, &namespace, &pool, &me).await
}

/// A claim of a member of `pool` for `assignee`, its progress sent to the window.
async fn claim_with_progress(
    app: &AppHandle,
    actor: &Actor,
    namespace: &str,
    pool: &str,
    assignee: &str,
) -> Result<Claimed, ErrorView> {
    let progress = |step| {
        if let Err(e) = ClaimProgressEvent(step).emit(app) {
            tracing::warn!(error = %e, "could not send claim progress to the window");
        }
    };
    claim::assign_with_progress(
        actor,
        namespace,
        pool,
        assignee,
        &ClaimOptions::default(),
        progress,
    )
    .await
    .map_err(ErrorView::from)
}

/// Releases `member` as the identity the cluster reports (only a Lease's holder may release
/// an active claim, unless `force`: an administrator's "Force release").
#[tauri::command]
#[specta::specta]
pub async fn unassign_member(
    state: State<'_, AppState>,
    namespace: String,
    member: String,
    force: bool,
) -> Result<Released, ErrorView> {
    let (actor, _) = actor(&state)?;
    claim::unassign(&actor, &namespace, &member, &UnassignOptions { force })
        .await
        .map_err(ErrorView::from)
}

/// The namespace's VMs that could be golden VMs, with power state and clone problems.
#[tauri::command]
#[specta::specta]
pub async fn golden_candidates(
    state: State<'_, AppState>,
    namespace: String,
) -> Result<Vec<GoldenCandidate>, ErrorView> {
    let (client, _) = current(&state)?;
    pool::golden_candidates(&client, &namespace)
        .await
        .map_err(ErrorView::from)
}

/// Checks a "New pool" request without contacting the cluster (the same rules as the CLI,
/// [`create::judge`]): the member names it would create and every problem, each with its field.
///
/// Errors: no cluster open.
#[tauri::command]
#[specta::specta]
pub fn validate_new_pool(
    state: State<'_, AppState>,
    request: NewPool,
) -> Result<create::NewPoolCheck, ErrorView> {
    let side = claim_side(&state)?;
    let (request, policy) = request.split();
    Ok(create::judge(&request, &policy, side))
}

/// Who does the cluster's half of a claim on the open link's cluster, as its live watch of the
/// broker says now.
fn claim_side(state: &State<'_, AppState>) -> Result<ClaimSide, ErrorView> {
    let guard = state.cluster.lock().map_err(|_| poisoned())?;
    let cluster = guard.as_ref().ok_or_else(not_connected)?;
    Ok(if cluster.link.broker_live.borrow().brokered {
        ClaimSide::Broker
    } else {
        ClaimSide::Client
    })
}

/// Creates a pool as the CLI does ([`create::create`]: managed on a cluster with a broker),
/// sending each step as a `pool-create-progress` event ([`vdi_core::pool::CreateProgress`])
/// while it runs.
#[tauri::command]
#[specta::specta]
pub async fn create_pool(
    app: AppHandle,
    state: State<'_, AppState>,
    request: NewPool,
) -> Result<PoolCreated, ErrorView> {
    let (client, _) = current(&state)?;
    let side = claim_side(&state)?;
    let (request, policy) = request.split();
    tracing::info!(namespace = %request.namespace, pool = %request.name, golden = %request.golden, size = request.size, ?side, "pool create requested");
    create::create(&client, &request, &policy, &[], side, |step| {
        if let Err(e) = CreateProgressEvent(step).emit(&app) {
            tracing::warn!(error = %e, "could not send create progress to the window");
        }
    })
    .await
    .map(|created| created.pool)
    .map_err(ErrorView::from)
}

/// Deletes a pool (members, Leases, leftover clones); refuses while members are assigned
/// unless `force`.
#[tauri::command]
#[specta::specta]
pub async fn delete_pool(
    state: State<'_, AppState>,
    namespace: String,
    name: String,
    force: bool,
) -> Result<PoolDeleted, ErrorView> {
    let (client, clock) = current(&state)?;
    tracing::info!(%namespace, pool = %name, force, "pool delete requested");
    let request = DeletePool {
        namespace,
        name,
        force,
    };
    pool::delete_pool(&client, &request, &clock)
        .await
        .map_err(ErrorView::from)
}

/// The error for a lock a panicking command left poisoned.
pub fn poisoned() -> ErrorView {
    ErrorView {
        kind: vdi_core::error::ErrorKind::Other,
        message: "internal error: the cluster link's lock was poisoned".into(),
        suggestion: Some("restart the app".into()),
        retryable: false,
    }
}
