/**
 * How the administrator arranged the pools list, remembered in this webview's local storage:
 * which pools are collapsed and the order. Pools are named by `claims.poolKey`.
 */

import { type PoolOrder, parsePoolOrder } from "./pools";

const COLLAPSED_KEY = "corral-vdi.collapsed-pools";
const ORDER_KEY = "corral-vdi.pool-order";
/** At most this many collapsed pools are remembered (the most recent ones). */
export const REMEMBERED_COLLAPSED = 5000;

/** The remembered collapsed pools; an unreadable entry counts as none. */
export function storedCollapsed(storage: Pick<Storage, "getItem"> | null): Set<string> {
  try {
    const parsed: unknown = JSON.parse(storage?.getItem(COLLAPSED_KEY) ?? "[]");
    return new Set(
      Array.isArray(parsed) ? parsed.filter((k): k is string => typeof k === "string") : [],
    );
  } catch {
    return new Set();
  }
}

/** Remembers `collapsed` (the last REMEMBERED_COLLAPSED keys); storage failures are ignored. */
export function storeCollapsed(
  storage: Pick<Storage, "setItem"> | null,
  collapsed: ReadonlySet<string>,
): void {
  try {
    storage?.setItem(COLLAPSED_KEY, JSON.stringify([...collapsed].slice(-REMEMBERED_COLLAPSED)));
  } catch {
    // Private mode or a full storage: the choice lasts until the window closes.
  }
}

/** `collapsed` with `key` flipped (a new set). */
export function toggled(collapsed: ReadonlySet<string>, key: string): Set<string> {
  const next = new Set(collapsed);
  if (!next.delete(key)) next.add(key);
  return next;
}

/** The remembered order ("name" when none). */
export function storedOrder(storage: Pick<Storage, "getItem"> | null): PoolOrder {
  try {
    return parsePoolOrder(storage?.getItem(ORDER_KEY) ?? null);
  } catch {
    return "name";
  }
}

/** Remembers the order; storage failures are ignored. */
export function storeOrder(storage: Pick<Storage, "setItem"> | null, order: PoolOrder): void {
  try {
    storage?.setItem(ORDER_KEY, order);
  } catch {
    // As above.
  }
}
