/**
 * The pool settings dialog's input, as typed: turning the fields into the settings the backend
 * judges (whole numbers, trimmed durations, an empty field for "the default"), and the words
 * of a shrink's confirmation. The rules themselves (bounds, duration forms, warm ≤ size) are the
 * backend's: `check_pool_settings` reads the values as the broker does.
 */
import type {
  Allowed,
  Assignment,
  OnRelease,
  Permissions,
  PolicyChanges,
  PolicySummary,
  PoolSettings,
  StateCounts,
} from "../bindings";
import { parseWholeNumber } from "./pools";

/** The three on-release choices, each with its one-line explanation. */
export const ON_RELEASE_CHOICES: readonly { value: OnRelease; label: string; explain: string }[] = [
  {
    value: "keep",
    label: "Keep",
    explain: "Stop the desktop; its disk is kept for the next user.",
  },
  {
    value: "restart",
    label: "Restart",
    explain: "Restart the desktop (every open session ends); its disk is kept.",
  },
  {
    value: "reset",
    label: "Reset",
    explain: "Delete the desktop and clone it again from the golden VM: a fresh disk.",
  },
];

/** The two assignment choices, each with its one-line explanation. */
export const ASSIGNMENT_CHOICES: readonly { value: Assignment; label: string; explain: string }[] =
  [
    {
      value: "floating",
      label: "Floating",
      explain: "A released desktop goes back to the pool, for anyone.",
    },
    {
      value: "dedicated",
      label: "Dedicated",
      explain: "A user's first desktop stays theirs: they get it again, no one else does.",
    },
  ];

/** The dialog's fields as typed. */
export type SettingsForm = {
  size: string;
  warm: string;
  /** Empty: the default (one hour). */
  disconnectGrace: string;
  /** Empty: no limit. */
  maxSession: string;
  /** Empty: never. */
  idleTimeout: string;
  onRelease: OnRelease;
  assignment: Assignment;
};

/** The fields showing `settings`. */
export function formOf(settings: PoolSettings): SettingsForm {
  return {
    size: String(settings.size),
    warm: String(settings.warm),
    disconnectGrace: settings.disconnectGrace ?? "",
    maxSession: settings.maxSession ?? "",
    idleTimeout: settings.idleTimeout ?? "",
    onRelease: settings.onRelease,
    assignment: settings.assignment,
  };
}

/** A field whose shape is wrong before any rule is asked. */
export type ShapeProblem = { field: "size" | "warm"; message: string };

/**
 * The settings the fields make, or the first field that is no whole number (the only check
 * made here: everything else is the backend's). A cleared duration is `null` (the default).
 */
export function settingsOf(
  form: SettingsForm,
): { ok: true; settings: PoolSettings } | { ok: false; problem: ShapeProblem } {
  const size = parseWholeNumber(form.size, "size");
  if (!size.ok) return { ok: false, problem: { field: "size", message: size.problem } };
  const warm = parseWholeNumber(form.warm, "number of warm members");
  if (!warm.ok) return { ok: false, problem: { field: "warm", message: warm.problem } };
  const text = (value: string) => (value.trim() === "" ? null : value.trim());
  return {
    ok: true,
    settings: {
      size: size.value,
      warm: warm.value,
      disconnectGrace: text(form.disconnectGrace),
      maxSession: text(form.maxSession),
      idleTimeout: text(form.idleTimeout),
      onRelease: form.onRelease,
      assignment: form.assignment,
    },
  };
}

/** The policy fields of New pool (on a cluster with a broker): the settings but the size. */
export type PolicyForm = Omit<SettingsForm, "size">;

/** New pool's policy fields before anything is typed: the DesktopPool's defaults. */
export const DEFAULT_POLICY_FORM: PolicyForm = {
  warm: "0",
  disconnectGrace: "",
  maxSession: "",
  idleTimeout: "",
  onRelease: "keep",
  assignment: "floating",
};

/** No policy: a pool created on a cluster without a broker. */
export const NO_POLICY: PolicyChanges = {
  warm: null,
  disconnectGrace: null,
  maxSession: null,
  idleTimeout: null,
  onRelease: null,
  assignment: null,
};

/**
 * The policy New pool sends for `form`, or the first field that is no whole number; the
 * backend judges the rest (bounds, durations, warm ≤ size) with the pool's size.
 */
