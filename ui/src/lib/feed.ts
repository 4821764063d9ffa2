import type { FeedStatus, PoolView, PoolsSnapshot, PoolsUpdate } from "../bindings";
import { poolKey } from "./claims";
import { errorTitle } from "./errors";
import { formatDateTimeWithZone } from "./time";

export type FeedIndicator = {
  /** Drives the dot colour. */
  tone: "live" | "syncing" | "failing" | "idle";
  /** The indicator's text: "live", "syncing…", … */
  text: string;
  /** Longer explanation for the tooltip. */
  detail: string;
};

export type FeedInput = {
  /** The app could not be connected (no backend, kubeconfig unreadable, connect_cluster failed). */
  disconnected: boolean;
  /** Nothing to connect to until the user picks a context. */
  waitingForContext: boolean;
  /** The latest status of the live feed for the current connection, if any arrived. */
  status: FeedStatus | null;
  /** API server time of the latest snapshot. */
  judgedAt: string | null;
};

/** What the small feed indicator in the header says. */
export function feedIndicator(input: FeedInput): FeedIndicator {
  if (input.disconnected) {
    return { tone: "failing", text: "offline", detail: "Not connected to a cluster" };
  }
  if (input.waitingForContext) {
    return { tone: "idle", text: "idle", detail: "Pick a kubeconfig context to connect" };
  }
  const status = input.status;
  if (status === null || status.kind === "syncing") {
    return {
      tone: "syncing",
      text: "syncing…",
      detail: "Waiting for the first full list from the cluster",
    };
  }
  if (status.kind === "live") {
    const at = formatDateTimeWithZone(input.judgedAt);
    return {
      tone: "live",
      text: "live",
      detail: at
        ? `In sync; changes appear as they happen. Last change judged at ${at} (API server time).`
        : "In sync; changes appear as they happen.",
    };
  }
  // The cluster answered: a refusal is not being offline.
  const refused = status.error.kind === "forbidden" || status.error.kind === "unauthorized";
  return {
    tone: "failing",
    text: refused ? "no access" : status.error.retryable ? "reconnecting…" : "offline",
    detail: `${errorTitle(status.error.kind)}: ${status.error.message}`,
  };
}

/** What one feed has sent so far, merged: the pools view as of its last update. */
export type Received = { feed: number; snapshot: PoolsSnapshot };

/** (namespace, name) order, as the backend sorts (names are ASCII). */
function byNamespaceAndName(a: PoolView, b: PoolView): number {
  if (a.namespace !== b.namespace) return a.namespace < b.namespace ? -1 : 1;
  if (a.name === b.name) return 0;
  return a.name < b.name ? -1 : 1;
}

/**
 * Applies one `pools-update` to what its feed sent before. Pools the update does not name keep
 * their object (so that memoized rows skip re-rendering). Returns null when the update cannot
 * apply: a partial update of a feed whose full list this window has not received (a late
 * event of a replaced connection).
 */
export function applyPoolsUpdate(previous: Received | null, update: PoolsUpdate): Received | null {
  const { feed, scope, status, judgedAt } = update;
  if (update.full) {
    return { feed, snapshot: { scope, status, judgedAt, pools: update.changed } };
  }
  if (previous === null || previous.feed !== feed) return null;
  let pools = previous.snapshot.pools;
  if (update.changed.length > 0 || update.removed.length > 0) {
    const byKey = new Map(pools.map((p) => [poolKey(p.namespace, p.name), p]));
    for (const gone of update.removed) byKey.delete(poolKey(gone.namespace, gone.name));
    let added = false;
    for (const pool of update.changed) {
      const key = poolKey(pool.namespace, pool.name);
      added ||= !byKey.has(key);
      byKey.set(key, pool);
    }
    pools = [...byKey.values()];
    if (added) pools.sort(byNamespaceAndName);
  }
  return { feed, snapshot: { scope, status, judgedAt, pools } };
}
