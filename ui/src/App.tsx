import {
  Suspense,
  lazy,
  useCallback,
  useEffect,
  useMemo,
  useRef,
  useState,
  type ReactNode,
} from "react";
import {
  appInfo,
  backendAvailable,
  listContexts,
  onKubeconfigChanged,
  connectCluster,
  type Result,
} from "./api";
import type { Contexts } from "./bindings/Contexts";
import type { KubeconfigChanged } from "./bindings/KubeconfigChanged";
import type { CredentialState } from "./bindings/CredentialState";
import type { AppInfo } from "./bindings/AppInfo";
import type { ContextInfo } from "./bindings/ContextInfo";
import type { ErrorView } from "./bindings/ErrorView";
import type { MemberView } from "./bindings/MemberView";
import type { PoolView } from "./bindings/PoolView";
import type { PoolsSnapshot } from "./bindings/PoolsSnapshot";
import type { PoolsUpdate } from "./bindings/PoolsUpdate";
import type { Scope } from "./bindings/Scope";
import type { ClusterInfo } from "./bindings/ClusterInfo";
import { takeEarlyStart, type Opening } from "./earlyCluster";
import { ActionNotice } from "./components/ActionNotice";
import { AssignDialog } from "./components/AssignDialog";
import { Banner } from "./components/Banner";
import { CapacityView } from "./components/CapacityView";
import { ConnectDialog } from "./components/ConnectDialog";
import { DeniedNote } from "./components/DeniedNote";
import { DeletePoolDialog } from "./components/DeletePoolDialog";
import { EmptyState } from "./components/EmptyState";
import { Footer } from "./components/Footer";
import { Header } from "./components/Header";
import { FOCUS_FALLBACK_ID } from "./components/Modal";
import { MyDesktops } from "./components/MyDesktops";
import { NewPoolDialog } from "./components/NewPoolDialog";
import { PoolList } from "./components/PoolList";
import { ReleaseDialog } from "./components/ReleaseDialog";
import { SessionsView } from "./components/SessionsView";
import { UsbView } from "./components/UsbView";
import { LoadingPools, Placeholder } from "./components/StatePanels";
import { credentialBanner } from "./lib/credentials";
import {
  POOL_ORDERS,
  describeFilter,
  filterPools,
  stateQuery,
  parsePoolOrder,
  sortPools,
  stateTotals,
  type PoolOrder,
} from "./lib/pools";
import { poolKey } from "./lib/claims";
import { storeCollapsed, storeOrder, storedCollapsed, storedOrder, toggled } from "./lib/poolView";
import { applyPoolsUpdate, feedIndicator, type Received } from "./lib/feed";
import {
  FALLBACK_NAMESPACE,
  describeScope,
  sameScope,
  scopeNamespace,
  startNamespace,
} from "./lib/presentation";
import { sessionCounts } from "./lib/sessions";
import { estimateClockOffset, formatDateTimeWithZone } from "./lib/time";
import { markOnce } from "./lib/timing";
import { attachedCount } from "./lib/usb";
import { dialogActionKey, useClaimActions } from "./useClaimActions";
import { useConsole } from "./useConsole";
import { usePermissions } from "./usePermissions";
import { useSessions } from "./useSessions";
import { useUsb } from "./useUsb";

// noVNC is most of the bundle: load it when a console first opens.
const ConsoleView = lazy(() =>
  import("./components/ConsoleView").then((m) => ({ default: m.ConsoleView })),
);

type ContextsState =
  | { kind: "loading" }
  | { kind: "loaded"; contexts: ContextInfo[] }
  | { kind: "failed"; error: ErrorView };

const NO_POOLS: readonly PoolView[] = [];

/** A session asked for: `scope` null is the context's start namespace. */
type Attempt = { context: string | null; scope: Scope | null };

function makeScope(allNamespaces: boolean, namespace: string): Scope {
  return allNamespaces ? { kind: "all" } : { kind: "namespace", namespace };
}

