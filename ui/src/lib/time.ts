/**
 * Pure time formatting helpers. Nothing here decides a member's state: the backend does that.
 * These only present times the backend gave us.
 */

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** Parses an ISO-8601 string to epoch milliseconds; null when absent or unparseable. */
export function parseIso(iso: string | null | undefined): number | null {
  if (iso === null || iso === undefined || iso === "") {
    return null;
  }
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? null : ms;
}

/**
 * A duration in the two most significant units: "9s", "42m 10s", "3h 5m", "2d 4h".
 * Negative input is treated as its absolute value; fractions of a second are dropped.
 */
export function formatDuration(ms: number): string {
  const totalSeconds = Math.floor(Math.abs(ms) / SECOND);
  const days = Math.floor(totalSeconds / 86400);
  const hours = Math.floor((totalSeconds % 86400) / 3600);
  const minutes = Math.floor((totalSeconds % 3600) / 60);
  const seconds = totalSeconds % 60;
  if (days > 0) {
    return hours > 0 ? `${days}d ${hours}h` : `${days}d`;
  }
  if (hours > 0) {
    return minutes > 0 ? `${hours}h ${minutes}m` : `${hours}h`;
  }
  if (minutes > 0) {
    return `${minutes}m ${seconds}s`;
  }
  return `${seconds}s`;
}

/** How long something took: tenths of a second below ten seconds ("4.2s"), else as formatDuration. */
export function formatElapsed(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 10 * SECOND) {
    return `${(Math.floor(abs / 100) / 10).toFixed(1)}s`;
  }
  return formatDuration(abs);
}

/** The largest whole unit of a duration: "12s", "3m", "5h", "2d". */
export function formatCoarseDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs >= DAY) return `${Math.floor(abs / DAY)}d`;
  if (abs >= HOUR) return `${Math.floor(abs / HOUR)}h`;
  if (abs >= MINUTE) return `${Math.floor(abs / MINUTE)}m`;
  return `${Math.floor(abs / SECOND)}s`;
}

export type Countdown = {
  /** What to show: "in 42m 10s", "expired 3m ago". */
  text: string;
  /** Whether the time has passed. */
  past: boolean;
};

/**
 * A relative countdown to `targetMs` as seen at `nowMs`.
 * Future times count down to the second ("in 42m 10s", rounding up so "in 0s" never shows);
 * past times say how long ago, in one unit ("expired 3m ago").
 */
export function formatCountdown(targetMs: number, nowMs: number): Countdown {
  const diff = targetMs - nowMs;
  if (diff > 0) {
    const seconds = Math.ceil(diff / SECOND);
    return { text: `in ${formatDuration(seconds * SECOND)}`, past: false };
  }
  if (-diff < SECOND) {
    return { text: "expired just now", past: true };
  }
  return { text: `expired ${formatCoarseDuration(-diff)} ago`, past: true };
}

function pad2(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/**
 * How long ago `targetMs` was as seen at `nowMs`, in one unit: "just now", "42s ago", "3m ago",
 * "5h ago", "2d ago"; a time ahead of the clock (skew) reads "in 3m".
 */
export function formatAgo(targetMs: number, nowMs: number): string {
  const diff = nowMs - targetMs;
  if (Math.abs(diff) < 5 * SECOND) return "just now";
  return diff > 0 ? `${formatCoarseDuration(diff)} ago` : `in ${formatCoarseDuration(diff)}`;
}

/**
 * How far the API server's clock is ahead of ours (negative: behind), estimated from a
 * server timestamp that was taken just before `receivedAtMs`. Zero when unknown.
 */
export function estimateClockOffset(
  serverIso: string | null | undefined,
  receivedAtMs: number,
): number {
  const server = parseIso(serverIso);
  return server === null ? 0 : server - receivedAtMs;
}

/** A UTC offset in minutes east of Greenwich as "UTC", "UTC+01:00", "UTC-05:30". */
export function formatUtcOffset(offsetMinutes: number): string {
  if (offsetMinutes === 0) return "UTC";
  const sign = offsetMinutes > 0 ? "+" : "-";
  const abs = Math.abs(Math.round(offsetMinutes));
  return `UTC${sign}${pad2(Math.floor(abs / 60))}:${pad2(abs % 60)}`;
}

/**
 * "YYYY-MM-DD HH:MM:SS UTC+01:00": the wall-clock time at `offsetMinutes` east of UTC, with the
 * offset, so that a time read off the screen is never ambiguous. Without `offsetMinutes`, the
 * local zone's offset at that instant (daylight saving included). Rounded to the nearest second,
 * as the CLI prints it (vdi-core's `describe_instant`). Null when not a valid time.
 */
export function formatDateTimeWithZone(
  iso: string | null | undefined,
  offsetMinutes?: number,
): string | null {
  const exact = parseIso(iso);
  if (exact === null) {
    return null;
  }
  const ms = Math.round(exact / 1000) * 1000;
  // Date's offset is minutes *west* of UTC.
  const offset = offsetMinutes ?? -new Date(ms).getTimezoneOffset();
  const d = new Date(ms + offset * MINUTE);
  return (
    `${d.getUTCFullYear()}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())} ` +
    `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}:${pad2(d.getUTCSeconds())} ` +
    formatUtcOffset(offset)
  );
}