export function policyChangesOf(
  form: PolicyForm,
): { ok: true; changes: PolicyChanges } | { ok: false; problem: string } {
  const shaped = settingsOf({ ...form, size: "0" });
  if (!shaped.ok) return { ok: false, problem: shaped.problem.message };
  const { warm, disconnectGrace, maxSession, idleTimeout, onRelease, assignment } = shaped.settings;
  return {
    ok: true,
    changes: { warm, disconnectGrace, maxSession, idleTimeout, onRelease, assignment },
  };
}

/** Whether two settings are the same (nothing to save). */
export function sameSettings(a: PoolSettings, b: PoolSettings): boolean {
  return (
    a.size === b.size &&
    a.warm === b.warm &&
    a.disconnectGrace === b.disconnectGrace &&
    a.maxSession === b.maxSession &&
    a.idleTimeout === b.idleTimeout &&
    a.onRelease === b.onRelease &&
    a.assignment === b.assignment
  );
}

/** "devpool-4", "devpool-4 and devpool-3", "devpool-4, devpool-3 and devpool-2". */
export function listNames(names: readonly string[]): string {
  if (names.length <= 1) return names.join("");
  return `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
}

/**
 * What a resize to `size` removes, for its confirmation, by the broker's own rule: the free
 * members above the size go now, the claimed ones once released (highest index first); no other
 * member is named, since none goes.
 */
export function describeShrink(
  pool: string,
  size: number,
  removed: readonly string[],
  onceReleased: readonly string[],
): string {
  const members = (names: readonly string[]) =>
    `${names.length === 1 ? "member" : `${names.length} members`} ${listNames(names)}`;
  const now =
    removed.length === 0
      ? `Resizing ${pool} to ${size} removes no member now.`
      : `Resizing ${pool} to ${size} removes ${members(removed)} now: their VMs and disks are deleted.`;
  const later =
    onceReleased.length === 0
      ? ""
      : ` It removes claimed ${members(onceReleased)} once released; until then ${onceReleased.length === 1 ? "it stays" : "they stay"}.`;
  return `${now}${later} Every other member stays.`;
}

/** What saving a larger size does: "Saving adds lab-4 and lab-5, cloned from golden-desktop." */
export function describeGrowth(added: readonly string[], golden: string): string {
  return `Saving adds ${added.length === 1 ? "member" : `${added.length} members`} ${listNames(added)}, cloned from ${golden}.`;
}

/**
 * Whether you may change a pool's settings or adopt it: administrators only, as the app judges
 * administrators elsewhere (`Permissions.admin`, from the cluster). Until the answer arrives
 * the buttons are offered, and the cluster judges.
 */
export function manageAllowed(permissions: Permissions | null): Allowed {
  if (permissions === null || permissions.admin) return { allowed: true, reason: null };
  return {
    allowed: false,
    reason: "Only Corral VDI administrators change a pool's settings or adopt it.",
  };
}

/**
 * A pool head's counts per state: "3 free (2 warm) · 1 claimed · 1 granting · 2 creating ·
 * 4 members"; states with no member are left out, except free and claimed.
 */
export function formatStateCounts(counts: StateCounts, total: number): string {
  const parts = [
    counts.warm > 0 ? `${counts.free} free (${counts.warm} warm)` : `${counts.free} free`,
    `${counts.claimed} claimed`,
  ];
  if (counts.granting > 0) parts.push(`${counts.granting} granting`);
  if (counts.releasing > 0) parts.push(`${counts.releasing} releasing`);
  if (counts.removing > 0) parts.push(`${counts.removing} removing`);
  if (counts.creating > 0) parts.push(`${counts.creating} creating`);
  if (counts.problems > 0) {
    parts.push(`${counts.problems} ${counts.problems === 1 ? "problem" : "problems"}`);
  }
  parts.push(`${total} ${total === 1 ? "member" : "members"}`);
  return parts.join(" · ");
}

/** A managed pool's policy in one line, for the marker's tooltip. */
export function describePolicy(policy: PolicySummary): string {
  const choice = ON_RELEASE_CHOICES.find((c) => c.value === policy.onRelease);
  return [
    `size ${policy.size}`,
    `warm ${policy.warm}`,
    `disconnect grace ${policy.disconnectGrace}`,
    `max session ${policy.maxSession ?? "no limit"}`,
    `idle timeout ${policy.idleTimeout ?? "never"}`,
    `on release: ${choice?.label.toLowerCase() ?? policy.onRelease}`,
    ...(policy.assignment === "dedicated" ? ["dedicated desktops"] : []),
    `golden VM ${policy.golden}`,
  ].join(" · ");
}
