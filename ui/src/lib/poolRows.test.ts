import { describe, expect, it } from "vitest";
import { member, pool } from "./fixtures";
import {
  POOL_GAP,
  ROW_HEIGHT,
  layoutPools,
  memberOffsets,
  memberRowHeight,
  poolWindows,
} from "./poolRows";

const legacy = member("legacy-2", {
  state: "assignedLegacy",
  stateLabel: "assigned (legacy, label-only)",
});

describe("memberRowHeight", () => {
  it("gives a long state two lines", () => {
    expect(memberRowHeight(member("a-1"))).toBe(ROW_HEIGHT.member);
    expect(memberRowHeight(member("a-1", { stateLabel: "claiming / stuck" }))).toBe(
      ROW_HEIGHT.member,
    );
    expect(memberRowHeight(legacy)).toBe(ROW_HEIGHT.tallMember);
    expect(memberRowHeight(member("a-2", { stateNote: "removed when released" }))).toBe(
      ROW_HEIGHT.tallMember,
    );
    expect(
      memberRowHeight(member("a-1", { stateLabel: "conflict (label and Lease disagree)" })),
    ).toBe(ROW_HEIGHT.tallMember);
  });
});

describe("layoutPools", () => {
  const a = pool("a", [member("a-1"), legacy, member("a-3")]);
  const b = pool("b", []);
  const c = pool("c", [member("c-1")]);

  it("lays out headers, column headers and members, with borders and gaps", () => {
    const layout = layoutPools([a, b, c], () => false);
    expect(layout.rows).toEqual([
      { kind: "head", pool: 0 },
      { kind: "columns", pool: 0 },
      { kind: "member", pool: 0, member: 0 },
      { kind: "member", pool: 0, member: 1 },
      { kind: "member", pool: 0, member: 2 },
      { kind: "head", pool: 1 },
      { kind: "columns", pool: 1 },
      { kind: "empty", pool: 1 },
      { kind: "head", pool: 2 },
      { kind: "columns", pool: 2 },
      { kind: "member", pool: 2, member: 0 },
    ]);
    const boxA =
      1 + ROW_HEIGHT.head + ROW_HEIGHT.columns + 2 * ROW_HEIGHT.member + ROW_HEIGHT.tallMember + 1;
    const boxB = 1 + ROW_HEIGHT.head + ROW_HEIGHT.columns + ROW_HEIGHT.empty + 1;
    const boxC = 1 + ROW_HEIGHT.head + ROW_HEIGHT.columns + ROW_HEIGHT.member + 1;
    expect(layout.poolHeight).toEqual([boxA, boxB, boxC]);
    expect(layout.poolTop).toEqual([0, boxA + POOL_GAP, boxA + POOL_GAP + boxB + POOL_GAP]);
    // No gap after the last pool; the sizes add up to the whole.
    expect(layout.total).toBe(boxA + boxB + boxC + 2 * POOL_GAP);
    expect(layout.sizes.reduce((sum, size) => sum + size, 0)).toBe(layout.total);
  });

  it("shows only the header of a collapsed pool", () => {
    const layout = layoutPools([a, c], (p) => p.name === "a");
    expect(layout.rows.slice(0, 2)).toEqual([
      { kind: "head", pool: 0 },
      { kind: "head", pool: 1 },
    ]);
    expect(layout.poolHeight[0]).toBe(1 + ROW_HEIGHT.head + 1);
    expect(layout.sizes[0]).toBe(1 + ROW_HEIGHT.head + 1 + POOL_GAP);
  });

  it("lays out nothing for no pools", () => {
    expect(layoutPools([], () => false)).toEqual({
      rows: [],
      sizes: [],
      poolTop: [],
      poolHeight: [],
      total: 0,
    });
  });
});

describe("memberOffsets", () => {
  it("stacks the rows and says how tall the body is", () => {
    expect(memberOffsets([member("a-1"), legacy, member("a-3")])).toEqual({
      tops: [0, ROW_HEIGHT.member, ROW_HEIGHT.member + ROW_HEIGHT.tallMember],
      height: 2 * ROW_HEIGHT.member + ROW_HEIGHT.tallMember,
    });
    expect(memberOffsets([])).toEqual({ tops: [], height: ROW_HEIGHT.empty });
  });
});

describe("poolWindows", () => {
  const layout = layoutPools(
    [pool("a", [member("a-1"), member("a-2"), member("a-3")]), pool("b", [member("b-1")])],
    () => false,
  );

  it("groups the rows on screen by pool, with the members among them", () => {
    // a-2, a-3, then b's header, column header and b-1.
    expect(poolWindows(layout, [3, 4, 5, 6, 7])).toEqual([
      { pool: 0, from: 1, to: 3 },
      { pool: 1, from: 0, to: 1 },
    ]);
  });

  it("gives a pool whose members are all off screen an empty range", () => {
    expect(poolWindows(layout, [0, 1])).toEqual([{ pool: 0, from: 0, to: 0 }]);
    expect(poolWindows(layout, [])).toEqual([]);
  });
});
