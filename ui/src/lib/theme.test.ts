import { describe, expect, it } from "vitest";
import { applyTheme, parseTheme, storedTheme, themeOf } from "./theme";

function memory() {
  const items = new Map<string, string>();
  return {
    getItem: (k: string) => items.get(k) ?? null,
    setItem: (k: string, v: string) => {
      items.set(k, v);
    },
    removeItem: (k: string) => {
      items.delete(k);
    },
  };
}

describe("the theme", () => {
  it("follows the system unless light or dark was chosen", () => {
    expect(parseTheme(null)).toBe("system");
    expect(parseTheme("purple")).toBe("system");
    expect(parseTheme("dark")).toBe("dark");
  });

  it("is applied to the root and remembered", () => {
    const storage = memory();
    const root = { dataset: {} as Record<string, string> } as unknown as HTMLElement;
    applyTheme("dark", root, storage, false);
    expect(root.dataset.theme).toBe("dark");
    expect(storedTheme(storage)).toBe("dark");
    applyTheme("system", root, storage, false);
    expect(root.dataset.theme).toBe("light");
    expect(storedTheme(storage)).toBe("system");
    applyTheme("system", root, storage, true);
    expect(root.dataset.theme).toBe("dark");
  });

  it("lets a choice override the system's preference", () => {
    expect(themeOf("light", true)).toBe("light");
    expect(themeOf("dark", false)).toBe("dark");
    expect(themeOf("system", true)).toBe("dark");
  });
});
