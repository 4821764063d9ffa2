import { describe, expect, it } from "vitest";
import type { PoolsUpdate } from "../bindings";
import { applyPoolsUpdate, feedIndicator } from "./feed";
import { member, pool } from "./fixtures";

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

  it("says a refusal is no access, not offline", () => {
    const error = { kind: "forbidden" as const, message: "no", suggestion: null, retryable: false };
    expect(feedIndicator({ ...base, status: { kind: "failing", error } }).text).toBe("no access");
  });

  it("prefers disconnected and idle over a stale status", () => {
    expect(feedIndicator({ ...base, disconnected: true, status: { kind: "live" } }).text).toBe(
      "offline",
    );
    expect(feedIndicator({ ...base, waitingForContext: true }).text).toBe("idle");
  });
});

describe("applyPoolsUpdate", () => {
  const scope = { kind: "namespace" as const, namespace: "corral-vms" };
  const update = (overrides: Partial<PoolsUpdate>): PoolsUpdate => ({
    feed: 1,
    scope,
    status: { kind: "live" },
    full: false,
    changed: [],
    removed: [],
    judgedAt: "2025-06-01T12:00:00Z",
    ...overrides,
  });
  const a = pool("a", [member("a-1")]);
  const b = pool("b", [member("b-1")]);
  const c = pool("c", [member("c-1")]);

  it("takes a full update whole and keeps the objects of pools not named later", () => {
    const first = applyPoolsUpdate(null, update({ full: true, changed: [a, c] }));
    expect(first?.snapshot.pools).toEqual([a, c]);
    const a2 = pool("a", [member("a-1", { holder: "alice" })]);
    const next = applyPoolsUpdate(first, update({ changed: [a2, b] }));
    expect(next?.snapshot.pools.map((p) => p.name)).toEqual(["a", "b", "c"]);
    expect(next?.snapshot.pools[0]).toBe(a2);
    expect(next?.snapshot.pools[2]).toBe(c);
  });

  it("drops removed pools and follows the status", () => {
    const first = applyPoolsUpdate(null, update({ full: true, changed: [a, b] }));
    const error = {
      kind: "unreachable" as const,
      message: "down",
      suggestion: null,
      retryable: true,
    };
    const next = applyPoolsUpdate(
      first,
      update({
        removed: [{ namespace: "corral-vms", name: "a" }],
        status: { kind: "failing", error },
      }),
    );
    expect(next?.snapshot.pools).toEqual([b]);
    expect(next?.snapshot.status.kind).toBe("failing");
  });

  it("ignores a partial update of another feed or before any full one", () => {
    expect(applyPoolsUpdate(null, update({ changed: [a] }))).toBeNull();
    const first = applyPoolsUpdate(null, update({ full: true, changed: [a] }));
    expect(applyPoolsUpdate(first, update({ feed: 2, changed: [b] }))).toBeNull();
    expect(applyPoolsUpdate(first, update({ feed: 2, full: true, changed: [b] }))?.feed).toBe(2);
  });
});
