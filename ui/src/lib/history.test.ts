import { describe, expect, it } from "vitest";
import type { AuditEntry } from "../bindings";
import { historyRows } from "./history";

function entry(overrides: Partial<AuditEntry>): AuditEntry {
  return {
    time: "2026-12-04T10:00:00Z",
    namespace: "corral-vms",
    reason: "Claimed",
    action: null,
    warning: false,
    user: "alice",
    by: null,
    who: "alice",
    member: "devpool-1",
    pool: "devpool",
    why: null,
    message: "granted to alice",
    count: 1,
    reporter: "corral-vdi-broker",
    ...overrides,
  };
}

describe("historyRows", () => {
  it("lists the newest first, naming who and why", () => {
    const rows = historyRows([
      entry({}),
      entry({
        time: "2026-12-04T11:00:00Z",
        reason: "Reclaimed",
        why: "maxSession",
        message: "reclaimed: maxSession 1h passed",
      }),
      entry({
        time: "2026-12-04T12:00:00Z",
        reason: "ForceReleased",
        by: "admin",
        who: "alice (by admin)",
        warning: true,
      }),
    ]);
    expect(rows.map((r) => r.reason)).toEqual(["ForceReleased", "Reclaimed", "Claimed"]);
    expect(rows[0].who).toBe("alice (by admin)");
    expect(rows[1].why).toBe("maxSession");
    expect(rows[2].why).toBe("granted to alice");
  });

  it("names the member an act was on, and none for the pool's own (a resize)", () => {
    const rows = historyRows([entry({}), entry({ reason: "Resized", member: null, user: null })]);
    expect(rows.map((r) => r.member)).toEqual([null, "devpool-1"]);
  });
});
