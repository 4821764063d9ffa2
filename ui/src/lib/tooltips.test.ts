import { describe, expect, it } from "vitest";
import { tooltipPlace } from "./tooltips";

describe("tooltipPlace", () => {
  const viewport = { width: 900, height: 600 };
  const size = { width: 200, height: 30 };

  it("puts the tooltip below its element, at its left edge", () => {
    expect(tooltipPlace({ left: 100, top: 50, bottom: 70 }, size, viewport)).toEqual({
      left: 100,
      top: 76,
    });
  });

  it("goes above when there is no room below", () => {
    expect(tooltipPlace({ left: 100, top: 560, bottom: 580 }, size, viewport)).toEqual({
      left: 100,
      top: 524,
    });
  });

  it("stays inside the window at its right edge", () => {
    expect(tooltipPlace({ left: 850, top: 50, bottom: 70 }, size, viewport).left).toBe(696);
  });
});
