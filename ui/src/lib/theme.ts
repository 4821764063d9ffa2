/**
 * Light or dark: the system's choice (`prefers-color-scheme`) unless the user picked one in
 * the header, remembered in this webview's local storage. Applied as `data-theme` on <html>,
 * which the stylesheet's two palettes key on.
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

/** Applies `choice` to `root` and remembers it. */
export function applyTheme(
  choice: ThemeChoice,
  root: HTMLElement,
  storage: Pick<Storage, "setItem" | "removeItem"> | null,
): void {
  if (choice === "system") {
    delete root.dataset.theme;
  } else {
    root.dataset.theme = choice;
  }
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
