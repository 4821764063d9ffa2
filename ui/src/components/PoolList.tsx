import { useEffect, useRef, useState } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { Permissions } from "../bindings/Permissions";
import type { PoolView } from "../bindings/PoolView";
import { poolKey } from "../lib/claims";
import { estimatePoolHeight } from "../lib/poolView";
import { PoolSection, type PoolSectionProps } from "./PoolSection";

type PoolListProps = Omit<PoolSectionProps, "pool" | "permissions" | "collapsed"> & {
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

/** Up to this many members in all, every pool is in the page (cheap, and the browser's own
 * search finds everything); beyond, only those on screen are. */
const RENDER_WHOLE_UP_TO = 400;

/**
 * The pools, virtualized: beyond RENDER_WHOLE_UP_TO members only the sections on screen (and a
 * few around them) are in the page, measured as they render, so 1,000 pools cost what a dozen
 * do.
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
  // Where the list starts inside the scrolling area: banners and My desktops come first.
  const [offset, setOffset] = useState(0);
  useEffect(() => {
    const content = scrollElement()?.firstElementChild;
    if (!content) return;
    const observer = new ResizeObserver(() => {
      setOffset(listRef.current?.offsetTop ?? 0);
    });
    observer.observe(content);
    return () => {
      observer.disconnect();
    };
  }, [scrollElement]);
  const members = pools.reduce((n, p) => n + p.members.length, 0);
  const virtualizer = useVirtualizer({
    count: pools.length,
    getScrollElement: scrollElement,
    estimateSize: (index) => {
      const pool = pools[index];
      return estimatePoolHeight(
        pool.members.length,
        collapsed.has(poolKey(pool.namespace, pool.name)),
      );
    },
    getItemKey: (index) => poolKey(pools[index].namespace, pools[index].name),
    overscan: members <= RENDER_WHOLE_UP_TO ? pools.length : 3,
    scrollMargin: offset,
  });
  return (
    <div
      ref={listRef}
      className="pool-list"
      data-testid="pool-list"
      data-pool-count={pools.length}
      style={{ height: virtualizer.getTotalSize() }}
    >
      {virtualizer.getVirtualItems().map((item) => {
        const pool = pools[item.index];
        return (
          <div
            key={item.key}
            ref={virtualizer.measureElement}
            data-index={item.index}
            className="pool-slot"
            style={{ transform: `translateY(${item.start - offset}px)` }}
          >
            <PoolSection
              pool={pool}
              collapsed={collapsed.has(String(item.key))}
              onToggle={onToggle}
              permissions={permissionsFor(pool.namespace)}
              {...section}
            />
          </div>
        );
      })}
    </div>
  );
}