export function App() {
  const [info, setInfo] = useState<AppInfo | null>(null);
  // Outside the app's window (a browser on the Vite dev server) no command can answer.
  const [backendError] = useState<ErrorView | null>(() =>
    backendAvailable()
      ? null
      : {
          kind: "other",
          message: "this page is not running in the app's window, so it cannot reach the backend",
          suggestion: "start the app (make demo) instead of opening the page in a browser",
          retryable: false,
        },
  );
  const [contextsState, setContextsState] = useState<ContextsState>({ kind: "loading" });
  const [selectedContext, setSelectedContext] = useState<string | null>(null);
  const [waitingForContext, setWaitingForContext] = useState(false);
  const [namespace, setNamespace] = useState(FALLBACK_NAMESPACE);
  const [namespaceDraft, setNamespaceDraft] = useState(FALLBACK_NAMESPACE);
  const [allNamespaces, setAllNamespaces] = useState(false);
  const [session, setSession] = useState<ClusterInfo | null>(null);
  const [sessionError, setSessionError] = useState<ErrorView | null>(null);
  const [snapshot, setSnapshot] = useState<PoolsSnapshot | null>(null);
  const [clockOffsetMs, setClockOffsetMs] = useState(0);
  /** When the feed on screen (by its number) was last in sync (API server time). */
  const [lastInSync, setLastInSync] = useState<{ feed: number; at: string } | null>(null);
  const [credentials, setCredentials] = useState<CredentialState | null>(null);
  const actions = useClaimActions();
  const { closeDialog, dismissNotice } = actions;
  /** The member whose Connect dialog is open. */
  const [connectMember, setConnectMember] = useState<MemberView | null>(null);
  const [sessionsOpen, setSessionsOpen] = useState(false);
  const consoleView = useConsole();
  const sessions = useSessions();
  const usb = useUsb();
  const [usbOpen, setUsbOpen] = useState(false);
  const [capacityOpen, setCapacityOpen] = useState(false);
  const [filter, setFilter] = useState("");
  const filterRef = useRef<HTMLInputElement>(null);
  const mainRef = useRef<HTMLElement>(null);
  const [collapsed, setCollapsed] = useState(() => storedCollapsed(window.localStorage));
  const [order, setOrder] = useState<PoolOrder>(() => storedOrder(window.localStorage));
  useEffect(() => {
    storeCollapsed(window.localStorage, collapsed);
  }, [collapsed]);
  useEffect(() => {
    storeOrder(window.localStorage, order);
  }, [order]);
  const togglePool = useCallback((key: string) => {
    setCollapsed((prev) => toggled(prev, key));
  }, []);
  const scrollElement = useCallback(() => mainRef.current, []);

  // Bookkeeping read only in callbacks, never while rendering.
  /** Incremented per connect_cluster call, so that a late answer to an older call is ignored. */
  const requestRef = useRef(0);
  /** Snapshots for any other scope belong to an older session and are dropped. */
  const expectedScopeRef = useRef<Scope | null>(null);
  /** What the newest feed has sent, merged, whatever its scope. */
  const latestRef = useRef<Received | null>(null);
  const lastAttemptRef = useRef<Attempt | null>(null);
  const allNamespacesRef = useRef(false);
  /** The Connect… button that led to the console, to focus again when the console closes. */
  const connectOpenerRef = useRef<HTMLElement | null>(null);
  const consoleWasOpenRef = useRef(false);

  /** Shows what feed number `feed` sent, merged. */
  const applySnapshot = useCallback(({ feed, snapshot: next }: Received) => {
    setSnapshot(next);
    // Only a live snapshot's judgedAt is "now" on the server; a failing one keeps old data.
    if (next.status.kind === "live") {
      setClockOffsetMs(estimateClockOffset(next.judgedAt, Date.now()));
      setLastInSync({ feed, at: next.judgedAt });
    } else {
      // What an earlier feed (another context or cluster) was in sync with says nothing
      // about this one.
      setLastInSync((previous) => (previous?.feed === feed ? previous : null));
    }
  }, []);

  const handleUpdate = useCallback(
    (update: PoolsUpdate) => {
      const merged = applyPoolsUpdate(latestRef.current, update);
      if (merged === null) return;
      if (update.status.kind === "live") markOnce("first-live-update");
      latestRef.current = merged;
      if (sameScope(merged.snapshot.scope, expectedScopeRef.current)) {
        applySnapshot(merged);
      }
    },
    [applySnapshot],
  );

  /**
   * Follows a session being opened: its streams feed the view, and its answer settles what the
   * view shows. A refusal is shown, or handed to `onRefused` (the session opened as the page
   * started, refused when the kubeconfig names no current context). Sets no state until the
   * backend answers.
   */
  const follow = useCallback(
    (context: string | null, scope: Scope | null, open: Opening, onRefused?: () => void) => {
      requestRef.current += 1;
      const request = requestRef.current;
      lastAttemptRef.current = { context, scope };
      expectedScopeRef.current = scope;
      latestRef.current = null;
      markOnce("session-requested");
      // What a replaced session's channels still send is dropped.
      const current = () => request === requestRef.current;
      void open({
        pools: (update) => {
          if (current()) handleUpdate(update);
        },
        credentials: (next) => {
          if (current()) setCredentials(next);
        },
      }).then((result) => {
        markOnce("session-opened");
        if (!current()) {
          return;
        }
        if (!result.ok) {
          expectedScopeRef.current = null;
          if (onRefused === undefined) setSessionError(result.error);
          else onRefused();
          return;
        }
        const opened = result.value;
        setSession(opened);
        if (opened.context !== null) {
          setSelectedContext(opened.context);
        }
        expectedScopeRef.current = opened.scope;
        // Follow the scope the backend settled on, should it differ from the request.
        if (!sameScope(opened.scope, scope)) {
          if (opened.scope.kind === "namespace") {
            setNamespace(opened.scope.namespace);
            setNamespaceDraft(opened.scope.namespace);
          }
          allNamespacesRef.current = opened.scope.kind === "all";
          setAllNamespaces(opened.scope.kind === "all");
        }
        // The feed may have spoken before connect_cluster answered.
        const latest = latestRef.current;
        if (latest !== null && sameScope(latest.snapshot.scope, opened.scope)) {
          applySnapshot(latest);
        }
      });
    },
    [applySnapshot, handleUpdate],
  );

  /** Opens a session, replacing the one on screen. */
  const connect = useCallback(
    (context: string | null, scope: Scope | null) => {
      // A dialog about the previous session's pools would act on the new one, and a notice
      // belongs to the context it was made in.
      closeDialog();
      dismissNotice();
      setConnectMember(null);
      setSnapshot(null);
      setSession(null);
      setSessionError(null);
      setCredentials(null);
      follow(context, scope, (streams) => connectCluster(context, scope, streams));
    },
    [closeDialog, dismissNotice, follow],
  );

  /**
   * Shows the contexts read and selects the current one; returns the session to open for it,
   * or null when there is none to open (unreadable, or no current context to choose for you).
   */
  const presentContexts = useCallback((result: Result<Contexts>): Attempt | null => {
    if (!result.ok) {
      setContextsState({ kind: "failed", error: result.error });
      return null;
    }
    const { contexts, current } = result.value;
    setContextsState({ kind: "loaded", contexts });
    if (current === null && contexts.length > 0) {
      // No current-context: let the administrator choose rather than guess a cluster.
      setSelectedContext(null);
      setWaitingForContext(true);
      return null;
    }
    setWaitingForContext(false);
    setSelectedContext(current);
    const ns = startNamespace(contexts.find((c) => c.name === current));
    setNamespace(ns);
    setNamespaceDraft(ns);
    return { context: current, scope: makeScope(allNamespacesRef.current, ns) };
  }, []);

  /** Shows the contexts read and connects to the current one (or asks to choose). */
  const showContexts = useCallback(
    (result: Result<Contexts>) => {
      const start = presentContexts(result);
      if (start !== null) connect(start.context, start.scope);
    },
    [connect, presentContexts],
  );

  /** Reads the contexts again and connects to the current one. */
  const loadContextsAndConnect = useCallback(async () => {
    setContextsState({ kind: "loading" });
    showContexts(await listContexts());
  }, [showContexts]);

  // Start-up: read the kubeconfig and open a session (its channels bring the pools).
  useEffect(() => {
    if (!backendAvailable()) return;
    let disposed = false;
    const isStale = () => disposed;
    void appInfo().then((result) => {
      if (!isStale() && result.ok) {
        setInfo(result.value);
      }
    });
    const early = takeEarlyStart();
    // The contexts state starts as "loading".
    const contexts = early?.contexts ?? listContexts();
    const withContexts = (use: (result: Result<Contexts>) => unknown) => {
      void contexts.then((result) => {
        if (!isStale()) use(result);
      });
    };
    if (early === null) {
      withContexts(showContexts);
    } else {
      // The session opened as the page started brings the pools and the contexts only fill
      // the picker, unless it was refused (no current context, say): then the contexts decide,
      // as if it had never been asked for.
      follow(null, null, early.open, () => {
        withContexts(showContexts);
      });
      withContexts(presentContexts);
    }
    return () => {
      disposed = true;
    };
  }, [follow, presentContexts, showContexts]);

  // "/" focuses the filter (as in GitHub or Gmail) and Home / End go to the first / last pool,
  // unless the user is typing somewhere.
  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      if (!["/", "Home", "End"].includes(event.key)) return;
      const target = event.target;
      // Text fields take every key; a list (select) takes Home and End, not "/", which no
      // option starts with.
      const typing =
        target instanceof HTMLElement &&
        (target.isContentEditable ||
          ["INPUT", "TEXTAREA"].includes(target.tagName) ||
          (target.tagName === "SELECT" && event.key !== "/"));
      if (typing) return;
      if (target instanceof Element && target.closest("[role=dialog], .console-view") !== null) {
        return;
      }
      if (event.key === "/") {
        if (filterRef.current === null) return;
        event.preventDefault();
        filterRef.current.focus();
        return;
      }
      const main = mainRef.current;
      if (main === null) return;
      event.preventDefault();
      main.scrollTo({ top: event.key === "Home" ? 0 : main.scrollHeight });
    };
    window.addEventListener("keydown", onKey);
    return () => {
      window.removeEventListener("keydown", onKey);
    };
  }, []);

  // The kubeconfig files changed (a cluster back on a new address, renewed credentials, a
  // context added): read the contexts again, and reconnect when the context in use changed or
  // its connection was failing. A healthy session on an unchanged context is left alone.
  const onKubeconfigChangeRef = useRef<(change: KubeconfigChanged) => void>(() => undefined);
  useEffect(() => {
    onKubeconfigChangeRef.current = (change) => {
      void (async () => {
        if (contextsState.kind !== "loaded" || waitingForContext || selectedContext === null) {
          await loadContextsAndConnect();
          return;
        }
        const result = await listContexts();
        if (!result.ok) {
          setContextsState({ kind: "failed", error: result.error });
          return;
        }
        setContextsState({ kind: "loaded", contexts: result.value.contexts });
        if (!result.value.contexts.some((c) => c.name === selectedContext)) {
          // The context in use is gone: connect as at start-up (the current context, or a
          // request to choose one).
          await loadContextsAndConnect();
          return;
        }
        const failing = sessionError !== null || snapshot?.status.kind === "failing";
        if (failing || change.changedContexts.includes(selectedContext)) {
          connect(selectedContext, makeScope(allNamespaces, namespace));
        }
      })();
    };
  });
  useEffect(() => {
    let disposed = false;
    let unlisten: (() => void) | null = null;
    void onKubeconfigChanged((change) => {
      onKubeconfigChangeRef.current(change);
    }).then((subscription) => {
      if (!subscription.ok) return;
      if (disposed) subscription.value();
      else unlisten = subscription.value;
    });
    return () => {
      disposed = true;
      unlisten?.();
    };
  }, []);

  const openConnect = useCallback((member: MemberView) => {
    connectOpenerRef.current =
      document.activeElement instanceof HTMLElement ? document.activeElement : null;
    setConnectMember(member);
  }, []);

  /** Closing the USB devices view drops a confirmation it showed. */
  const { cancel: cancelUsbConfirm } = usb;
  const closeUsb = useCallback(() => {
    cancelUsbConfirm();
    setUsbOpen(false);
  }, [cancelUsbConfirm]);

  const closeConnect = useCallback(() => {
    setConnectMember(null);
  }, []);

  const { open: openConsole } = consoleView;
  const openConsoleFromDialog = useCallback(
    (target: { namespace: string; member: string }) => {
      setConnectMember(null);
      openConsole(target);
    },
    [openConsole],
  );

  // When the console closes, focus goes back to the Connect… button that led there.
  const consoleOpen = consoleView.state !== null;
  useEffect(() => {
    if (consoleWasOpenRef.current && !consoleOpen) {
      const opener = connectOpenerRef.current;
      if (
        opener !== null &&
        opener.isConnected &&
        !(opener instanceof HTMLButtonElement && opener.disabled)
      ) {
        opener.focus();
      } else {
        document.getElementById(FOCUS_FALLBACK_ID)?.focus();
      }
    }
    consoleWasOpenRef.current = consoleOpen;
  }, [consoleOpen]);

  const contexts = contextsState.kind === "loaded" ? contextsState.contexts : [];
  const canConnect = contextsState.kind === "loaded" && !waitingForContext;

  const onContextChange = (name: string) => {
    setSelectedContext(name);
    setWaitingForContext(false);
    // Follow the new context's default namespace, unless the administrator chose another one.
    const previousDefault = startNamespace(contexts.find((c) => c.name === selectedContext));
    const ns =
      waitingForContext || namespace === previousDefault
        ? startNamespace(contexts.find((c) => c.name === name))
        : namespace;
    setNamespace(ns);
    setNamespaceDraft(ns);
    connect(name, makeScope(allNamespaces, ns));
  };

  const onNamespaceCommit = (force: boolean) => {
    const value = namespaceDraft.trim();
    if (value === "") {
      setNamespaceDraft(namespace);
      return;
    }
    setNamespaceDraft(value);
    if (value === namespace && !force) {
      return;
    }
    setNamespace(value);
    if (canConnect && !allNamespaces) {
      connect(selectedContext, makeScope(false, value));
    }
  };

  const onAllNamespacesChange = (checked: boolean) => {
    const ns = namespaceDraft.trim() || namespace;
    allNamespacesRef.current = checked;
    setAllNamespaces(checked);
    setNamespace(ns);
    setNamespaceDraft(ns);
    if (canConnect) {
      connect(selectedContext, makeScope(checked, ns));
    }
  };

  const retrySession = () => {
    const attempt = lastAttemptRef.current;
    if (attempt !== null) {
      connect(attempt.context, attempt.scope);
    }
  };

  const retryContexts = () => {
    void loadContextsAndConnect();
  };

  const scope = makeScope(allNamespaces, namespace);
  const status = snapshot?.status ?? null;
  // The kubeconfig cannot be read (removed with a stopped sandbox, say): nothing of the session
  // made from it is offered until it can be read again, when the app reconnects by itself.
  const kubeconfigUnreadable = contextsState.kind === "failed";
  const shownSession = kubeconfigUnreadable ? null : session;
  // The cluster said no to a cluster-wide list: the main area says so with a namespace picker,
  // so no banner repeats it.
  const allNamespacesRefused =
    snapshot?.scope.kind === "all" &&
    status?.kind === "failing" &&
    status.error.kind === "forbidden";
  const allPools = snapshot?.pools ?? NO_POOLS;
  const shownPools = useMemo(
    () => sortPools(filterPools(allPools, filter), order),
    [allPools, filter, order],
  );
  const totals = useMemo(() => {
    const counts = allPools.reduce(
      (acc, p) => ({
        free: acc.free + p.counts.free,
        taken: acc.taken + p.counts.taken,
        total: acc.total + p.counts.total,
      }),
      { free: 0, taken: 0, total: 0 },
    );
    return { ...counts, byState: stateTotals(allPools) };
  }, [allPools]);
  const feed = feedIndicator({
    disconnected: backendError !== null || kubeconfigUnreadable || sessionError !== null,
    waitingForContext,
    status,
    judgedAt: snapshot?.judgedAt ?? null,
  });

  const credentialTrouble = credentialBanner(credentials);
  const banners = (
    <div className="banners">
      {credentialTrouble ? (
        <Banner
          severity="warning"
          source="Kubeconfig"
          error={credentialTrouble.error}
          note={credentialTrouble.note}
        />
      ) : null}
      {backendError ? (
        <Banner
          severity="error"
          source="Backend unavailable"
          error={backendError}
          note="The console must run inside the Corral VDI Console desktop app."
        />
      ) : null}
      {contextsState.kind === "failed" ? (
        <Banner
          severity="error"
          source="Reading kubeconfig"
          error={contextsState.error}
          action={{ label: "Try again", onClick: retryContexts }}
        />
      ) : null}
      {sessionError ? (
        <Banner
          severity="error"
          source="Connecting"
          error={sessionError}
          action={
            sessionError.retryable ? { label: "Try again", onClick: retrySession } : undefined
          }
        />
      ) : null}
      {status?.kind === "failing" && !allNamespacesRefused && !kubeconfigUnreadable ? (
        <Banner
          severity="error"
          source="Live feed"
          error={status.error}
          note={
            snapshot === null || snapshot.pools.length === 0
              ? status.error.retryable
                ? "Retrying automatically; nothing has been received yet."
                : "Nothing has been received yet."
              : status.error.retryable
                ? "Retrying automatically; the data below is the last received and may be out of date."
                : "The data below is the last received and may be out of date."
          }
        />
      ) : null}
      {shownSession?.identityError ? (
        <Banner
          severity="warning"
          source="Who am I"
          error={shownSession.identityError}
          note="Pools are still shown; only your identity could not be determined."
        />
      ) : null}
    </div>
  );

  const identity = shownSession?.identity ?? null;
  const username = identity?.username ?? null;
  // The namespaces on screen: the session's one, or those of the pools listed.
  const sessionNamespace = shownSession === null ? null : scopeNamespace(shownSession.scope);
  const shownNamespaces =
    sessionNamespace !== null
      ? [sessionNamespace]
      : [...new Set((snapshot?.pools ?? []).map((p) => p.namespace))];
  const permissions = usePermissions(identity === null ? null : shownSession, shownNamespaces);
  const claimDenied =
    sessionNamespace === null
      ? null
      : (() => {
          const claim = permissions.get(sessionNamespace)?.claim;
          return claim && !claim.allowed
            ? `You may not claim desktops here: ${claim.reason}`
            : null;
        })();

  const notice = actions.notice ? (
    <div className="action-notices">
      <ActionNotice notice={actions.notice} onDismiss={actions.dismissNotice} />
    </div>
  ) : null;

  const myDesktops =
    backendError === null && shownSession !== null && snapshot !== null ? (
      <MyDesktops
        identity={identity}
        pools={snapshot.pools}
        scope={snapshot.scope}
        clockOffsetMs={clockOffsetMs}
        running={actions.running}
        onClaim={actions.claim}
        onRelease={actions.openRelease}
        onConnect={openConnect}
        claimDenied={claimDenied}
        loading={snapshot.status.kind === "syncing"}
        unreadable={snapshot.status.kind === "failing" && snapshot.pools.length === 0}
      />
    ) : null;

  // A pool is created in the one namespace the session covers.
  const poolNamespace = sessionNamespace;
  const createAllowed =
    poolNamespace === null ? null : (permissions.get(poolNamespace)?.createPool ?? null);
  const createDenied = createAllowed !== null && !createAllowed.allowed;
  const toolbar =
    backendError === null && shownSession !== null ? (
      <div className="pools-toolbar">
        <button
          type="button"
          className="btn btn-primary"
          data-testid="new-pool"
          disabled={poolNamespace === null || createDenied}
          aria-describedby={poolNamespace === null || createDenied ? "new-pool-blocked" : undefined}
          title={
            poolNamespace === null || createDenied
              ? undefined
              : `Clone a golden VM of namespace ${poolNamespace} into a new pool`
          }
          onClick={() => {
            if (poolNamespace !== null) actions.openNewPool(poolNamespace);
          }}
        >
          New pool…
        </button>
        {poolNamespace === null ? (
          <span id="new-pool-blocked" className="muted" data-testid="new-pool-blocked">
            A pool is created in one namespace: untick All namespaces to choose it.
          </span>
        ) : createDenied ? (
          <span id="new-pool-blocked" className="muted" data-testid="new-pool-blocked">
            You may not create pools in <span className="mono">{poolNamespace}</span>:{" "}
            {createAllowed.reason}
          </span>
        ) : (
          <span className="muted">
            in namespace <span className="mono">{poolNamespace}</span>
          </span>
        )}
        {poolNamespace !== null ? (
          <DeniedNote permissions={permissions.get(poolNamespace) ?? null} />
        ) : null}
      </div>
    ) : null;

  const openDialog = actions.dialog;
  let dialog: ReactNode = null;
  if (openDialog !== null) {
    const busy = actions.running.has(dialogActionKey(openDialog.spec));
    const spec = openDialog.spec;
    switch (spec.kind) {
      case "assign":
        dialog = (
          <AssignDialog
            key={dialogActionKey(spec)}
            namespace={spec.namespace}
            pool={spec.pool}
            busy={busy}
            error={openDialog.error}
            onSubmit={(user) => {
              actions.assign(spec.namespace, spec.pool, user);
            }}
            onClose={actions.closeDialog}
          />
        );
        break;
      case "release":
        dialog = (
          <ReleaseDialog
            key={dialogActionKey(spec)}
            member={spec.member}
            holder={spec.holder}
            username={username}
            force={spec.force}
            busy={busy}
            error={openDialog.error}
            onConfirm={() => {
              actions.release(spec.namespace, spec.member, spec.force);
            }}
            onClose={actions.closeDialog}
          />
        );
        break;
      case "newPool":
        dialog = (
          <NewPoolDialog
            key={dialogActionKey(spec)}
            namespace={spec.namespace}
            pools={snapshot?.pools ?? []}
            onClose={actions.closeDialog}
          />
        );
        break;
      case "deletePool":
        dialog = (
          <DeletePoolDialog
            key={dialogActionKey(spec)}
            namespace={spec.namespace}
            pool={spec.pool}
            view={
              snapshot?.pools.find((p) => p.namespace === spec.namespace && p.name === spec.pool) ??
              null
            }
            busy={busy}
            error={openDialog.error}
            onSubmit={(force) => {
              actions.deletePool(spec.namespace, spec.pool, force);
            }}
            onClose={actions.closeDialog}
          />
        );
        break;
    }
  }

  if (dialog === null && connectMember !== null) {
    dialog = (
      <ConnectDialog
        key={`${connectMember.namespace}/${connectMember.name}`}
        member={connectMember}
        username={username}
        onOpenConsole={openConsoleFromDialog}
        onClose={closeConnect}
      />
    );
  }
  if (dialog === null && sessionsOpen) {
    dialog = (
      <SessionsView
        sessions={sessions.sessions}
        stopping={sessions.stopping}
        clearing={sessions.clearing}
        error={sessions.error}
        onStop={sessions.stop}
        onClearEnded={sessions.clearEnded}
        onDismissError={sessions.dismissError}
        onClose={() => {
          setSessionsOpen(false);
        }}
      />
    );
  }

  if (dialog === null && usbOpen) {
    // Desktops come from the pools on screen, and only while the session is connected.
    const connected = backendError === null && shownSession !== null && snapshot !== null;
    dialog = (
      <UsbView
        usb={usb}
        sessions={sessions.sessions}
        pools={connected ? snapshot.pools : null}
        identity={identity}
        scope={connected ? snapshot.scope : null}
        onClose={closeUsb}
      />
    );
  }

  if (dialog === null && capacityOpen && shownSession !== null) {
    dialog = (
      <CapacityView
        session={shownSession}
        onClose={() => {
          setCapacityOpen(false);
        }}
      />
    );
  }

  let content: ReactNode;
  if (backendError) {
    content = (
      <Placeholder title="Not connected">The console backend is not available.</Placeholder>
    );
  } else if (contextsState.kind === "loading" && snapshot === null) {
    // (The session opened as the page started may bring pools before the contexts are read.)
    content = <LoadingPools message="Reading kubeconfig…" />;
  } else if (contextsState.kind === "failed") {
    content = (
      <Placeholder title="No kubeconfig contexts">
        Fix the kubeconfig problem above, or wait: the console reconnects by itself when the
        kubeconfig can be read again.
      </Placeholder>
    );
  } else if (waitingForContext) {
    content = (
      <Placeholder title="Choose a context">
        The kubeconfig sets no current-context. Pick one in the Context list to connect.
      </Placeholder>
    );
  } else if (snapshot === null) {
    content = sessionError ? (
      <Placeholder title="Not connected">
        Could not open a session for {describeScope(scope)}. Change the context or namespace, or try
        again.
      </Placeholder>
    ) : (
      <LoadingPools message="Loading pools from the cluster…" />
    );
  } else if (allNamespacesRefused && snapshot.status.kind === "failing") {
    // Not "offline": the cluster answered, and said no to a cluster-wide list.
    const candidates = [
      ...new Set([
        namespace,
        ...contexts.flatMap((c) => (c.namespace === null ? [] : [c.namespace])),
        FALLBACK_NAMESPACE,
      ]),
    ];
    content = (
      <Placeholder title="You may not list pools in all namespaces">
        <p data-testid="all-namespaces-forbidden">
          The cluster refused a cluster-wide list: {snapshot.status.error.message}. Pick a namespace
          you work in:
        </p>
        <div className="namespace-picker" role="group" aria-label="Namespaces">
          {candidates.map((ns) => (
            <button
              key={ns}
              type="button"
              className="btn btn-small"
              data-testid={`pick-namespace-${ns}`}
              onClick={() => {
                allNamespacesRef.current = false;
                setAllNamespaces(false);
                setNamespace(ns);
                setNamespaceDraft(ns);
                connect(selectedContext, makeScope(false, ns));
              }}
            >
              {ns}
            </button>
          ))}
        </div>
      </Placeholder>
    );
  } else if (snapshot.pools.length === 0) {
    if (snapshot.status.kind === "live") {
      content = <EmptyState scope={snapshot.scope} />;
    } else if (snapshot.status.kind === "syncing") {
      content = <LoadingPools message="Loading pools from the cluster…" />;
    } else {
      content = (
        <Placeholder title="No pool data">
          Nothing has been received for {describeScope(snapshot.scope)} yet.
        </Placeholder>
      );
    }
  } else {
    // While the feed fails, the data is as of the last time it was in sync, not of now.
    const stale = snapshot.status.kind === "failing";
    const asOf = stale ? (lastInSync?.at ?? null) : snapshot.judgedAt;
    const judged = formatDateTimeWithZone(asOf);
    content = (
      <div className={snapshot.status.kind === "failing" ? "pools pools-stale" : "pools"}>
        <div className="summary">
          <span>
            <strong>{snapshot.pools.length.toLocaleString("en-US")}</strong>{" "}
            {snapshot.pools.length === 1 ? "pool" : "pools"} in {describeScope(snapshot.scope)}
          </span>
          <span className="summary-sep" aria-hidden="true">
            ·
          </span>
          <span data-testid="pool-totals">
            <strong>{totals.free.toLocaleString("en-US")}</strong> free ·{" "}
            <strong>{totals.taken.toLocaleString("en-US")}</strong> taken ·{" "}
            <strong>{totals.total.toLocaleString("en-US")}</strong> members
          </span>
          {judged !== null && asOf !== null ? (
            <span
              className="summary-judged"
              data-testid="summary-judged"
              title={`${asOf} (API server time)`}
            >
              {stale ? "last in sync at" : "judged at"} <time dateTime={asOf}>{judged}</time>
            </span>
          ) : null}
        </div>
        {totals.byState.length > 1 ? (
          <ul className="state-totals" aria-label="Members by state" data-testid="state-totals">
            {totals.byState.map((entry) => (
              <li key={entry.label}>
                <button
                  type="button"
                  className="link-button"
                  title={`Show only members that are ${entry.label}`}
                  onClick={() => {
                    setFilter(stateQuery(entry.label));
                  }}
                >
                  {entry.label}
                </button>{" "}
                <span className="tabular">{entry.count.toLocaleString("en-US")}</span>
              </li>
            ))}
          </ul>
        ) : null}
        <div className="pools-filter">
          <input
            ref={filterRef}
            type="search"
            className="filter-input"
            data-testid="pool-filter"
            aria-label="Filter pools and members"
            placeholder="Filter: pool, member, holder, state  ( / )"
            value={filter}
            onChange={(e) => {
              setFilter(e.target.value);
            }}
            onKeyDown={(e) => {
              if (e.key === "Escape" && filter !== "") {
                e.stopPropagation();
                setFilter("");
              }
            }}
          />
          <label className="pool-order">
            <span className="muted">Sort</span>
            <select
              data-testid="pool-order"
              value={order}
              onChange={(e) => {
                setOrder(parsePoolOrder(e.target.value));
              }}
            >
              {POOL_ORDERS.map((o) => (
                <option key={o.value} value={o.value}>
                  {o.label}
                </option>
              ))}
            </select>
          </label>
          <button
            type="button"
            className="btn btn-small"
            data-testid="collapse-all"
            onClick={() => {
              setCollapsed(
                (prev) =>
                  new Set([...prev, ...shownPools.map((p) => poolKey(p.namespace, p.name))]),
              );
            }}
          >
            Collapse all
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="expand-all"
            disabled={collapsed.size === 0}
            onClick={() => {
              setCollapsed((prev) => {
                const next = new Set(prev);
                for (const p of shownPools) next.delete(poolKey(p.namespace, p.name));
                return next;
              });
            }}
          >
            Expand all
          </button>
          {filter.trim() !== "" ? (
            <span className="muted" data-testid="pool-filter-result" role="status">
              {describeFilter(shownPools, snapshot.pools, filter)}
            </span>
          ) : null}
        </div>
        {shownPools.length === 0 ? (
          <p className="muted filter-empty" data-testid="pool-filter-empty">
            No pool or member matches “{filter.trim()}”.{" "}
            <button
              type="button"
              className="link-button"
              onClick={() => {
                setFilter("");
              }}
            >
              Clear the filter
            </button>
          </p>
        ) : null}
        <PoolList
          pools={shownPools}
          scrollElement={scrollElement}
          collapsed={collapsed}
          onToggle={togglePool}
          clockOffsetMs={clockOffsetMs}
          running={actions.running}
          onAssign={actions.openAssign}
          onDelete={actions.openDeletePool}
          onUnassign={actions.openRelease}
          onConnect={openConnect}
          username={username}
          permissionsFor={(ns) => permissions.get(ns) ?? null}
        />
      </div>
    );
  }

  return (
    <>
      <div className="app" inert={dialog !== null || consoleOpen}>
        <Header
          contexts={contexts}
          contextsLoading={contextsState.kind === "loading"}
          selectedContext={selectedContext}
          onContextChange={onContextChange}
          namespaceDraft={namespaceDraft}
          onNamespaceDraftChange={setNamespaceDraft}
          onNamespaceCommit={onNamespaceCommit}
          onNamespaceRevert={() => {
            setNamespaceDraft(namespace);
          }}
          allNamespaces={allNamespaces}
          onAllNamespacesChange={onAllNamespacesChange}
          identity={identity}
          guard={shownSession?.guard ?? null}
          feed={feed}
          sessionCounts={sessionCounts(sessions.sessions)}
          onOpenSessions={() => {
            setSessionsOpen(true);
          }}
          usbCount={usb.list?.devices.length ?? null}
          usbAttached={usb.list === null ? 0 : attachedCount(usb.list.devices, sessions.sessions)}
          onOpenUsb={() => {
            setUsbOpen(true);
          }}
          onOpenCapacity={
            shownSession === null
              ? null
              : () => {
                  setCapacityOpen(true);
                }
          }
        />
        <main
          ref={mainRef}
          id={FOCUS_FALLBACK_ID}
          className="app-main"
          aria-label="Pools"
          tabIndex={-1}
        >
          <div className="app-main-content">
            {banners}
            {notice}
            {myDesktops}
            {toolbar}
            {content}
          </div>
        </main>
        <Footer info={info} />
      </div>
      {consoleView.state !== null ? (
        <Suspense
          fallback={
            <div className="console-view console-loading" role="status">
              Loading the console…
            </div>
          }
        >
          <ConsoleView
            state={consoleView.state}
            sessions={sessions.sessions}
            onTakeOver={consoleView.takeOver}
            onReconnect={consoleView.reconnect}
            onClose={consoleView.close}
          />
        </Suspense>
      ) : null}
      {consoleOpen ? null : dialog}
    </>
  );
}
