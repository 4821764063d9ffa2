/**
 * A managed pool's hourly usage, as its charts and table show it. The buckets are the broker's
 * (`PoolView.usage`: one per UTC hour it ran, oldest first, at most seven days); this only picks
 * the hours to draw and puts them in words, in the user's local time.
 */
import type { UsageBucket } from "../bindings";
import { formatUtcOffset, parseIso } from "./time";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

/** The hours the pool's head draws: the last day. */
export const HEAD_HOURS = 24;

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** Reclaim reasons in the order they are listed (any other the broker adds comes after). */
const REASONS = ["disconnected", "maxSession", "idle", "expired", "invalid", "unfit"];

/** One hour of usage, ready to draw and to list. */
export type UsageRow = {
  /** The hour's start exactly as the broker wrote it (RFC 3339 UTC): the row's identity. */
  hour: string;
  /** The hour's start and end. */
  start: Date;
  end: Date;
  /** The most members claimed at once in the hour. */
  peak: number;
  /** The fewest members free at once in the hour. */
  free: number;
  /** Claims reclaimed in the hour, by why, in REASONS order; none listed when none. */
  reclaims: [why: string, count: number][];
  /** "09:00 7 Dec: peak 3 claimed, lowest 0 free" (local time). */
  label: string;
};

/** The local zone's offset east of UTC at `ms`, in minutes. */
function localOffset(ms: number): number {
  // Date's offset is minutes *west* of UTC.
  return -new Date(ms).getTimezoneOffset();
}

/** The wall clock at `offsetMinutes` east of UTC (default: the local zone's) as UTC fields. */
function wallClock(ms: number, offsetMinutes?: number): Date {
  return new Date(ms + (offsetMinutes ?? localOffset(ms)) * MINUTE);
}

function pad2(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** "09:00" at `offsetMinutes` east of UTC (default: local time). */
export function formatTimeOfDay(ms: number, offsetMinutes?: number): string {
  const d = wallClock(ms, offsetMinutes);
  return `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}`;
}

/** "7 Dec" at `offsetMinutes` east of UTC (default: local time). */
export function formatDay(ms: number, offsetMinutes?: number): string {
  const d = wallClock(ms, offsetMinutes);
  return `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]}`;
}

/** "09:00 7 Dec": an hour's start, at `offsetMinutes` east of UTC (default: local time). */
export function formatHour(ms: number, offsetMinutes?: number): string {
  return `${formatTimeOfDay(ms, offsetMinutes)} ${formatDay(ms, offsetMinutes)}`;
}

/** An axis tick: the day at midnight ("8 Dec"), else the time of day ("12:00"), with the day
 * under it at the `first` tick. */
export function formatTick(ms: number, first: boolean, offsetMinutes?: number): string {
  const time = formatTimeOfDay(ms, offsetMinutes);
  const day = formatDay(ms, offsetMinutes);
  if (time === "00:00") return day;
  return first ? `${time}\n${day}` : time;
}

/** "2 idle, 1 maxSession"; "none" without reclaims. */
export function describeReclaims(reclaims: UsageRow["reclaims"]): string {
  return reclaims.length === 0
    ? "none"
    : reclaims.map(([why, count]) => `${count} ${why}`).join(", ");
}

/** Orders reclaim counts by why: REASONS first, in their order, then any other by name. */
function byReason([a]: [string, number], [b]: [string, number]): number {
  const rank = (why: string) => (REASONS.includes(why) ? REASONS.indexOf(why) : REASONS.length);
  return rank(a) - rank(b) || a.localeCompare(b);
}

function reclaimsOf(bucket: UsageBucket): UsageRow["reclaims"] {
  return Object.entries(bucket.reclaims ?? {})
    .filter(([, count]) => count > 0)
    .sort(byReason);
}

/** The buckets as rows, oldest first (a bucket whose hour cannot be read is left out); labels at
 * `offsetMinutes` east of UTC (default: local time). */
export function usageRows(buckets: readonly UsageBucket[], offsetMinutes?: number): UsageRow[] {
  const rows: UsageRow[] = [];
  for (const bucket of buckets) {
    const start = parseIso(bucket.hour);
    if (start === null) continue;
    const peak = bucket.peakClaimed ?? 0;
    const free = bucket.lowestFree ?? 0;
    rows.push({
      hour: bucket.hour,
      start: new Date(start),
      end: new Date(start + HOUR),
      peak,
      free,
      reclaims: reclaimsOf(bucket),
      label: `${formatHour(start, offsetMinutes)}: peak ${peak} claimed, lowest ${free} free`,
    });
  }
  return rows;
}

/** The time the chart spans: the `hours` up to the end of the newest row, or (without
 * `hours`) from the oldest row's start; null without rows. */
export function usageSpan(rows: readonly UsageRow[], hours?: number): [Date, Date] | null {
  if (rows.length === 0) return null;
  const end = rows[rows.length - 1].end;
  const start = hours === undefined ? rows[0].start : new Date(end.getTime() - hours * HOUR);
  return [start, end];
}

/** The rows within the last `hours` hours up to the newest row (the broker's latest hour). */
export function lastHours(rows: readonly UsageRow[], hours: number): UsageRow[] {
  const span = usageSpan(rows, hours);
  return span === null ? [] : rows.filter((row) => row.start >= span[0]);
}

/** The row with the most members claimed (the latest of equals); null without rows. */
export function peakRow(rows: readonly UsageRow[]): UsageRow | null {
  let peak: UsageRow | null = null;
  for (const row of rows) {
    if (peak === null || row.peak >= peak.peak) peak = row;
  }
  return peak;
}

/** Lowest free as a line's points, at each hour's middle; a point with `free: null` breaks the
 * line where hours are missing (the broker was not running). */
export function freeLine(rows: readonly UsageRow[]): { at: Date; free: number | null }[] {
  const points: { at: Date; free: number | null }[] = [];
  rows.forEach((row, i) => {
    if (i > 0 && row.start.getTime() !== rows[i - 1].end.getTime()) {
      points.push({ at: row.start, free: null });
    }
    points.push({ at: new Date(row.start.getTime() + HOUR / 2), free: row.free });
  });
  return points;
}

/**
 * The rows in a sentence: "Peak 3 claimed at 09:00 7 Dec; lowest free 0; 2 reclaimed (1 idle,
 * 1 maxSession)"; "Nothing claimed; lowest free 2" when nothing was. Local time unless
 * `offsetMinutes` says otherwise.
 */
export function describeUsage(rows: readonly UsageRow[], offsetMinutes?: number): string {
  const peak = peakRow(rows);
  if (peak === null) return "No usage recorded";
  const lowest = Math.min(...rows.map((row) => row.free));
  const claimed =
    peak.peak === 0
      ? "Nothing claimed"
      : `Peak ${peak.peak} claimed at ${formatHour(peak.start.getTime(), offsetMinutes)}`;
  const counts = new Map<string, number>();
  for (const row of rows) {
    for (const [why, count] of row.reclaims) counts.set(why, (counts.get(why) ?? 0) + count);
  }
  const reclaims = [...counts].sort(byReason);
  const reclaimed = reclaims.reduce((n, [, count]) => n + count, 0);
  return (
    `${claimed}; lowest free ${lowest}` +
    (reclaimed === 0 ? "" : `; ${reclaimed} reclaimed (${describeReclaims(reclaims)})`)
  );
}

/** "local time, UTC+01:00": the zone the charts and the table show hours in, at `ms`. */
export function describeZone(ms: number): string {
  return `local time, ${formatUtcOffset(localOffset(ms))}`;
}
