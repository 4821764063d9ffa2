import { describe, expect, it } from "vitest";
import { usage } from "./fixtures";
import {
  describeReclaims,
  describeUsage,
  formatHour,
  formatTick,
  freeLine,
  HEAD_HOURS,
  lastHours,
  peakRow,
  usageRows,
  usageSpan,
} from "./usage";

const UTC = 0;
const CET = 60;

describe("usageRows", () => {
  it("keeps each bucket's hour exactly and labels it in the given zone", () => {
    const [row] = usageRows([{ hour: "2026-12-07T08:00:00Z", peakClaimed: 3, lowestFree: 0 }], CET);
    expect(row.hour).toBe("2026-12-07T08:00:00Z");
    expect(row.start.toISOString()).toBe("2026-12-07T08:00:00.000Z");
    expect(row.end.toISOString()).toBe("2026-12-07T09:00:00.000Z");
    expect(row.label).toBe("09:00 7 Dec: peak 3 claimed, lowest 0 free");
  });

  it("reads missing counts as zero, lists reclaims in the broker's order and drops bad hours", () => {
    const rows = usageRows(
      [
        { hour: "not a time", peakClaimed: 1 },
        { hour: "2026-12-07T09:00:00Z", reclaims: { unfit: 1, idle: 2, zzz: 1, maxSession: 0 } },
      ],
      UTC,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].peak).toBe(0);
    expect(rows[0].free).toBe(0);
    expect(rows[0].reclaims).toEqual([
      ["idle", 2],
      ["unfit", 1],
      ["zzz", 1],
    ]);
    expect(rows[0].label).toBe("09:00 7 Dec: peak 0 claimed, lowest 0 free");
  });
});

describe("lastHours and usageSpan", () => {
  it("keeps the day up to the newest hour of a week", () => {
    const rows = usageRows(usage("2026-12-07T09:00:00Z", 168), UTC);
    const day = lastHours(rows, HEAD_HOURS);
    expect(day).toHaveLength(24);
    expect(day[0].hour).toBe("2026-12-06T10:00:00Z");
    expect(day[23].hour).toBe("2026-12-07T09:00:00Z");
    expect(usageSpan(rows, HEAD_HOURS)?.map((d) => d.toISOString())).toEqual([
      "2026-12-06T10:00:00.000Z",
      "2026-12-07T10:00:00.000Z",
    ]);
    expect(usageSpan(rows)?.[0].toISOString()).toBe("2026-11-30T10:00:00.000Z");
  });

  it("keeps fewer hours when fewer were recorded, and none of none", () => {
    const rows = usageRows(usage("2026-12-07T09:00:00Z", 3), UTC);
    expect(lastHours(rows, HEAD_HOURS)).toHaveLength(3);
    expect(lastHours([], HEAD_HOURS)).toEqual([]);
    expect(usageSpan([])).toBeNull();
  });
});

describe("peakRow", () => {
  it("finds the hour with the most claimed, the latest of equals", () => {
    const rows = usageRows(usage("2026-12-07T09:00:00Z", 5, [1, 3, 2, 3, 0]), UTC);
    expect(peakRow(rows)?.hour).toBe("2026-12-07T08:00:00Z");
    expect(peakRow([])).toBeNull();
  });
});

describe("freeLine", () => {
  it("puts each hour at its middle and breaks the line where hours are missing", () => {
    const rows = usageRows(
      [
        { hour: "2026-12-07T07:00:00Z", peakClaimed: 1, lowestFree: 3 },
        { hour: "2026-12-07T08:00:00Z", peakClaimed: 2, lowestFree: 2 },
        { hour: "2026-12-07T11:00:00Z", peakClaimed: 0, lowestFree: 4 },
      ],
      UTC,
    );
    expect(freeLine(rows).map((p) => [p.at.toISOString(), p.free])).toEqual([
      ["2026-12-07T07:30:00.000Z", 3],
      ["2026-12-07T08:30:00.000Z", 2],
      ["2026-12-07T11:00:00.000Z", null],
      ["2026-12-07T11:30:00.000Z", 4],
    ]);
  });
});

describe("words", () => {
  it("formats hours and ticks in the given zone: the day at midnight and under the first", () => {
    const at = (iso: string) => Date.parse(iso);
    expect(formatHour(at("2026-12-07T08:00:00Z"), CET)).toBe("09:00 7 Dec");
    expect(formatHour(at("2026-12-31T23:00:00Z"), CET)).toBe("00:00 1 Jan");
    expect(formatTick(at("2026-12-07T08:00:00Z"), true, CET)).toBe("09:00\n7 Dec");
    expect(formatTick(at("2026-12-07T11:00:00Z"), false, CET)).toBe("12:00");
    expect(formatTick(at("2026-12-07T23:00:00Z"), false, CET)).toBe("8 Dec");
    expect(formatTick(at("2026-12-07T23:00:00Z"), true, CET)).toBe("8 Dec");
  });

  it("describes reclaims", () => {
    expect(describeReclaims([])).toBe("none");
    expect(
      describeReclaims([
        ["idle", 2],
        ["maxSession", 1],
      ]),
    ).toBe("2 idle, 1 maxSession");
  });

  it("sums up the hours: the peak, the lowest free and the reclaims", () => {
    const rows = usageRows(
      [
        { hour: "2026-12-07T08:00:00Z", peakClaimed: 3, lowestFree: 0, reclaims: { idle: 1 } },
        {
          hour: "2026-12-07T09:00:00Z",
          peakClaimed: 1,
          lowestFree: 2,
          reclaims: { maxSession: 1, idle: 1 },
        },
      ],
      UTC,
    );
    expect(describeUsage(rows, CET)).toBe(
      "Peak 3 claimed at 09:00 7 Dec; lowest free 0; 3 reclaimed (1 maxSession, 2 idle)",
    );
    expect(describeUsage(usageRows(usage("2026-12-07T09:00:00Z", 2)))).toBe(
      "Nothing claimed; lowest free 4",
    );
    expect(describeUsage([])).toBe("No usage recorded");
  });
});
