import { describe, expect, it } from "vitest";
import { heldChoice, stepsClosedSelect } from "./selectSteps";

const press = (
  key: string,
  mods: Partial<{ alt: boolean; ctrl: boolean; meta: boolean }> = {},
) => ({
  key,
  altKey: mods.alt ?? false,
  ctrlKey: mods.ctrl ?? false,
  metaKey: mods.meta ?? false,
});

describe("stepsClosedSelect", () => {
  it("counts arrows, Home, End, the page keys and type-ahead as steps", () => {
    for (const key of ["ArrowDown", "ArrowUp", "Home", "End", "PageUp", "PageDown", "b"]) {
      expect(stepsClosedSelect(press(key)), key).toBe(true);
    }
  });

  it("does not count Enter, Escape, Tab, Space or a key with a modifier", () => {
    for (const key of ["Enter", "Escape", "Tab", " "]) {
      expect(stepsClosedSelect(press(key)), key).toBe(false);
    }
    expect(stepsClosedSelect(press("ArrowDown", { alt: true }))).toBe(false);
    expect(stepsClosedSelect(press("c", { ctrl: true }))).toBe(false);
    expect(stepsClosedSelect(press("v", { meta: true }))).toBe(false);
  });
});

describe("heldChoice", () => {
  const choices = ["admin", "alice", "bob"];

  it("holds the step while the choice shown and the list are as they were", () => {
    expect(heldChoice({ from: "admin", value: "bob" }, "admin", choices)).toBe("bob");
    expect(heldChoice(null, "admin", choices)).toBeNull();
  });

  it("lapses when the choice shown changed or the list no longer offers it", () => {
    expect(heldChoice({ from: "admin", value: "bob" }, "alice", choices)).toBeNull();
    expect(heldChoice({ from: "admin", value: "bob" }, "admin", ["admin", "alice"])).toBeNull();
  });
});
