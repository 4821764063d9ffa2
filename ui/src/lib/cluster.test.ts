import { describe, expect, it } from "vitest";
import type { ClusterInfo, ContextInfo, ErrorView, PoolsSnapshot, Scope } from "../bindings";
import {
  INITIAL_CLUSTER_STATE,
  clusterReducer,
  currentContextStart,
  makeScope,
  namespaceForContext,
  type ClusterAction,
  type ClusterState,
} from "./cluster";
import { member, pool } from "./fixtures";

function context(name: string, startNamespace: string): ContextInfo {
  return { name, cluster: `${name}-cluster`, namespace: startNamespace, startNamespace };
}

const LAB = context("lab", "corral-vms");
const PROD = context("prod", "desktops");

const REFUSED: ErrorView = {
  kind: "unreachable",
  message: "the API server did not answer",
  suggestion: "check the cluster",
  retryable: true,
};

function info(scope: Scope, context: string | null = null): ClusterInfo {
  return {
    context,
    identity: { username: "alice", groups: [] },
    identityError: null,
    scope,
    guard: null,
  };
}

function snapshot(status: PoolsSnapshot["status"], judgedAt: string): PoolsSnapshot {
  return {
    scope: makeScope(false, "corral-vms"),
    status,
    pools: [pool("web", [member("web-1")])],
    judgedAt,
  };
}

function run(state: ClusterState, ...actions: ClusterAction[]): ClusterState {
  return actions.reduce(clusterReducer, state);
}

/** Contexts read, "lab" current and connected in its start namespace. */
const CONNECTED = run(
  INITIAL_CLUSTER_STATE,
  { type: "contextsRead", contexts: { contexts: [LAB, PROD], current: "lab" } },
  {
    type: "connected",
    info: info(makeScope(false, "corral-vms")),
    asked: makeScope(false, "corral-vms"),
  },
);

describe("the contexts read", () => {
  it("select the current context in its start namespace", () => {
    const state = run(INITIAL_CLUSTER_STATE, {
      type: "contextsRead",
      contexts: { contexts: [LAB, PROD], current: "prod" },
    });
    expect(state.contextsState).toEqual({ kind: "loaded", contexts: [LAB, PROD] });
    expect(state.selectedContext).toBe("prod");
    expect(state.waitingForContext).toBe(false);
    expect(state.namespace).toBe("desktops");
    expect(state.namespaceDraft).toBe("desktops");
  });

  it("wait for a choice when the kubeconfig names no current context", () => {
    const contexts = { contexts: [LAB, PROD], current: null };
    expect(currentContextStart(contexts)).toBeNull();
    const state = run(CONNECTED, { type: "contextsRead", contexts });
    expect(state.waitingForContext).toBe(true);
    expect(state.selectedContext).toBeNull();
  });

  it("connect without a context when the kubeconfig has none at all", () => {
    expect(currentContextStart({ contexts: [], current: null })).toEqual({
      context: null,
      namespace: "corral-vms",
    });
  });

  it("read again while one stays selected change only the list", () => {
    const state = run(CONNECTED, { type: "contextsListed", contexts: [PROD] });
    expect(state.contextsState).toEqual({ kind: "loaded", contexts: [PROD] });
    expect(state.selectedContext).toBe("lab");
    expect(state.cluster).toBe(CONNECTED.cluster);
  });

  it("that cannot be read say why, keeping the choice made", () => {
    const state = run(CONNECTED, { type: "contextsFailed", error: REFUSED });
    expect(state.contextsState).toEqual({ kind: "failed", error: REFUSED });
    expect(state.selectedContext).toBe("lab");
    expect(run(state, { type: "contextsLoading" }).contextsState).toEqual({ kind: "loading" });
  });
});

describe("a connection", () => {
  it("being replaced leaves nothing of the old one on screen", () => {
    const before = run(
      CONNECTED,
      {
        type: "received",
        received: { feed: 1, snapshot: snapshot({ kind: "live" }, "2026-01-01T00:00:00Z") },
        nowMs: 0,
      },
      { type: "credentials", state: { kind: "lasting" } },
      { type: "refused", error: REFUSED },
    );
    const state = run(before, { type: "connecting" });
    expect(state.cluster).toBeNull();
    expect(state.error).toBeNull();
    expect(state.snapshot).toBeNull();
    expect(state.credentials).toBeNull();
    expect(state.selectedContext).toBe("lab");
    expect(state.namespace).toBe("corral-vms");
  });

  it("being replaced when none is on screen changes nothing", () => {
    const replaced = run(CONNECTED, { type: "connecting" });
    expect(run(replaced, { type: "connecting" })).toBe(replaced);
  });

  it("refused says why", () => {
    expect(run(CONNECTED, { type: "connecting" }, { type: "refused", error: REFUSED }).error).toBe(
      REFUSED,
    );
  });

  it("made at start (no context, no scope asked) selects what the backend settled on", () => {
    const state = run(INITIAL_CLUSTER_STATE, {
      type: "connected",
      info: info(makeScope(false, "desktops"), "prod"),
      asked: null,
    });
    expect(state.selectedContext).toBe("prod");
    expect(state.namespace).toBe("desktops");
    expect(state.namespaceDraft).toBe("desktops");
    expect(state.allNamespaces).toBe(false);
  });

  it("to all namespaces ticks the box and keeps the namespace typed", () => {
    const state = run(CONNECTED, {
      type: "connected",
      info: info({ kind: "all" }),
      asked: null,
    });
    expect(state.allNamespaces).toBe(true);
    expect(state.namespace).toBe("corral-vms");
    expect(state.selectedContext).toBe("lab");
  });

  it("in the scope asked for changes no choice", () => {
    const typing = run(CONNECTED, { type: "namespaceDraft", draft: "other" });
    const state = run(typing, {
      type: "connected",
      info: info(makeScope(false, "corral-vms")),
      asked: makeScope(false, "corral-vms"),
    });
    expect(state.namespaceDraft).toBe("other");
  });
});

