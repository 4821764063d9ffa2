/**
 * Start-up milestones as User Timing marks (`performance.mark`), each recorded once per page:
 * the benchmarks read them (`performance.getEntriesByType("mark")`) to say where the time from
 * launch to pools on screen goes. Times are milliseconds since `performance.timeOrigin`.
 */
export type Milestone = "cluster-requested" | "cluster-connected" | "first-live-update";

/** Marks `corral:<milestone>` unless this page already has. */
export function markOnce(milestone: Milestone): void {
  const name = `corral:${milestone}`;
  if (typeof performance === "undefined" || performance.getEntriesByName(name).length > 0) return;
  performance.mark(name);
}
