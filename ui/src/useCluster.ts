import { useCallback, useEffect, useReducer, useRef, useState } from "react";
import {
  appInfo,
  backendAvailable,
  connectCluster,
  listContexts,
  onKubeconfigChanged,
  type Result,
} from "./api";
import type {
  AppInfo,
  Contexts,
  ErrorView,
  KubeconfigChanged,
  PoolsUpdate,
  Scope,
} from "./bindings";
import { takeEarlyStart, type Opening } from "./earlyCluster";
import {
  INITIAL_CLUSTER_STATE,
  clusterReducer,
  currentContextStart,
  makeScope,
  namespaceForContext,
  type Attempt,
} from "./lib/cluster";
import { applyPoolsUpdate, type Received } from "./lib/feed";
import { sameScope } from "./lib/presentation";
import { markOnce } from "./lib/timing";

/** Outside the app's window (a browser on the Vite dev server) no command can answer. */
function backendMissing(): ErrorView | null {
  return backendAvailable()
    ? null
    : {
        kind: "other",
        message: "this page is not running in the app's window, so it cannot reach the backend",
        suggestion: "start the app (make demo) instead of opening the page in a browser",
        retryable: false,
      };
}

/**
 * The window's cluster connection: reads the kubeconfig's contexts, connects (taking over the
 * connection opened as the page started, [`takeEarlyStart`]), follows the live feed and the
 * credentials it streams, reconnects when the kubeconfig changes, and offers the header's
 * context and namespace choices. State transitions are [`clusterReducer`]'s; this hook adds
 * the backend calls and the bookkeeping that keeps a replaced connection's late answers out.
 *
 * `onReplace` runs before each new connection (a dialog about the previous cluster's pools
 * would act on the new one); it must be stable (a `useCallback`).
 */
