/** The dialogs the window shows over the pools, one at a time. */
export type DialogKind = "claim" | "connect" | "sessions" | "usb" | "capacity";

/** Which dialogs are asked to be open (several may be at once: one is shown). */
export type DialogRequests = Record<DialogKind, boolean>;

/** Earlier ones win: the dialog of the action just asked for covers a view left open. */
const PRECEDENCE: readonly DialogKind[] = ["claim", "connect", "sessions", "usb", "capacity"];

/**
 * The one dialog shown: a claim or pool action's dialog, else Connect…, else the Sessions
 * list, else USB devices, else Capacity; null when none is asked for.
 */
export function shownDialog(open: DialogRequests): DialogKind | null {
  return PRECEDENCE.find((kind) => open[kind]) ?? null;
}
