/**
 * The pools list laid out as rows of known heights: each pool is a header, then (unless
 * collapsed) its table's column header and one row per member. Every height follows from the
 * data alone, so the list is virtualized row by row without measuring anything in the page:
 * only the rows on screen (and a few around them) are mounted, wherever they are in 10,000.
 */

import type { MemberView, PoolView } from "../bindings";

/** Row heights in pixels (the stylesheet gives the rows these heights: `styles.css`, "Pools"). */
export const ROW_HEIGHT = {
  /** A pool's header: toggle, name, namespace, counts, Assign… and Delete…. */
  head: 46,
  /** The members table's column header. */
  columns: 32,
  /** A member whose state fits one line. */
  member: 37,
  /** A member whose state label wraps to two lines at the narrowest window (900 px). */
  tallMember: 55,
  /** "This pool has no members." */
  empty: 37,
} as const;

/** Space between two pools, in pixels. */
export const POOL_GAP = 14;

/** A pool's box: its 1 px border above its header and below its last row. */
const POOL_BORDER = 1;

/** State labels longer than this many characters wrap in the State column at 900 px. */
const ONE_LINE_STATE = 20;

/**
 * A member row's height: two lines for a long state ("assigned (legacy, label-only)") or one
 * with the backend's note under it ("removed when released").
 */
export function memberRowHeight(member: Pick<MemberView, "stateLabel" | "stateNote">): number {
  return member.stateLabel.length > ONE_LINE_STATE || member.stateNote !== null
    ? ROW_HEIGHT.tallMember
    : ROW_HEIGHT.member;
}

/** One row of the list; `pool` and `member` index into the pools laid out. */
export type ListRow =
  | { kind: "head"; pool: number }
  | { kind: "columns"; pool: number }
  | { kind: "member"; pool: number; member: number }
  | { kind: "empty"; pool: number };

/** Where everything is: rows in order with their sizes, and each pool's box. */
export type ListLayout = {
  rows: ListRow[];
  /** Each row's size: its height, the pool's border above its header and below its last row,
   * and after a pool's last row the gap to the next pool. */
  sizes: number[];
  /** Each pool's top, from the top of the list. */
  poolTop: number[];
  /** Each pool's height with its border (without the gap after it). */
  poolHeight: number[];
  /** The list's whole height. */
  total: number;
};

/** Lays out `pools` (in the order shown), `isCollapsed` telling which show their header only. */
export function layoutPools(
  pools: readonly PoolView[],
  isCollapsed: (pool: PoolView) => boolean,
): ListLayout {
  const rows: ListRow[] = [];
  const sizes: number[] = [];
  const poolTop: number[] = [];
  const poolHeight: number[] = [];
  let y = 0;
  const push = (row: ListRow, height: number) => {
    rows.push(row);
    sizes.push(height);
    y += height;
  };
  pools.forEach((pool, p) => {
    poolTop.push(y);
    push({ kind: "head", pool: p }, POOL_BORDER + ROW_HEIGHT.head);
    if (!isCollapsed(pool)) {
      push({ kind: "columns", pool: p }, ROW_HEIGHT.columns);
      if (pool.members.length === 0) {
        push({ kind: "empty", pool: p }, ROW_HEIGHT.empty);
      }
      pool.members.forEach((member, m) => {
        push({ kind: "member", pool: p, member: m }, memberRowHeight(member));
      });
    }
    sizes[sizes.length - 1] += POOL_BORDER;
    y += POOL_BORDER;
    poolHeight.push(y - poolTop[p]);
    if (p < pools.length - 1) {
      sizes[sizes.length - 1] += POOL_GAP;
      y += POOL_GAP;
    }
  });
  return { rows, sizes, poolTop, poolHeight, total: y };
}

/** Where each member's row starts inside its pool's table body (pixels from its top), and the
 * body's height: the running sum of [`memberRowHeight`]. */
export function memberOffsets(members: readonly Pick<MemberView, "stateLabel" | "stateNote">[]): {
  tops: number[];
  height: number;
} {
  const tops: number[] = [];
  let y = 0;
  for (const member of members) {
    tops.push(y);
    y += memberRowHeight(member);
  }
  return { tops, height: members.length === 0 ? ROW_HEIGHT.empty : y };
}

/** A pool with rows on screen, and which of its members are: `members[from..to)`. */
export type PoolWindow = { pool: number; from: number; to: number };

/** The pools that rows `indexes` (ascending, as the virtualizer gives them) belong to, in
 * order, each with the range of its members among them (empty when only its header is). */
export function poolWindows(
  layout: Pick<ListLayout, "rows">,
  indexes: Iterable<number>,
): PoolWindow[] {
  const windows: PoolWindow[] = [];
  for (const index of indexes) {
    const row = layout.rows[index];
    let last = windows.at(-1);
    if (last?.pool !== row.pool) {
      last = { pool: row.pool, from: 0, to: 0 };
      windows.push(last);
    }
    if (row.kind === "member") {
      if (last.from === last.to) last.from = row.member;
      last.to = row.member + 1;
    }
  }
  return windows;
}
