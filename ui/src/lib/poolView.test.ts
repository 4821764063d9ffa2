import { describe, expect, it } from "vitest";
import {
  REMEMBERED_COLLAPSED,
  storeCollapsed,
  storeOrder,
  storedCollapsed,
  storedOrder,
  toggled,
} from "./poolView";

function memoryStorage(initial: Record<string, string> = {}) {
  const items = new Map(Object.entries(initial));
  return {
    items,
    getItem: (key: string) => items.get(key) ?? null,
    setItem: (key: string, value: string) => {
      items.set(key, value);
    },
  };
}

describe("collapsed pools", () => {
  it("round-trips through storage", () => {
    const storage = memoryStorage();
    storeCollapsed(storage, new Set(["vdi/a", "vdi/b"]));
    expect(storedCollapsed(storage)).toEqual(new Set(["vdi/a", "vdi/b"]));
  });

  it("reads nothing from a missing, broken or foreign entry", () => {
    expect(storedCollapsed(null).size).toBe(0);
    expect(storedCollapsed(memoryStorage({ "corral-vdi.collapsed-pools": "{" })).size).toBe(0);
    expect(storedCollapsed(memoryStorage({ "corral-vdi.collapsed-pools": '{"a":1}' })).size).toBe(
      0,
    );
    expect(
      storedCollapsed(memoryStorage({ "corral-vdi.collapsed-pools": '["vdi/a", 3]' })),
    ).toEqual(new Set(["vdi/a"]));
  });

  it("keeps only the most recent keys", () => {
    const storage = memoryStorage();
    const many = new Set(Array.from({ length: REMEMBERED_COLLAPSED + 10 }, (_, i) => `ns/p${i}`));
    storeCollapsed(storage, many);
    const kept = storedCollapsed(storage);
    expect(kept.size).toBe(REMEMBERED_COLLAPSED);
    expect(kept.has(`ns/p${REMEMBERED_COLLAPSED + 9}`)).toBe(true);
    expect(kept.has("ns/p0")).toBe(false);
  });

  it("survives a storage that throws", () => {
    const throwing = {
      getItem: () => {
        throw new Error("denied");
      },
      setItem: () => {
        throw new Error("full");
      },
    };
    expect(storedCollapsed(throwing).size).toBe(0);
    expect(() => {
      storeCollapsed(throwing, new Set(["a/b"]));
    }).not.toThrow();
    expect(storedOrder(throwing)).toBe("name");
  });

  it("toggles one key without touching the original", () => {
    const before = new Set(["vdi/a"]);
    expect(toggled(before, "vdi/a")).toEqual(new Set());
    expect(toggled(before, "vdi/b")).toEqual(new Set(["vdi/a", "vdi/b"]));
    expect(before).toEqual(new Set(["vdi/a"]));
  });
});

describe("pool order", () => {
  it("round-trips and refuses unknown values", () => {
    const storage = memoryStorage();
    storeOrder(storage, "mostFree");
    expect(storedOrder(storage)).toBe("mostFree");
    expect(storedOrder(memoryStorage({ "corral-vdi.pool-order": "random" }))).toBe("name");
  });
});
