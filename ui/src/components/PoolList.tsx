import { useCallback, useLayoutEffect, useMemo, useRef, useState } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { Permissions, PoolView } from "../bindings";
import { poolKey } from "../lib/claims";
import { layoutPools, poolWindows } from "../lib/poolRows";
import { PoolSection, type PoolSectionProps } from "./PoolSection";

type PoolListProps = Omit<
  PoolSectionProps,
  "pool" | "permissions" | "collapsed" | "top" | "height" | "from" | "to"
> & {
  pools: readonly PoolView[];
  /**
   * The element that scrolls the list (the main area). The list need not start at its top, but
   * must sit inside its first child, whose size changes whenever anything above the list does.
   */
  scrollElement: () => HTMLElement | null;
  /** Keys (`claims.poolKey`) of the collapsed pools. */
  collapsed: ReadonlySet<string>;
  /** What you may do in a namespace; null until known. */
  permissionsFor: (namespace: string) => Permissions | null;
};

/** Up to this many members in all, every row is in the page (cheap, and the browser's own
 * search finds everything); beyond, only those on screen are. */
const RENDER_WHOLE_UP_TO = 400;

/** Rows mounted above and below the screen. */
const OVERSCAN_ROWS = 6;

/**
 * The pools, virtualized row by row: every row's height follows from the data (`poolRows`),
 * so beyond RENDER_WHOLE_UP_TO members only the rows on screen (and a few around them) are in
 * the page, each pool section holding just its own, and nothing is measured while scrolling.
 */
export function PoolList({
  pools,
  scrollElement,
  collapsed,
  onToggle,
  permissionsFor,
  ...section
}: PoolListProps) {
  const listRef = useRef<HTMLDivElement>(null);
  // Where the list starts inside the scrolling area: banners and My desktops come first. Read
  // before the first paint, so the rows on screen are right the first time.
  const [offset, setOffset] = useState(0);
  useLayoutEffect(() => {
    const content = scrollElement()?.firstElementChild;
    if (!content) return;
    const measure = () => {
      setOffset(listRef.current?.offsetTop ?? 0);
    };
    measure();
    const observer = new ResizeObserver(measure);
    observer.observe(content);
    return () => {
      observer.disconnect();
    };
  }, [scrollElement]);
  const layout = useMemo(
    () => layoutPools(pools, (pool) => collapsed.has(poolKey(pool.namespace, pool.name))),
    [pools, collapsed],
  );
  const members = pools.reduce((n, p) => n + p.members.length, 0);
  // A new layout is a new key function: the virtualizer then takes every size afresh.
  const getItemKey = useCallback(
    (index: number) => {
      const row = layout.rows[index];
      const pool = pools[row.pool];
      const key = poolKey(pool.namespace, pool.name);
      return row.kind === "member"
        ? `${key}/${pool.members[row.member].name}`
        : `${key}:${row.kind}`;
    },
    [layout, pools],
  );
  const virtualizer = useVirtualizer({
    count: layout.rows.length,
    getScrollElement: scrollElement,
    estimateSize: (index) => layout.sizes[index],
    getItemKey,
    overscan: members <= RENDER_WHOLE_UP_TO ? layout.rows.length : OVERSCAN_ROWS,
    scrollMargin: offset,
  });
  const windows = poolWindows(
    layout,
    virtualizer.getVirtualItems().map((item) => item.index),
  );
  return (
    <div
      ref={listRef}
      className="pool-list"
      data-testid="pool-list"
      data-pool-count={pools.length}
      style={{ height: layout.total }}
    >
      {windows.map(({ pool: index, from, to }) => {
        const pool = pools[index];
        const key = poolKey(pool.namespace, pool.name);
        return (
          <PoolSection
            key={key}
            pool={pool}
            top={layout.poolTop[index]}
            height={layout.poolHeight[index]}
            from={from}
            to={to}
            collapsed={collapsed.has(key)}
            onToggle={onToggle}
            permissions={permissionsFor(pool.namespace)}
            {...section}
          />
        );
      })}
    </div>
  );
}
