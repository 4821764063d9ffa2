import { describe, expect, it } from "vitest";
import { adminPermissions, userPermissions } from "./fixtures";
import {
  describePolicy,
  describeGrowth,
  describeShrink,
  formOf,
  formatStateCounts,
  listNames,
  manageAllowed,
  sameSettings,
  settingsOf,
} from "./policy";
import type { PoolSettings, StateCounts } from "../bindings";

const settings: PoolSettings = {
  size: 4,
  warm: 1,
  disconnectGrace: "15m",
  maxSession: null,
  idleTimeout: "30m",
  onRelease: "keep",
  assignment: "floating",
};

describe("settings form", () => {
  it("reads back the settings it shows", () => {
    const read = settingsOf(formOf(settings));
    expect(read).toEqual({ ok: true, settings });
  });

  it("takes an emptied duration as the default and trims the rest", () => {
    const read = settingsOf({ ...formOf(settings), disconnectGrace: "  ", maxSession: " 8h " });
    expect(read.ok && read.settings.disconnectGrace).toBeNull();
    expect(read.ok && read.settings.maxSession).toBe("8h");
  });

  it("judges only the shape of the numbers, naming the field", () => {
    expect(settingsOf({ ...formOf(settings), size: "four" })).toEqual({
      ok: false,
      problem: { field: "size", message: "The size must be a whole number." },
    });
    const warm = settingsOf({ ...formOf(settings), warm: "" });
    expect(!warm.ok && warm.problem.field).toBe("warm");
    // Out of range is the backend's to say.
    expect(settingsOf({ ...formOf(settings), warm: "9" }).ok).toBe(true);
  });

  it("compares settings", () => {
    expect(sameSettings(settings, { ...settings })).toBe(true);
    expect(sameSettings(settings, { ...settings, onRelease: "reset" })).toBe(false);
  });
});

describe("shrink words", () => {
  it("lists names", () => {
    expect(listNames([])).toBe("");
    expect(listNames(["a-4"])).toBe("a-4");
    expect(listNames(["a-4", "a-3", "a-2"])).toBe("a-4, a-3 and a-2");
  });

  it("names what goes now, what goes once released, and nothing else", () => {
    const text = describeShrink("lab", 2, ["lab-4", "lab-3"], []);
    expect(text).toContain("removes 2 members lab-4 and lab-3 now");
    expect(text).toContain("Every other member stays.");
    const later = describeShrink("lab", 2, ["lab-4"], ["lab-3"]);
    expect(later).toContain("removes member lab-4 now");
    expect(later).toContain("removes claimed member lab-3 once released; until then it stays");
    const none = describeShrink("lab", 1, [], ["lab-3", "lab-2"]);
    expect(none).toContain("removes no member now");
    expect(none).toContain("claimed 2 members lab-3 and lab-2 once released");
  });
});

describe("pool head", () => {
  const counts: StateCounts = {
    free: 3,
    warm: 2,
    claimed: 1,
    granting: 0,
    releasing: 1,
    removing: 1,
    problems: 0,
    creating: 2,
  };

  it("counts per state, warm inside free, leaving out empty ones", () => {
    expect(formatStateCounts(counts, 5)).toBe(
      "3 free (2 warm) · 1 claimed · 1 releasing · 1 removing · 2 creating · 5 members",
    );
    expect(
      formatStateCounts(
        {
          free: 0,
          warm: 0,
          claimed: 1,
          granting: 0,
          releasing: 0,
          removing: 0,
          problems: 1,
          creating: 0,
        },
        1,
      ),
    ).toBe("0 free · 1 claimed · 1 problem · 1 member");
  });

  it("summarises a policy", () => {
    const text = describePolicy({
      golden: "golden-desktop",
      size: 4,
      warm: 1,
      disconnectGrace: "15m",
      maxSession: null,
      idleTimeout: "30m",
      onRelease: "reset",
      assignment: "floating",
    });
    expect(text).toContain("max session no limit");
    expect(text).toContain("on release: reset");
  });
});

describe("manageAllowed", () => {
  it("lets administrators, and everyone until the answer arrives", () => {
    expect(manageAllowed(null).allowed).toBe(true);
    expect(manageAllowed(adminPermissions()).allowed).toBe(true);
    const user = manageAllowed(userPermissions());
    expect(user.allowed).toBe(false);
    expect(user.reason).toContain("administrators");
  });
});

describe("describeGrowth", () => {
  it("names the members a larger size adds and what they are cloned from", () => {
    expect(describeGrowth(["lab-4"], "golden-desktop")).toBe(
      "Saving adds member lab-4, cloned from golden-desktop.",
    );
    expect(describeGrowth(["lab-4", "lab-5"], "golden-desktop")).toBe(
      "Saving adds 2 members lab-4 and lab-5, cloned from golden-desktop.",
    );
  });
});
