import type {
  ClusterInfo,
  ContextInfo,
  Contexts,
  CredentialState,
  ErrorView,
  PoolsSnapshot,
  Scope,
} from "../bindings";
import type { Received } from "./feed";
import { FALLBACK_NAMESPACE, sameScope, startNamespace } from "./presentation";
import { estimateClockOffset } from "./time";

/** The kubeconfig's contexts, as read. */
export type ContextsState =
  | { kind: "loading" }
  | { kind: "loaded"; contexts: ContextInfo[] }
  | { kind: "failed"; error: ErrorView };

/** A cluster connection asked for: `scope` null is the context's start namespace. */
export type Attempt = { context: string | null; scope: Scope | null };

/**
 * What the window knows of its cluster connection: the contexts and the choice made among them,
 * the connection's answer, and what its live feed and credentials last said.
 */
export type ClusterState = {
  contextsState: ContextsState;
  selectedContext: string | null;
  /** The kubeconfig names no current context: nothing is connected until the user picks one. */
  waitingForContext: boolean;
  /** The namespace connected to (or to connect to when All namespaces is unticked). */
  namespace: string;
  /** The namespace field's text, committed on Enter or blur. */
  namespaceDraft: string;
  allNamespaces: boolean;
  /** The backend's answer to the connection on screen. */
  cluster: ClusterInfo | null;
  /** Why the connection on screen was refused. */
  error: ErrorView | null;
  snapshot: PoolsSnapshot | null;
  /** The API server's clock minus this machine's, from the latest live snapshot. */
  clockOffsetMs: number;
  /** When the feed on screen (by its number) was last in sync (API server time). */
  lastInSync: { feed: number; at: string } | null;
  credentials: CredentialState | null;
};

export type ClusterAction =
  /** A connection replaces the one on screen: nothing of the old one stays. */
  | { type: "connecting" }
  /** The backend refused the connection. */
  | { type: "refused"; error: ErrorView }
  /** The backend connected; `asked` is the scope requested (null: the start namespace). */
  | { type: "connected"; info: ClusterInfo; asked: Scope | null }
  /** The feed on screen sent a snapshot (merged), at `nowMs` on this machine's clock. */
  | { type: "received"; received: Received; nowMs: number }
  | { type: "credentials"; state: CredentialState }
  | { type: "contextsLoading" }
  | { type: "contextsFailed"; error: ErrorView }
  /** The contexts were read at start-up (or again): the current one is selected. */
  | { type: "contextsRead"; contexts: Contexts }
  /** The contexts were read again while one stays selected: only the list changes. */
  | { type: "contextsListed"; contexts: ContextInfo[] }
  | { type: "contextChosen"; context: string; namespace: string }
  | { type: "namespaceDraft"; draft: string }
  /** The namespace field goes back to the namespace connected to. */
  | { type: "namespaceReverted" }
  | { type: "namespaceCommitted"; namespace: string }
  | { type: "scopeChosen"; allNamespaces: boolean; namespace: string };

/** Nothing read, nothing connected. */
export const INITIAL_CLUSTER_STATE: ClusterState = {
  contextsState: { kind: "loading" },
  selectedContext: null,
  waitingForContext: false,
  namespace: FALLBACK_NAMESPACE,
  namespaceDraft: FALLBACK_NAMESPACE,
  allNamespaces: false,
  cluster: null,
  error: null,
  snapshot: null,
  clockOffsetMs: 0,
  lastInSync: null,
  credentials: null,
};

/** The scope of the All namespaces box and the namespace chosen. */
export function makeScope(allNamespaces: boolean, namespace: string): Scope {
  return allNamespaces ? { kind: "all" } : { kind: "namespace", namespace };
}

/**
 * The context to connect to once the contexts are read, and its start namespace; null when
 * there is none to choose for the user (a kubeconfig with contexts but no current-context: the
 * administrator picks rather than the app guessing a cluster).
 */
export function currentContextStart(
  contexts: Contexts,
): { context: string | null; namespace: string } | null {
  const { contexts: all, current } = contexts;
  if (current === null && all.length > 0) return null;
  return { context: current, namespace: startNamespace(all.find((c) => c.name === current)) };
}

