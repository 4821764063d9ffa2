/**
 * Keys sent to a console: X11 keysyms (the values RFB key events carry), the key combinations
 * the console's menu offers, and how typed text becomes key strokes. Pure data and functions;
 * the console view sends them with noVNC's `sendKey`.
 */

/** X11 keysyms of the non-character keys used here (X11 keysymdef.h). */
export const XK = {
  BackSpace: 0xff08,
  Tab: 0xff09,
  Return: 0xff0d,
  Escape: 0xff1b,
  Delete: 0xffff,
  F1: 0xffbe,
  Shift_L: 0xffe1,
  Control_L: 0xffe3,
  Alt_L: 0xffe9,
  Super_L: 0xffeb,
} as const;

/** The keysym of function key F`n` (1 ≤ n ≤ 12): F1 … F12 are consecutive. */
export function functionKey(n: number): number {
  return XK.F1 + n - 1;
}

/** One key of a combination: its keysym and the physical key (KeyboardEvent.code). */
export type Key = { keysym: number; code: string };

/** A key combination the console's menu offers. */
export type KeyCombo = {
  id: string;
  /** What the menu shows: "Ctrl+Alt+F2". */
  label: string;
  /** Pressed in this order, released in the reverse order. */
  keys: readonly Key[];
};

const CTRL: Key = { keysym: XK.Control_L, code: "ControlLeft" };
const ALT: Key = { keysym: XK.Alt_L, code: "AltLeft" };
const TAB: Key = { keysym: XK.Tab, code: "Tab" };
const SUPER: Key = { keysym: XK.Super_L, code: "MetaLeft" };
const SHIFT: Key = { keysym: XK.Shift_L, code: "ShiftLeft" };

function fKey(n: number): Key {
  return { keysym: functionKey(n), code: `F${n}` };
}

/**
 * The combinations the console's menu offers besides Ctrl+Alt+Del (a button of its own):
 * virtual terminals 1 to 7 of a Linux guest, window switching and closing, the Super key.
 */
export const KEY_COMBOS: readonly KeyCombo[] = [
  ...[1, 2, 3, 4, 5, 6, 7].map((n) => ({
    id: `ctrl-alt-f${n}`,
    label: `Ctrl+Alt+F${n}`,
    keys: [CTRL, ALT, fKey(n)],
  })),
  { id: "alt-tab", label: "Alt+Tab", keys: [ALT, TAB] },
  { id: "alt-f4", label: "Alt+F4", keys: [ALT, fKey(4)] },
  { id: "super", label: "Super (Windows key)", keys: [SUPER] },
];

/** The combination with `id`, if the menu has it. */
export function findCombo(id: string): KeyCombo | null {
  return KEY_COMBOS.find((c) => c.id === id) ?? null;
}

/** A single key event: press (`down`) or release. */
export type KeyEvent = { keysym: number; code: string | null; down: boolean };

/** The key events of a combination: every key pressed in order, then released in reverse. */
export function comboEvents(combo: KeyCombo): KeyEvent[] {
  const down = combo.keys.map((k) => ({ keysym: k.keysym, code: k.code, down: true }));
  const up = [...combo.keys]
    .reverse()
    .map((k) => ({ keysym: k.keysym, code: k.code, down: false }));
  return [...down, ...up];
}

/**
 * One typed character: its keysym, the physical key that types it on a US keyboard (null when
 * none does: the keysym alone then says what to type), and whether Shift must be held.
 */
export type KeyStroke = { keysym: number; code: string | null; shift: boolean };

/** The key events of a stroke: Shift around the key when it needs it. */
export function strokeEvents(stroke: KeyStroke): KeyEvent[] {
  const key = [
    { keysym: stroke.keysym, code: stroke.code, down: true },
    { keysym: stroke.keysym, code: stroke.code, down: false },
  ];
  if (!stroke.shift) return key;
  return [
    { keysym: SHIFT.keysym, code: SHIFT.code, down: true },
    ...key,
    { keysym: SHIFT.keysym, code: SHIFT.code, down: false },
  ];
}

