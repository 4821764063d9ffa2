import { describe, expect, it } from "vitest";
import type { Kept } from "../bindings";
import { member } from "./fixtures";
import { describeWhy, explainWhy, formatKept, keepBlocker } from "./reclaim";

describe("reclaim words", () => {
  it("says each reason", () => {
    expect(describeWhy("disconnected")).toBe("no session open");
    expect(describeWhy("maxSession")).toBe("maximum session");
    expect(describeWhy("idle")).toBe("no one logged in");
    expect(explainWhy("maxSession")).toContain("cannot extend");
  });

  it("blocks Keep only when the backend says it cannot postpone the reclaim", () => {
    expect(keepBlocker(member("d-1", { keepable: true, reclaimWhy: "idle" }))).toBeNull();
    expect(keepBlocker(member("d-1", { keepable: false, reclaimWhy: "maxSession" }))).toContain(
      "maximum session",
    );
  });

  it("describes a Keep with its next reclaim", () => {
    const kept: Kept = {
      renewed: {
        namespace: "corral-vms",
        member: "d-1",
        holder: "alice",
        renewedAt: "2026-12-04T10:00:00Z",
        expiresAt: "2026-12-04T11:00:00Z",
        durationSeconds: 3600,
      },
      keptAt: "2026-12-04T10:00:00Z",
      nextReclaim: {
        at: "2026-12-04T11:00:00Z",
        noticeAt: "2026-12-04T10:55:00Z",
        why: "disconnected",
        keepable: true,
      },
    };
    expect(formatKept(kept)).toMatch(/^kept d-1; next reclaim .* \(no session open\)$/);
    expect(formatKept({ ...kept, nextReclaim: null })).toBe("kept d-1");
  });
});
