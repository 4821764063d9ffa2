import { useEffect, useMemo, useRef, useState } from "react";
import type * as Plot from "@observablehq/plot";
import type { UsageBucket } from "../bindings";
import {
  describeUsage,
  describeZone,
  formatTick,
  freeLine,
  HEAD_HOURS,
  lastHours,
  usageRows,
  usageSpan,
  type UsageRow,
} from "../lib/usage";

type UsageChartProps = {
  /** The pool's buckets (`PoolView.usage`), oldest first; not empty. */
  buckets: readonly UsageBucket[];
  /** Small: the last 24 hours' peaks, bare, for the pool's head. Large: every hour kept (seven
   * days), peaks as bars and lowest free as a line, with axes. */
  size: "small" | "large";
  testId: string;
};

/** The large chart's size in pixels (it scales down with the dialog). */
const LARGE = { width: 780, height: 280 };

/** The small chart's size in pixels (styles.css, "Usage", gives its box this size). */
const SMALL = { width: 88, height: 24 };

/**
 * A pool's hourly usage drawn by Observable Plot (SVG), loaded on first use so that the main
 * bundle does not carry it. Every bar is a `rect` with the hour in words (`aria-label`, and a
 * tooltip), the bucket's hour (`data-hour`) and its peak (`data-peak`). Colours follow the
 * theme: marks are drawn in currentColor, which styles.css sets per series.
 */
export function UsageChart({ buckets, size, testId }: UsageChartProps) {
  const ref = useRef<HTMLSpanElement>(null);
  const [failed, setFailed] = useState(false);
  const rows = useMemo(() => {
    const all = usageRows(buckets);
    return size === "small" ? lastHours(all, HEAD_HOURS) : all;
  }, [buckets, size]);

  useEffect(() => {
    const container = ref.current;
    if (container === null) return;
    let live = true;
    // A library that does not load, or a chart it cannot draw: said, not a blank box.
    import("@observablehq/plot")
      .then((plot) => {
        if (live)
          container.replaceChildren(
            withRoles(size === "small" ? small(plot, rows) : large(plot, rows)),
          );
      })
      .catch(() => {
        if (live) setFailed(true);
      });
    return () => {
      live = false;
    };
  }, [rows, size]);

  // Spans: the small chart is the face of a button, which holds phrasing content only.
  return (
    <span className={`usage-chart usage-chart-${size}`} data-testid={testId}>
      {failed ? (
        <span className="muted">The chart could not be drawn.</span>
      ) : (
        <span ref={ref} className="usage-chart-canvas" />
      )}
    </span>
  );
}

/**
 * `chart` with a role on each element Plot names: ARIA permits `aria-label` and
 * `aria-description` only on elements with a role (mark groups become groups, each bar an
 * image of its hour).
 */
function withRoles<T extends Element>(chart: T): T {
  chart.querySelectorAll("g[aria-label], g[aria-description]").forEach((g) => {
    g.setAttribute("role", "group");
  });
  chart.querySelectorAll(":not(g):not(svg)[aria-label]").forEach((mark) => {
    mark.setAttribute("role", "img");
  });
  return chart;
}

/** Peak claimed as bars, one per hour from `start` to `end`, each carrying its hour. */
function peakBars(plot: typeof Plot, rows: UsageRow[]) {
  return plot.rectY(rows, {
    x1: "start",
    x2: "end",
    y: "peak",
    fill: "currentColor",
    className: "usage-peak",
    insetLeft: 0.5,
    insetRight: 0.5,
    ariaLabel: "label",
    ariaDescription: "peak claimed per hour",
    title: "label",
    render(index, scales, values, dimensions, context, next) {
      const g = next?.(index, scales, values, dimensions, context) ?? null;
      // The rect mark draws one rect per index, in its order.
      g?.querySelectorAll("rect").forEach((rect, i) => {
        const row = rows[index[i]];
        rect.setAttribute("data-hour", row.hour);
        rect.setAttribute("data-peak", String(row.peak));
      });
      return g;
    },
  });
}

/** The highest value drawn, at least 1 (an idle pool's zero bars sit on the baseline). */
function top(rows: UsageRow[], withFree: boolean): number {
  return Math.max(1, ...rows.map((row) => (withFree ? Math.max(row.peak, row.free) : row.peak)));
}

function small(plot: typeof Plot, rows: UsageRow[]) {
  return plot.plot({
    ...SMALL,
    margin: 0,
    marginTop: 1,
    ariaLabel: describeUsage(rows),
    x: { type: "time", domain: usageSpan(rows, HEAD_HOURS) ?? undefined, axis: null },
    y: { domain: [0, top(rows, false)], axis: null },
    marks: [plot.ruleY([0], { className: "usage-base" }), peakBars(plot, rows)],
  });
}

function large(plot: typeof Plot, rows: UsageRow[]) {
  const yTop = top(rows, true);
  // A day at least, so that a young pool's few hours are bars of an hour's width.
  const kept = (rows[rows.length - 1].end.getTime() - rows[0].start.getTime()) / 3_600_000;
  const hours = Math.max(HEAD_HOURS, Math.round(kept));
  return plot.plot({
    ...LARGE,
    marginLeft: 44,
    marginBottom: 44,
    style: { fontSize: "11px" },
    ariaLabel: `Hourly usage: ${describeUsage(rows)}`,
    x: {
      type: "time",
      domain: usageSpan(rows, hours) ?? undefined,
      label: `Hour (${describeZone(rows[rows.length - 1].start.getTime())})`,
      labelAnchor: "center",
      labelArrow: "none",
      tickFormat: (d: Date, i) => formatTick(d.getTime(), i === 0),
    },
    y: {
      domain: [0, yTop],
      nice: true,
      // Whole members only: no more ticks than members.
      ticks: Math.min(5, yTop),
      grid: true,
      label: "Members",
      labelArrow: "none",
    },
    marks: [
      plot.ruleY([0], { className: "usage-base" }),
      peakBars(plot, rows),
      plot.lineY(freeLine(rows), {
        x: "at",
        y: "free",
        stroke: "currentColor",
        className: "usage-free",
        strokeWidth: 2,
        strokeLinecap: "round",
        curve: "step",
        ariaDescription: "lowest free per hour",
      }),
    ],
  });
}
