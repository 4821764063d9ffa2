/** A member's history as the dialog lists it: newest first, one line per act. */
import type { AuditEntry } from "../bindings";

export type HistoryRow = {
  key: string;
  time: string;
  reason: string;
  warning: boolean;
  count: number;
  /** The member the act was on; null for the pool's own (a resize). */
  member: string | null;
  /** The user the act concerned and who did it, as the core words it ("alice (by admin)"). */
  who: string;
  /** Why, in a word, else the Event's sentence. */
  why: string;
  /** The Event's sentence. */
  message: string;
};

/** `entries` (oldest first, as the backend lists them) as rows, newest first. */
export function historyRows(entries: readonly AuditEntry[]): HistoryRow[] {
  return entries
    .map((e, i) => ({
      key: `${e.time}/${e.reason}/${i}`,
      time: e.time,
      reason: e.reason,
      warning: e.warning,
      count: e.count,
      member: e.member,
      who: e.who,
      why: e.why ?? e.message,
      message: e.message,
    }))
    .reverse();
}