/**
 * The namespace to show after picking context `name`: the new context's start namespace when
 * the namespace on screen was the previous context's (or none was chosen yet), else the one the
 * administrator chose.
 */
export function namespaceForContext(state: ClusterState, name: string): string {
  const contexts = state.contextsState.kind === "loaded" ? state.contextsState.contexts : [];
  const previousDefault = startNamespace(contexts.find((c) => c.name === state.selectedContext));
  return state.waitingForContext || state.namespace === previousDefault
    ? startNamespace(contexts.find((c) => c.name === name))
    : state.namespace;
}

/**
 * `state` with `changes`, or `state` itself when they change nothing: as with `useState`, React
 * then renders nothing. That matters: a render sets every controlled field back to its state,
 * so committing the namespace field unchanged would refill it after a WebDriver clear, which
 * empties it without an input event.
 */
function patched(state: ClusterState, changes: Partial<ClusterState>): ClusterState {
  const keys = Object.keys(changes) as (keyof ClusterState)[];
  return keys.every((key) => Object.is(state[key], changes[key]))
    ? state
    : { ...state, ...changes };
}

/**
 * The cluster connection's state machine: pure, so that every transition is testable. An action
 * that changes nothing returns `state` itself.
 */
export function clusterReducer(state: ClusterState, action: ClusterAction): ClusterState {
  switch (action.type) {
    case "connecting":
      return patched(state, { snapshot: null, cluster: null, error: null, credentials: null });
    case "refused":
      return patched(state, { error: action.error });
    case "connected": {
      const { info, asked } = action;
      const connected = { cluster: info, selectedContext: info.context ?? state.selectedContext };
      // Follow the scope the backend settled on, should it differ from the request.
      if (sameScope(info.scope, asked)) return patched(state, connected);
      const namespace = info.scope.kind === "namespace" ? info.scope.namespace : null;
      return patched(state, {
        ...connected,
        namespace: namespace ?? state.namespace,
        namespaceDraft: namespace ?? state.namespaceDraft,
        allNamespaces: info.scope.kind === "all",
      });
    }
    case "received": {
      const { feed, snapshot } = action.received;
      // Only a live snapshot's judgedAt is "now" on the server; a failing one keeps old data.
      if (snapshot.status.kind === "live") {
        return patched(state, {
          snapshot,
          clockOffsetMs: estimateClockOffset(snapshot.judgedAt, action.nowMs),
          lastInSync: { feed, at: snapshot.judgedAt },
        });
      }
      // What an earlier feed (another context or cluster) was in sync with says nothing
      // about this one.
      return patched(state, {
        snapshot,
        lastInSync: state.lastInSync?.feed === feed ? state.lastInSync : null,
      });
    }
    case "credentials":
      return patched(state, { credentials: action.state });
    case "contextsLoading":
      return patched(state, { contextsState: { kind: "loading" } });
    case "contextsFailed":
      return patched(state, { contextsState: { kind: "failed", error: action.error } });
    case "contextsRead": {
      const contextsState: ContextsState = { kind: "loaded", contexts: action.contexts.contexts };
      const start = currentContextStart(action.contexts);
      if (start === null) {
        return patched(state, { contextsState, selectedContext: null, waitingForContext: true });
      }
      return patched(state, {
        contextsState,
        waitingForContext: false,
        selectedContext: start.context,
        namespace: start.namespace,
        namespaceDraft: start.namespace,
      });
    }
    case "contextsListed":
      return patched(state, { contextsState: { kind: "loaded", contexts: action.contexts } });
    case "contextChosen":
      return patched(state, {
        selectedContext: action.context,
        waitingForContext: false,
        namespace: action.namespace,
        namespaceDraft: action.namespace,
      });
    case "namespaceDraft":
      return patched(state, { namespaceDraft: action.draft });
    case "namespaceReverted":
      return patched(state, { namespaceDraft: state.namespace });
    case "namespaceCommitted":
      return patched(state, { namespace: action.namespace, namespaceDraft: action.namespace });
    case "scopeChosen":
      return patched(state, {
        allNamespaces: action.allNamespaces,
        namespace: action.namespace,
        namespaceDraft: action.namespace,
      });
  }
}
