/**
 * A `<select>` stepped through with the keys while closed: which keys step it, and which held
 * step still applies. WebKitGTK fires `change` at every such step; the context picker holds a
 * step until Enter instead of switching at each one (components/Header.tsx).
 */

/** Keys that move a closed `<select>`'s choice without opening it. */
const STEP_KEYS = new Set([
  "ArrowUp",
  "ArrowDown",
  "ArrowLeft",
  "ArrowRight",
  "Home",
  "End",
  "PageUp",
  "PageDown",
]);

/** The parts of a key event that decide it. */
export type KeyPress = { key: string; altKey: boolean; ctrlKey: boolean; metaKey: boolean };

/**
 * Whether `press` steps a closed `<select>`: an arrow, Home, End, PageUp, PageDown or a
 * printable character (type-ahead), with no modifier. Space opens the list: no step.
 */
export function stepsClosedSelect(press: KeyPress): boolean {
  if (press.altKey || press.ctrlKey || press.metaKey) return false;
  const printable = press.key.length === 1 && press.key !== " ";
  return STEP_KEYS.has(press.key) || printable;
}

/** A step held until Enter: the choice it stepped to, from the choice shown then. */
export type HeldStep = { from: string; value: string };

/**
 * The choice `step` holds, while it still applies: the choice shown is still the one it stepped
 * from, and `choices` still offers it. Null otherwise (it lapses).
 */
export function heldChoice(
  step: HeldStep | null,
  current: string,
  choices: readonly string[],
): string | null {
  return step !== null && step.from === current && choices.includes(step.value) ? step.value : null;
}
