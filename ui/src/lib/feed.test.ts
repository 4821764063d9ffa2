import { describe, expect, it } from "vitest";
import { feedIndicator } from "./feed";

const base = { disconnected: false, waitingForContext: false, status: null, judgedAt: null };

describe("feedIndicator", () => {
  it("says syncing before any snapshot", () => {
    expect(feedIndicator(base).text).toBe("syncing…");
    expect(feedIndicator({ ...base, status: { kind: "syncing" } }).tone).toBe("syncing");
  });

  it("says live when live", () => {
    const f = feedIndicator({
      ...base,
      status: { kind: "live" },
      judgedAt: "2025-06-01T12:00:00Z",
    });
    expect(f.text).toBe("live");
    expect(f.tone).toBe("live");
  });

  it("distinguishes retrying from giving up", () => {
    const error = { kind: "unreachable" as const, message: "down", suggestion: null };
    expect(
      feedIndicator({ ...base, status: { kind: "failing", error: { ...error, retryable: true } } })
        .text,
    ).toBe("reconnecting…");
    expect(
      feedIndicator({ ...base, status: { kind: "failing", error: { ...error, retryable: false } } })
        .text,
    ).toBe("offline");
  });

  it("prefers disconnected and idle over a stale status", () => {
    expect(feedIndicator({ ...base, disconnected: true, status: { kind: "live" } }).text).toBe(
      "offline",
    );
    expect(feedIndicator({ ...base, waitingForContext: true }).text).toBe("idle");
  });
});
