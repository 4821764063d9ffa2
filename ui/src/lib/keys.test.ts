import { describe, expect, it } from "vitest";
import {
  KEY_COMBOS,
  XK,
  charKeysym,
  comboEvents,
  findCombo,
  functionKey,
  strokeEvents,
  typingPlan,
} from "./keys";

describe("charKeysym", () => {
  it("uses the character itself for Latin-1", () => {
    expect(charKeysym("a")).toBe(0x61);
    expect(charKeysym("Z")).toBe(0x5a);
    expect(charKeysym(" ")).toBe(0x20);
    expect(charKeysym("~")).toBe(0x7e);
    expect(charKeysym("é")).toBe(0xe9);
    expect(charKeysym("ÿ")).toBe(0xff);
  });

  it("uses 0x01000000 + the code point beyond Latin-1", () => {
    expect(charKeysym("€")).toBe(0x010020ac);
    expect(charKeysym("ž")).toBe(0x0100017e);
    expect(charKeysym("😀")).toBe(0x0101f600);
  });

  it("has no keysym for control characters", () => {
    expect(charKeysym("\u0007")).toBeNull();
    expect(charKeysym("\u007f")).toBeNull();
    expect(charKeysym("\u0085")).toBeNull();
    expect(charKeysym("")).toBeNull();
  });
});

describe("typingPlan", () => {
  it("types lower case letters and digits with their US keys", () => {
    expect(typingPlan("a1").strokes).toEqual([
      { keysym: 0x61, code: "KeyA", shift: false },
      { keysym: 0x31, code: "Digit1", shift: false },
    ]);
  });

  it("holds Shift for capitals and shifted symbols", () => {
    expect(typingPlan("P!@?").strokes).toEqual([
      { keysym: 0x50, code: "KeyP", shift: true },
      { keysym: 0x21, code: "Digit1", shift: true },
      { keysym: 0x40, code: "Digit2", shift: true },
      { keysym: 0x3f, code: "Slash", shift: true },
    ]);
    expect(typingPlan(")").strokes).toEqual([{ keysym: 0x29, code: "Digit0", shift: true }]);
    expect(typingPlan('"').strokes).toEqual([{ keysym: 0x22, code: "Quote", shift: true }]);
  });

  it("types every printable ASCII character with a key", () => {
    let ascii = "";
    for (let c = 0x20; c < 0x7f; c += 1) ascii += String.fromCharCode(c);
    const plan = typingPlan(ascii);
    expect(plan.skipped).toBe(0);
    expect(plan.strokes).toHaveLength(95);
    expect(plan.strokes.every((s) => s.code !== null)).toBe(true);
    expect(plan.strokes.map((s) => s.keysym)).toEqual(Array.from(ascii, (c) => c.charCodeAt(0)));
  });

  it("presses Return for each line break and Tab for tabs", () => {
    const enter = { keysym: XK.Return, code: "Enter", shift: false };
    const a = { keysym: 0x61, code: "KeyA", shift: false };
    expect(typingPlan("a\r\na\na\ra").strokes).toEqual([a, enter, a, enter, a, enter, a]);
    expect(typingPlan("\t").strokes).toEqual([{ keysym: XK.Tab, code: "Tab", shift: false }]);
  });

  it("sends other characters as their keysym alone", () => {
    expect(typingPlan("é€😀").strokes).toEqual([
      { keysym: 0xe9, code: null, shift: false },
      { keysym: 0x010020ac, code: null, shift: false },
      { keysym: 0x0101f600, code: null, shift: false },
    ]);
  });

  it("skips and counts control characters", () => {
    const plan = typingPlan("a\u0000b\u001b");
    expect(plan.strokes.map((s) => s.keysym)).toEqual([0x61, 0x62]);
    expect(plan.skipped).toBe(2);
  });

  it("types nothing for no text", () => {
    expect(typingPlan("")).toEqual({ strokes: [], skipped: 0 });
  });
});

describe("strokeEvents", () => {
  it("presses and releases a key", () => {
    expect(strokeEvents({ keysym: 0x61, code: "KeyA", shift: false })).toEqual([
      { keysym: 0x61, code: "KeyA", down: true },
      { keysym: 0x61, code: "KeyA", down: false },
    ]);
  });

  it("holds Shift around a shifted key", () => {
    expect(strokeEvents({ keysym: 0x41, code: "KeyA", shift: true })).toEqual([
      { keysym: XK.Shift_L, code: "ShiftLeft", down: true },
      { keysym: 0x41, code: "KeyA", down: true },
      { keysym: 0x41, code: "KeyA", down: false },
      { keysym: XK.Shift_L, code: "ShiftLeft", down: false },
    ]);
  });
});

describe("key combinations", () => {
  it("numbers the function keys from F1", () => {
    expect(functionKey(1)).toBe(0xffbe);
    expect(functionKey(7)).toBe(0xffc4);
    expect(functionKey(12)).toBe(0xffc9);
  });

  it("offers Ctrl+Alt+F1 to F7, Alt+Tab and Super", () => {
    const labels = KEY_COMBOS.map((c) => c.label);
    for (let n = 1; n <= 7; n += 1) expect(labels).toContain(`Ctrl+Alt+F${n}`);
    expect(labels).toContain("Alt+Tab");
    expect(labels.some((l) => l.startsWith("Super"))).toBe(true);
    expect(new Set(KEY_COMBOS.map((c) => c.id)).size).toBe(KEY_COMBOS.length);
  });

  it("presses in order and releases in reverse", () => {
    const combo = findCombo("ctrl-alt-f2");
    expect(combo).not.toBeNull();
    if (combo === null) return;
    expect(comboEvents(combo)).toEqual([
      { keysym: XK.Control_L, code: "ControlLeft", down: true },
      { keysym: XK.Alt_L, code: "AltLeft", down: true },
      { keysym: 0xffbf, code: "F2", down: true },
      { keysym: 0xffbf, code: "F2", down: false },
      { keysym: XK.Alt_L, code: "AltLeft", down: false },
      { keysym: XK.Control_L, code: "ControlLeft", down: false },
    ]);
  });

  it("finds nothing for an unknown id", () => {
    expect(findCombo("ctrl-alt-f12")).toBeNull();
  });
});
