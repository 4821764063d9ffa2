import { memo, useId, useMemo } from "react";
import type { MemberView, Permissions, PoolView } from "../bindings";
import { actionKeys, assignAvailability, poolKey } from "../lib/claims";
import { memberOffsets } from "../lib/poolRows";
import { describePolicy, formatStateCounts } from "../lib/policy";
import { poolTestId } from "../lib/presentation";
import { describeUsage, formatHour, HEAD_HOURS, lastHours, usageRows } from "../lib/usage";
import { MemberRow } from "./MemberRow";
import { UsageChart } from "./UsageChart";
import { Working } from "./Working";

export type PoolSectionProps = {
  pool: PoolView;
  clockOffsetMs: number;
  /** Keys of the actions running now (see actionKeys). */
  running: ReadonlySet<string>;
  onAssign: (pool: PoolView) => void;
  onDelete: (pool: PoolView) => void;
  /** Opens the pool's settings (its DesktopPool; Adopt for an unmanaged pool). */
  onSettings: (pool: PoolView) => void;
  /** Opens a member's history (its audit Events). */
  onHistory: (member: MemberView) => void;
  /** Opens the pool's history (its members' and its own audit Events). */
  onPoolHistory: (pool: PoolView) => void;
  /** Opens a managed pool's hourly usage. */
  onUsage: (pool: PoolView) => void;
  onUnassign: (member: MemberView, force: boolean) => void;
  onConnect: (member: MemberView) => void;
  /** What you may do in the pool's namespace; null until known. */
  permissions: Permissions | null;
  /** Only the header shows. */
  collapsed: boolean;
  /** Where the pool's box starts in the list, and its height (pixels, `poolRows`). */
  top: number;
  height: number;
  /** The members on screen, whose rows are mounted: `pool.members[from..to)`. */
  from: number;
  to: number;
  /** Collapses or expands the pool (by its key, `claims.poolKey`). */
  onToggle: (key: string) => void;
};

/** One pool: its header with counts and actions, and (unless collapsed) its members' table
 * (ARIA table roles on rows of known height, only those on screen mounted). Memoized: a live
 * update re-renders only the pools it changed, scrolling only those whose mounted rows change. */