/** Punctuation of a US keyboard: [unshifted, shifted, KeyboardEvent.code]. */
const US_PUNCTUATION: readonly (readonly [string, string, string])[] = [
  ["`", "~", "Backquote"],
  ["-", "_", "Minus"],
  ["=", "+", "Equal"],
  ["[", "{", "BracketLeft"],
  ["]", "}", "BracketRight"],
  ["\\", "|", "Backslash"],
  [";", ":", "Semicolon"],
  ["'", '"', "Quote"],
  [",", "<", "Comma"],
  [".", ">", "Period"],
  ["/", "?", "Slash"],
];

/** The shifted characters of the digit row of a US keyboard, from 1 to 0. */
const US_SHIFTED_DIGITS = "!@#$%^&*()";

/** Where each printable ASCII character sits on a US keyboard. */
const US_KEYS: ReadonlyMap<string, { code: string; shift: boolean }> = (() => {
  const keys = new Map<string, { code: string; shift: boolean }>();
  keys.set(" ", { code: "Space", shift: false });
  for (let i = 0; i < 26; i += 1) {
    const lower = String.fromCharCode(0x61 + i);
    const code = `Key${lower.toUpperCase()}`;
    keys.set(lower, { code, shift: false });
    keys.set(lower.toUpperCase(), { code, shift: true });
  }
  for (let d = 0; d <= 9; d += 1) {
    keys.set(String(d), { code: `Digit${d}`, shift: false });
  }
  for (let i = 0; i < US_SHIFTED_DIGITS.length; i += 1) {
    const digit = (i + 1) % 10;
    keys.set(US_SHIFTED_DIGITS[i], { code: `Digit${digit}`, shift: true });
  }
  for (const [plain, shifted, code] of US_PUNCTUATION) {
    keys.set(plain, { code, shift: false });
    keys.set(shifted, { code, shift: true });
  }
  return keys;
})();

/**
 * The keysym of a character: Latin-1 characters are their own keysym, any other Unicode
 * character is 0x01000000 + its code point (the X11 rule). Null for control characters and
 * lone surrogates, which no key types.
 */
export function charKeysym(char: string): number | null {
  const cp = char.codePointAt(0);
  if (cp === undefined) return null;
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) return null;
  if (cp >= 0xd800 && cp <= 0xdfff) return null;
  if (cp <= 0xff) return cp;
  return 0x01000000 + cp;
}

/** What typing a text sends, and how many characters no key can type (control characters). */
export type TypingPlan = { strokes: KeyStroke[]; skipped: number };

/**
 * The key strokes that type `text` into a desktop, one per character. Printable ASCII is typed
 * with the key of a US keyboard (and Shift where that keyboard needs it), so that consoles that
 * take physical keys (QEMU) and those that take keysyms agree; other characters are sent as
 * their keysym alone. Line breaks (LF, CR LF or CR) press Return and tabs press Tab; other
 * control characters are skipped and counted.
 */
export function typingPlan(text: string): TypingPlan {
  const strokes: KeyStroke[] = [];
  let skipped = 0;
  const chars = Array.from(text);
  for (let i = 0; i < chars.length; i += 1) {
    const char = chars[i];
    if (char === "\r") {
      if (chars[i + 1] === "\n") continue; // CR LF is one line break
      strokes.push({ keysym: XK.Return, code: "Enter", shift: false });
      continue;
    }
    if (char === "\n") {
      strokes.push({ keysym: XK.Return, code: "Enter", shift: false });
      continue;
    }
    if (char === "\t") {
      strokes.push({ keysym: XK.Tab, code: "Tab", shift: false });
      continue;
    }
    const keysym = charKeysym(char);
    if (keysym === null) {
      skipped += 1;
      continue;
    }
    const key = US_KEYS.get(char);
    strokes.push(key === undefined ? { keysym, code: null, shift: false } : { keysym, ...key });
  }
  return { strokes, skipped };
}

/** How long to wait between typed characters, so that the guest keeps up. */
export const TYPE_INTERVAL_MS = 20;

/** The most characters "Type text" sends at once. */
export const TYPE_MAX_CHARS = 10_000;
