import { describe, expect, it } from "vitest";
import {
  estimateClockOffset,
  formatCoarseDuration,
  formatCountdown,
  formatDateTimeWithZone,
  formatDuration,
  formatElapsed,
  formatAgo,
  formatUtcOffset,
  parseIso,
} from "./time";

const S = 1000;
const M = 60 * S;
const H = 60 * M;
const D = 24 * H;

describe("formatDuration", () => {
  it("shows seconds alone under a minute", () => {
    expect(formatDuration(0)).toBe("0s");
    expect(formatDuration(9 * S)).toBe("9s");
    expect(formatDuration(59 * S + 999)).toBe("59s");
  });

  it("shows minutes and seconds under an hour", () => {
    expect(formatDuration(42 * M + 10 * S)).toBe("42m 10s");
    expect(formatDuration(M)).toBe("1m 0s");
  });

  it("shows hours and minutes, dropping a zero minute", () => {
    expect(formatDuration(3 * H + 5 * M + 59 * S)).toBe("3h 5m");
    expect(formatDuration(2 * H)).toBe("2h");
  });

  it("shows days and hours", () => {
    expect(formatDuration(2 * D + 4 * H + 30 * M)).toBe("2d 4h");
    expect(formatDuration(D)).toBe("1d");
  });

  it("ignores the sign", () => {
    expect(formatDuration(-(42 * M + 10 * S))).toBe("42m 10s");
  });
});

describe("formatCoarseDuration", () => {
  it("uses the largest whole unit", () => {
    expect(formatCoarseDuration(12 * S)).toBe("12s");
    expect(formatCoarseDuration(3 * M + 59 * S)).toBe("3m");
    expect(formatCoarseDuration(5 * H + 59 * M)).toBe("5h");
    expect(formatCoarseDuration(2 * D + 23 * H)).toBe("2d");
  });
});

describe("formatCountdown", () => {
  const now = Date.parse("2025-06-01T12:00:00Z");

  it("counts down to a future time", () => {
    expect(formatCountdown(now + 42 * M + 10 * S, now)).toEqual({
      text: "in 42m 10s",
      past: false,
    });
  });

  it("rounds a partial second up so it never says 'in 0s'", () => {
    expect(formatCountdown(now + 1, now).text).toBe("in 1s");
    expect(formatCountdown(now + 9 * S + 200, now).text).toBe("in 10s");
  });

  it("says how long ago a past time was", () => {
    expect(formatCountdown(now - 3 * M - 20 * S, now)).toEqual({
      text: "expired 3m ago",
      past: true,
    });
    expect(formatCountdown(now - 15 * S, now).text).toBe("expired 15s ago");
    expect(formatCountdown(now - 26 * H, now).text).toBe("expired 1d ago");
  });

  it("treats the exact moment as just expired", () => {
    expect(formatCountdown(now, now)).toEqual({ text: "expired just now", past: true });
    expect(formatCountdown(now - 999, now).text).toBe("expired just now");
  });
});

describe("parseIso", () => {
  it("parses RFC 3339 times", () => {
    expect(parseIso("2025-06-01T12:00:00Z")).toBe(Date.UTC(2025, 5, 1, 12));
    expect(parseIso("2025-06-01T12:00:00.250+02:00")).toBe(Date.UTC(2025, 5, 1, 10, 0, 0, 250));
  });

  it("returns null for missing or bad input", () => {
    expect(parseIso(null)).toBeNull();
    expect(parseIso(undefined)).toBeNull();
    expect(parseIso("")).toBeNull();
    expect(parseIso("yesterday-ish")).toBeNull();
  });
});

describe("formatAgo", () => {
  const now = Date.parse("2026-12-01T12:00:00Z");
  it("says how long ago in one unit", () => {
    expect(formatAgo(now - 2_000, now)).toBe("just now");
    expect(formatAgo(now - 42_000, now)).toBe("42s ago");
    expect(formatAgo(now - 3 * 60_000 - 5_000, now)).toBe("3m ago");
    expect(formatAgo(now - 5 * 3_600_000, now)).toBe("5h ago");
    expect(formatAgo(now - 2 * 86_400_000, now)).toBe("2d ago");
  });
  it("says a time ahead of the clock is ahead", () => {
    expect(formatAgo(now + 3 * 60_000, now)).toBe("in 3m");
  });
});

describe("estimateClockOffset", () => {
  it("is positive when the server is ahead", () => {
    const local = Date.parse("2025-06-01T12:00:00Z");
    expect(estimateClockOffset("2025-06-01T12:00:05Z", local)).toBe(5 * S);
    expect(estimateClockOffset("2025-06-01T11:59:58Z", local)).toBe(-2 * S);
  });

  it("is zero when unknown", () => {
    expect(estimateClockOffset(null, 123)).toBe(0);
    expect(estimateClockOffset("garbage", 123)).toBe(0);
  });
});

describe("formatElapsed", () => {
  it("shows tenths of a second below ten seconds, rounding down", () => {
    expect(formatElapsed(0)).toBe("0.0s");
    expect(formatElapsed(4_270)).toBe("4.2s");
    expect(formatElapsed(9_999)).toBe("9.9s");
  });

  it("shows whole units from ten seconds on", () => {
    expect(formatElapsed(10 * S)).toBe("10s");
    expect(formatElapsed(M + 5 * S + 300)).toBe("1m 5s");
  });

  it("treats negative input as its absolute value", () => {
    expect(formatElapsed(-1_500)).toBe("1.5s");
  });
});

describe("formatUtcOffset", () => {
  it("gives the offset in hours and minutes", () => {
    expect(formatUtcOffset(0)).toBe("UTC");
    expect(formatUtcOffset(60)).toBe("UTC+01:00");
    expect(formatUtcOffset(-330)).toBe("UTC-05:30");
    expect(formatUtcOffset(345)).toBe("UTC+05:45");
  });
});

describe("formatDateTimeWithZone", () => {
  it("gives the wall-clock time at the offset, with the offset", () => {
    expect(formatDateTimeWithZone("2026-12-01T09:30:05Z", 0)).toBe("2026-12-01 09:30:05 UTC");
    expect(formatDateTimeWithZone("2026-12-01T09:30:05Z", 60)).toBe(
      "2026-12-01 10:30:05 UTC+01:00",
    );
    expect(formatDateTimeWithZone("2026-12-01T02:00:00Z", -300)).toBe(
      "2026-11-30 21:00:00 UTC-05:00",
    );
  });

  it("rounds to the nearest second, as the CLI does", () => {
    expect(formatDateTimeWithZone("2026-12-03T00:26:15.917Z", 0)).toBe("2026-12-03 00:26:16 UTC");
    expect(formatDateTimeWithZone("2026-12-03T00:26:15.499Z", 0)).toBe("2026-12-03 00:26:15 UTC");
    expect(formatDateTimeWithZone("2026-12-31T23:59:59.600Z", 0)).toBe("2027-01-01 00:00:00 UTC");
  });

  it("uses the local zone by default", () => {
    const iso = "2026-07-01T12:00:00Z";
    const text = formatDateTimeWithZone(iso);
    const d = new Date(iso);
    const pad = (n: number) => String(n).padStart(2, "0");
    const local =
      `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    expect(text?.startsWith(`${local} UTC`)).toBe(true);
  });

  it("is null for a missing or invalid time", () => {
    expect(formatDateTimeWithZone(null)).toBeNull();
    expect(formatDateTimeWithZone("soon", 0)).toBeNull();
  });
});