export const PoolSection = memo(function PoolSection({
  pool,
  clockOffsetMs,
  running,
  onAssign,
  onDelete,
  onSettings,
  onHistory,
  onPoolHistory,
  onUsage,
  onUnassign,
  onConnect,
  permissions,
  collapsed,
  onToggle,
  top,
  height,
  from,
  to,
}: PoolSectionProps) {
  const headingId = useId();
  const tableId = useId();
  const { counts } = pool;
  const exhausted = counts.total > 0 && counts.free === 0;
  const countsText = formatStateCounts(pool.stateCounts, counts.total);
  const assign = assignAvailability(pool, permissions);
  const deleteAllowed = permissions?.deletePool ?? { allowed: true, reason: null };
  const assigning = running.has(actionKeys.assign(pool.namespace, pool.name));
  const deleting = running.has(actionKeys.deletePool(pool.namespace, pool.name));
  const rows = useMemo(() => memberOffsets(pool.members), [pool.members]);
  // The day up to the broker's newest hour, named: a broker that stopped recording leaves an
  // older day, which is not called the last one.
  const usageSummary = useMemo(() => {
    const day = lastHours(usageRows(pool.usage), HEAD_HOURS);
    if (day.length === 0) return "";
    const upTo = formatHour(day[day.length - 1].end.getTime());
    return `the ${HEAD_HOURS} hours up to ${upTo}: ${describeUsage(day)}`;
  }, [pool.usage]);
  return (
    <section
      className={collapsed ? "pool pool-collapsed" : "pool"}
      data-testid={poolTestId(pool.namespace, pool.name)}
      aria-labelledby={headingId}
      style={{ top, height }}
    >
      <div className="pool-head">
        <button
          type="button"
          className="pool-toggle"
          data-testid={`toggle-${pool.namespace}-${pool.name}`}
          aria-expanded={!collapsed}
          aria-controls={collapsed ? undefined : tableId}
          aria-label={`${collapsed ? "Expand" : "Collapse"} pool ${pool.name}`}
          title={collapsed ? "Show the members" : "Hide the members"}
          onClick={() => {
            onToggle(poolKey(pool.namespace, pool.name));
          }}
        >
          <span className="pool-toggle-icon" aria-hidden="true">
            {collapsed ? "▸" : "▾"}
          </span>
        </button>
        <h2 id={headingId} className="pool-name">
          {pool.name}
        </h2>
        <span className="pool-ns mono" title={`namespace ${pool.namespace}`}>
          ns/{pool.namespace}
        </span>
        <span
          className={`badge pool-managed tone-${pool.managed ? "blue" : "grey"}`}
          data-testid={`managed-${pool.namespace}-${pool.name}`}
          title={
            pool.policy !== null
              ? `Managed by the broker: ${describePolicy(pool.policy)}`
              : pool.managed
                ? "Managed by the broker (DesktopPool)"
                : "Unmanaged: no DesktopPool, so the broker keeps no size, warm members or reclaim rules here"
          }
        >
          {pool.managed ? "managed" : "unmanaged"}
        </span>
        {pool.policyProblem !== null ? (
          <span
            className="badge tone-red pool-problem truncate"
            data-testid={`policy-problem-${pool.namespace}-${pool.name}`}
            title={`Its DesktopPool cannot be read, so the broker leaves the pool as it is: ${pool.policyProblem}`}
          >
            policy: {pool.policyProblem}
          </span>
        ) : null}
        <span
          className={exhausted ? "pool-counts pool-exhausted" : "pool-counts"}
          data-testid={`counts-${pool.namespace}-${pool.name}`}
          title={`${countsText}${exhausted ? ": no member is free to claim" : ""}`}
        >
          {countsText}
        </span>
        {pool.managed ? (
          <button
            type="button"
            className={pool.usage.length > 0 ? "pool-usage" : "btn btn-small"}
            data-testid={`usage-${pool.namespace}-${pool.name}`}
            aria-label={
              pool.usage.length > 0
                ? `Usage of pool ${pool.name} in ${usageSummary}`
                : `Usage of pool ${pool.name}`
            }
            title={
              pool.usage.length > 0
                ? `In ${usageSummary}. Click for the seven days kept.`
                : "Members claimed and free hour by hour: nothing recorded yet"
            }
            onClick={() => {
              onUsage(pool);
            }}
          >
            {pool.usage.length > 0 ? (
              <>
                <span className="pool-usage-caption" aria-hidden="true">
                  Usage
                </span>
                <UsageChart buckets={pool.usage} size="small" testId={`usage-chart-${pool.name}`} />
              </>
            ) : (
              "Usage"
            )}
          </button>
        ) : null}
        {pool.resizeNote !== null ? (
          <span
            className="badge tone-amber pool-resizing truncate"
            data-testid={`resizing-${pool.namespace}-${pool.name}`}
            title={`The broker is carrying out a smaller size: ${pool.resizeNote}`}
          >
            {pool.resizeNote}
          </span>
        ) : null}
        {pool.strayLeases.length > 0 ? (
          <span
            className="badge tone-amber pool-stray"
            data-testid={`stray-${pool.namespace}-${pool.name}`}
            title={`Labelled for this pool, but not the claim of any of its members (a claim is the Lease corral-vdi-<member>): not joined to any member, and left alone by Delete: ${pool.strayLeases.join(", ")}`}
          >
            {pool.strayLeases.length === 1
              ? "1 stray Lease"
              : `${pool.strayLeases.length} stray Leases`}
          </span>
        ) : null}
        <button
          type="button"
          className="btn btn-small pool-assign"
          data-testid={`assign-${pool.namespace}-${pool.name}`}
          disabled={!assign.enabled || assigning}
          data-reason={assign.enabled ? undefined : assign.title}
          aria-busy={assigning || undefined}
          aria-label={assigning ? undefined : `Assign a member of ${pool.name}…`}
          title={assign.title}
          onClick={() => {
            onAssign(pool);
          }}
        >
          {assigning ? <Working /> : "Assign…"}
        </button>
        <button
          type="button"
          className="btn btn-small"
          data-testid={`pool-history-${pool.namespace}-${pool.name}`}
          disabled={permissions?.history.allowed === false}
          data-reason={permissions?.history.reason ?? undefined}
          aria-label={`History of pool ${pool.name}`}
          title={
            permissions?.history.reason ??
            `What happened in ${pool.name}: claims, releases, reclaims, members added and removed, resizes`
          }
          onClick={() => {
            onPoolHistory(pool);
          }}
        >
          History
        </button>
        <button
          type="button"
          className="btn btn-small"
          data-testid={`settings-${pool.namespace}-${pool.name}`}
          aria-label={`Settings of pool ${pool.name}…`}
          title={`Who may use ${pool.name}, its size, warm members, timeouts and what a release does`}
          onClick={() => {
            onSettings(pool);
          }}
        >
          Settings…
        </button>
        <button
          type="button"
          className="btn btn-small btn-quiet-danger"
          data-testid={`delete-${pool.namespace}-${pool.name}`}
          disabled={deleting || !deleteAllowed.allowed}
          aria-busy={deleting || undefined}
          aria-label={deleting ? undefined : `Delete pool ${pool.name}…`}
          data-reason={deleteAllowed.reason ?? undefined}
          title={
            deleteAllowed.reason ??
            `Delete pool ${pool.name}: its members, their Leases and leftover clone objects`
          }
          onClick={() => {
            onDelete(pool);
          }}
        >
          {deleting ? <Working /> : "Delete…"}
        </button>
      </div>
      {collapsed ? null : (
        <div className="table-wrap" id={tableId}>
          <div
            role="table"
            className="member-grid"
            aria-label={`Members of pool ${pool.name} in namespace ${pool.namespace}`}
            aria-rowcount={Math.max(1, pool.members.length) + 1}
          >
            <div role="rowgroup">
              <div role="row" className="member-columns" aria-rowindex={1}>
                <div role="columnheader">Member</div>
                <div role="columnheader">State</div>
                <div role="columnheader">Holder</div>
                <div role="columnheader">Claimed</div>
                <div role="columnheader">Lease ends</div>
                <div role="columnheader">Power</div>
                <div role="columnheader">
                  <span className="sr-only">Actions</span>
                </div>
              </div>
            </div>
            <div role="rowgroup" className="member-rows" style={{ height: rows.height }}>
              {pool.members.length === 0 ? (
                <div role="row" className="member-row member-row-last" aria-rowindex={2}>
                  <div role="cell" className="muted no-members">
                    This pool has no members.
                  </div>
                </div>
              ) : (
                pool.members
                  .slice(from, to)
                  .map((m, i) => (
                    <MemberRow
                      key={m.name}
                      member={m}
                      top={rows.tops[from + i]}
                      rowIndex={from + i + 2}
                      last={from + i === pool.members.length - 1}
                      clockOffsetMs={clockOffsetMs}
                      onUnassign={onUnassign}
                      onConnect={onConnect}
                      onHistory={onHistory}
                      releasing={running.has(actionKeys.release(m.namespace, m.name))}
                      permissions={permissions}
                    />
                  ))
              )}
            </div>
          </div>
        </div>
      )}
    </section>
  );
});
