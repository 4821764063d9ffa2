import { describe, expect, it } from "vitest";
import type { PoolsUpdate } from "../bindings";
import type { ClusterStreams as Streams } from "../api";
import { heldStreams } from "./heldStreams";
import { member, pool } from "./fixtures";

function update(feed: number, full: boolean): PoolsUpdate {
  return {
    feed,
    scope: { kind: "namespace", namespace: "corral-vms" },
    status: { kind: "live" },
    full,
    changed: [pool("legacy", [member("legacy-1")])],
    removed: [],
    judgedAt: "2026-12-02T09:00:00Z",
  };
}

/** Streams that record what reaches them, in order. */
function recorder(): { streams: Streams; seen: string[] } {
  const seen: string[] = [];
  return {
    seen,
    streams: {
      pools: (u) => seen.push(`pools ${String(u.feed)} ${u.full ? "full" : "changes"}`),
      credentials: (c) => seen.push(`credentials ${c.kind}`),
    },
  };
}

describe("heldStreams", () => {
  it("holds what arrives before attach and hands it over in the order received", () => {
    const held = heldStreams();
    held.streams.pools(update(1, true));
    held.streams.credentials({ kind: "lasting" });
    held.streams.pools(update(1, false));
    const target = recorder();
    expect(target.seen).toEqual([]);
    held.attach(target.streams);
    expect(target.seen).toEqual(["pools 1 full", "credentials lasting", "pools 1 changes"]);
  });

  it("delivers straight away once attached, and nothing twice", () => {
    const held = heldStreams();
    held.streams.pools(update(2, true));
    const target = recorder();
    held.attach(target.streams);
    held.streams.credentials({ kind: "lasting" });
    held.streams.pools(update(2, false));
    expect(target.seen).toEqual(["pools 2 full", "credentials lasting", "pools 2 changes"]);
  });
});
