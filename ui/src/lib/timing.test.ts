import { describe, expect, it } from "vitest";
import { markOnce } from "./timing";

describe("markOnce", () => {
  it("records a milestone the first time only", () => {
    performance.clearMarks();
    markOnce("cluster-requested");
    const first = performance.getEntriesByName("corral:cluster-requested");
    markOnce("cluster-requested");
    const after = performance.getEntriesByName("corral:cluster-requested");
    expect(first).toHaveLength(1);
    expect(after).toHaveLength(1);
    expect(after[0].startTime).toBe(first[0].startTime);
    expect(performance.getEntriesByName("corral:cluster-connected")).toHaveLength(0);
  });
});
