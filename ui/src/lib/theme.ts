/**
 * Light or dark: the system's choice (`prefers-color-scheme`) unless the user picked one in
 * the header, remembered in this webview's local storage. Applied as `data-theme="light"` or
 * `"dark"` on <html>, which the stylesheet's dark palette keys on.
 */

export type ThemeChoice = "system" | "light" | "dark";

const KEY = "corral-vdi.theme";

/** Reads a stored choice; anything unknown (or no storage) is "system". */
export function parseTheme(value: string | null): ThemeChoice {
  return value === "light" || value === "dark" ? value : "system";
}

/** The remembered choice. */
export function storedTheme(storage: Pick<Storage, "getItem"> | null): ThemeChoice {
  try {
    return parseTheme(storage?.getItem(KEY) ?? null);
  } catch {
    return "system";
  }
}

/** The theme shown for `choice` while the system prefers dark (`prefersDark`) or not. */
export function themeOf(choice: ThemeChoice, prefersDark: boolean): "light" | "dark" {
  if (choice === "system") return prefersDark ? "dark" : "light";
  return choice;
}

/** Whether the system prefers dark now. */
export function systemPrefersDark(): boolean {
  return window.matchMedia("(prefers-color-scheme: dark)").matches;
}

/** Applies `choice` to `root` and remembers it. */
export function applyTheme(
  choice: ThemeChoice,
  root: HTMLElement,
  storage: Pick<Storage, "setItem" | "removeItem"> | null,
  prefersDark: boolean,
): void {
  root.dataset.theme = themeOf(choice, prefersDark);
  try {
    if (choice === "system") {
      storage?.removeItem(KEY);
    } else {
      storage?.setItem(KEY, choice);
    }
  } catch {
    // Storage refused (private mode): the choice lasts until the window closes.
  }
}

/** Applies the remembered choice now, and again whenever the system's preference changes. */
export function followTheme(): void {
  const apply = () => {
    applyTheme(
      storedTheme(window.localStorage),
      document.documentElement,
      window.localStorage,
      systemPrefersDark(),
    );
  };
  apply();
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", apply);
}