export function useCluster(onReplace: () => void) {
  const [state, dispatch] = useReducer(clusterReducer, INITIAL_CLUSTER_STATE);
  const [info, setInfo] = useState<AppInfo | null>(null);
  const [backendError] = useState<ErrorView | null>(backendMissing);

  // Bookkeeping read only in callbacks, never while rendering.
  /** Incremented per connect_cluster call, so that a late answer to an older call is ignored. */
  const requestRef = useRef(0);
  /** Snapshots for any other scope belong to an older connection and are dropped. */
  const expectedScopeRef = useRef<Scope | null>(null);
  /** What the newest feed has sent, merged, whatever its scope. */
  const latestRef = useRef<Received | null>(null);
  const lastAttemptRef = useRef<Attempt | null>(null);
  const allNamespacesRef = useRef(false);

  /** Shows what a feed sent, merged. */
  const applySnapshot = useCallback((received: Received) => {
    dispatch({ type: "received", received, nowMs: Date.now() });
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
   * Follows a connection being made: its streams feed the view, and its answer settles what the
   * view shows. A refusal is shown, or handed to `onRefused` (the connection made as the page
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
      markOnce("cluster-requested");
      // What a replaced connection's channels still send is dropped.
      const current = () => request === requestRef.current;
      void open({
        pools: (update) => {
          if (current()) handleUpdate(update);
        },
        credentials: (next) => {
          if (current()) dispatch({ type: "credentials", state: next });
        },
      }).then((result) => {
        markOnce("cluster-connected");
        if (!current()) {
          return;
        }
        if (!result.ok) {
          expectedScopeRef.current = null;
          if (onRefused === undefined) dispatch({ type: "refused", error: result.error });
          else onRefused();
          return;
        }
        const connected = result.value;
        dispatch({ type: "connected", info: connected, asked: scope });
        expectedScopeRef.current = connected.scope;
        if (!sameScope(connected.scope, scope)) {
          allNamespacesRef.current = connected.scope.kind === "all";
        }
        // The feed may have spoken before connect_cluster answered.
        const latest = latestRef.current;
        if (latest !== null && sameScope(latest.snapshot.scope, connected.scope)) {
          applySnapshot(latest);
        }
      });
    },
    [applySnapshot, handleUpdate],
  );

  /** Connects, replacing the connection on screen. */
  const connect = useCallback(
    (context: string | null, scope: Scope | null) => {
      onReplace();
      dispatch({ type: "connecting" });
      follow(context, scope, (streams) => connectCluster(context, scope, streams));
    },
    [onReplace, follow],
  );

  /**
   * Shows the contexts read and selects the current one; returns the connection to make for it,
   * or null when there is none to make (unreadable, or no current context to choose for you).
   */
  const presentContexts = useCallback((result: Result<Contexts>): Attempt | null => {
    if (!result.ok) {
      dispatch({ type: "contextsFailed", error: result.error });
      return null;
    }
    dispatch({ type: "contextsRead", contexts: result.value });
    const start = currentContextStart(result.value);
    if (start === null) return null;
    return { context: start.context, scope: makeScope(allNamespacesRef.current, start.namespace) };
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
    dispatch({ type: "contextsLoading" });
    showContexts(await listContexts());
  }, [showContexts]);

  // The log rotates daily (at midnight UTC): ask again every minute, so that the footer names
  // the file written now; the same answer changes nothing.
  useEffect(() => {
    if (!backendAvailable()) return;
    const timer = window.setInterval(() => {
      void appInfo().then((result) => {
        if (!result.ok) return;
        setInfo((shown) =>
          shown !== null && shown.logPath === result.value.logPath ? shown : result.value,
        );
      });
    }, 60_000);
    return () => {
      window.clearInterval(timer);
    };
  }, []);

  // Start-up: read the kubeconfig and connect (the connection's channels bring the pools).
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
      // The connection made as the page started brings the pools and the contexts only fill
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

  // The kubeconfig files changed (a cluster back on a new address, renewed credentials, a
  // context added): read the contexts again, and reconnect when the context in use changed or
  // its connection was failing. A healthy connection on an unchanged context is left alone.
  const onKubeconfigChangeRef = useRef<(change: KubeconfigChanged) => void>(() => undefined);
  useEffect(() => {
    onKubeconfigChangeRef.current = (change) => {
      void (async () => {
        const { selectedContext } = state;
        if (
          state.contextsState.kind !== "loaded" ||
          state.waitingForContext ||
          selectedContext === null
        ) {
          await loadContextsAndConnect();
          return;
        }
        const result = await listContexts();
        if (!result.ok) {
          dispatch({ type: "contextsFailed", error: result.error });
          return;
        }
        dispatch({ type: "contextsListed", contexts: result.value.contexts });
        if (!result.value.contexts.some((c) => c.name === selectedContext)) {
          // The context in use is gone: connect as at start-up (the current context, or a
          // request to choose one).
          await loadContextsAndConnect();
          return;
        }
        const failing = state.error !== null || state.snapshot?.status.kind === "failing";
        if (failing || change.changedContexts.includes(selectedContext)) {
          connect(selectedContext, makeScope(state.allNamespaces, state.namespace));
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

  const contexts = state.contextsState.kind === "loaded" ? state.contextsState.contexts : [];
  const canConnect = state.contextsState.kind === "loaded" && !state.waitingForContext;

  /** The header's context list: connect to `name`. */
  const chooseContext = (name: string) => {
    const namespace = namespaceForContext(state, name);
    dispatch({ type: "contextChosen", context: name, namespace });
    connect(name, makeScope(state.allNamespaces, namespace));
  };

  /** The namespace field committed (Enter or blur; `force`: connect even if unchanged). */
  const commitNamespace = (force: boolean) => {
    const value = state.namespaceDraft.trim();
    if (value === "") {
      dispatch({ type: "namespaceReverted" });
      return;
    }
    dispatch({ type: "namespaceCommitted", namespace: value });
    if (value === state.namespace && !force) {
      return;
    }
    if (canConnect && !state.allNamespaces) {
      connect(state.selectedContext, makeScope(false, value));
    }
  };

  /** The All namespaces box changed. */
  const chooseAllNamespaces = (checked: boolean) => {
    const namespace = state.namespaceDraft.trim() || state.namespace;
    allNamespacesRef.current = checked;
    dispatch({ type: "scopeChosen", allNamespaces: checked, namespace });
    if (canConnect) {
      connect(state.selectedContext, makeScope(checked, namespace));
    }
  };

  /** One namespace picked after a cluster-wide list was refused. */
  const pickNamespace = (namespace: string) => {
    allNamespacesRef.current = false;
    dispatch({ type: "scopeChosen", allNamespaces: false, namespace });
    connect(state.selectedContext, makeScope(false, namespace));
  };

  /** Makes the last connection asked for again. */
  const retry = () => {
    const attempt = lastAttemptRef.current;
    if (attempt !== null) {
      connect(attempt.context, attempt.scope);
    }
  };

  const retryContexts = () => {
    void loadContextsAndConnect();
  };

  // The kubeconfig cannot be read (removed with a stopped sandbox, say): nothing of the
  // connection made from it is offered until it can be read again, when the app reconnects by
  // itself.
  const kubeconfigUnreadable = state.contextsState.kind === "failed";

  return {
    ...state,
    /** The app's version, log file and kubeconfig paths. */
    info,
    /** Why no backend can answer (the page is not in the app's window). */
    backendError,
    /** The contexts read (empty while loading or unreadable). */
    contexts,
    /** Whether a context is chosen to connect with. */
    canConnect,
    /** The scope the header shows. */
    scope: makeScope(state.allNamespaces, state.namespace),
    kubeconfigUnreadable,
    /** The connection on screen, unless the kubeconfig it came from can no longer be read. */
    shownCluster: kubeconfigUnreadable ? null : state.cluster,
    chooseContext,
    setNamespaceDraft: (draft: string) => {
      dispatch({ type: "namespaceDraft", draft });
    },
    revertNamespace: () => {
      dispatch({ type: "namespaceReverted" });
    },
    commitNamespace,
    chooseAllNamespaces,
    pickNamespace,
    retry,
    retryContexts,
  };
}