describe("a snapshot received", () => {
  const live = snapshot({ kind: "live" }, "2026-01-01T00:00:10Z");
  const failing = snapshot({ kind: "failing", error: REFUSED }, "2026-01-01T00:00:20Z");
  const tenSecondsBefore = Date.parse("2026-01-01T00:00:00Z");

  it("live sets the server clock's offset and when the feed was in sync", () => {
    const state = run(CONNECTED, {
      type: "received",
      received: { feed: 3, snapshot: live },
      nowMs: tenSecondsBefore,
    });
    expect(state.snapshot).toBe(live);
    expect(state.clockOffsetMs).toBe(10_000);
    expect(state.lastInSync).toEqual({ feed: 3, at: live.judgedAt });
  });

  it("failing keeps the same feed's last sync and the clock", () => {
    const state = run(
      CONNECTED,
      { type: "received", received: { feed: 3, snapshot: live }, nowMs: tenSecondsBefore },
      { type: "received", received: { feed: 3, snapshot: failing }, nowMs: 0 },
    );
    expect(state.snapshot).toBe(failing);
    expect(state.clockOffsetMs).toBe(10_000);
    expect(state.lastInSync).toEqual({ feed: 3, at: live.judgedAt });
  });

  it("failing from another feed forgets an older feed's sync", () => {
    const state = run(
      CONNECTED,
      { type: "received", received: { feed: 3, snapshot: live }, nowMs: tenSecondsBefore },
      { type: "received", received: { feed: 4, snapshot: failing }, nowMs: 0 },
    );
    expect(state.lastInSync).toBeNull();
  });
});

describe("the header's choices", () => {
  it("a context picked follows its start namespace when the namespace was the previous default", () => {
    expect(namespaceForContext(CONNECTED, "prod")).toBe("desktops");
    const state = run(CONNECTED, { type: "contextChosen", context: "prod", namespace: "desktops" });
    expect(state.selectedContext).toBe("prod");
    expect(state.namespace).toBe("desktops");
    expect(state.namespaceDraft).toBe("desktops");
  });

  it("a context picked keeps a namespace the administrator chose", () => {
    const chosen = run(CONNECTED, { type: "namespaceCommitted", namespace: "team-a" });
    expect(namespaceForContext(chosen, "prod")).toBe("team-a");
  });

  it("a context picked while waiting for one takes its start namespace", () => {
    const waiting = run(CONNECTED, {
      type: "contextsRead",
      contexts: { contexts: [LAB, PROD], current: null },
    });
    const chosen = run(waiting, { type: "namespaceCommitted", namespace: "team-a" });
    expect(namespaceForContext(chosen, "prod")).toBe("desktops");
    const state = run(chosen, { type: "contextChosen", context: "prod", namespace: "desktops" });
    expect(state.waitingForContext).toBe(false);
  });

  it("the namespace on screen committed again changes nothing, not even the state's identity", () => {
    // A render would refill a field that a WebDriver clear emptied without an input event.
    expect(run(CONNECTED, { type: "namespaceCommitted", namespace: "corral-vms" })).toBe(CONNECTED);
    expect(run(CONNECTED, { type: "namespaceReverted" })).toBe(CONNECTED);
    expect(run(CONNECTED, { type: "namespaceDraft", draft: "corral-vms" })).toBe(CONNECTED);
    expect(
      run(CONNECTED, { type: "scopeChosen", allNamespaces: false, namespace: "corral-vms" }),
    ).toBe(CONNECTED);
  });

  it("the namespace field is typed, reverted and committed", () => {
    const typed = run(CONNECTED, { type: "namespaceDraft", draft: "team-" });
    expect(typed.namespaceDraft).toBe("team-");
    expect(typed.namespace).toBe("corral-vms");
    expect(run(typed, { type: "namespaceReverted" }).namespaceDraft).toBe("corral-vms");
    const committed = run(typed, { type: "namespaceCommitted", namespace: "team-b" });
    expect(committed.namespace).toBe("team-b");
    expect(committed.namespaceDraft).toBe("team-b");
  });

  it("all namespaces, then one picked", () => {
    const all = run(CONNECTED, { type: "scopeChosen", allNamespaces: true, namespace: "team-a" });
    expect(all.allNamespaces).toBe(true);
    expect(all.namespace).toBe("team-a");
    expect(makeScope(all.allNamespaces, all.namespace)).toEqual({ kind: "all" });
    const one = run(all, { type: "scopeChosen", allNamespaces: false, namespace: "desktops" });
    expect(makeScope(one.allNamespaces, one.namespace)).toEqual({
      kind: "namespace",
      namespace: "desktops",
    });
    expect(one.namespaceDraft).toBe("desktops");
  });
});
