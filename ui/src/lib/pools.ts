/**
 * Pure helpers for creating and deleting pools. Nothing here decides whether a pool may be
 * created or deleted: the backend checks every request (the CLI's rules). These only track its
 * progress reports, pick what to offer and word what it answered.
 */
import type {
  CreateProgress,
  CreateStarted,
  CreateStep,
  GoldenCandidate,
  MemberView,
  NewPoolField,
  NewPoolProblem,
  PoolCreated,
  PoolDeleted,
  PoolView,
} from "../bindings";
import type { Tone } from "./presentation";

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

// ---------- New pool form ----------

/** The largest number the backend's size and timeout fields (u32) can carry. */
const U32_MAX = 4_294_967_295;

export type ParsedNumber = { ok: true; value: number } | { ok: false; problem: string };

/**
 * A whole number typed in a number field, or why it is not one. Only the form of the number is
 * checked here; its range (size 1 to 500, timeout above zero) is the backend's to judge.
 */
export function parseWholeNumber(text: string, what: string): ParsedNumber {
  const trimmed = text.trim();
  if (trimmed === "") {
    return { ok: false, problem: `Enter the ${what}.` };
  }
  if (!/^\d+$/.test(trimmed)) {
    return { ok: false, problem: `The ${what} must be a whole number.` };
  }
  const value = Number(trimmed);
  if (value > U32_MAX) {
    return { ok: false, problem: `The ${what} is far too large.` };
  }
  return { ok: true, value };
}

/** Whether cloning `candidate` as it is would need nothing more: stopped and no problems. */
function cleanGolden(candidate: GoldenCandidate): boolean {
  return !candidate.running && candidate.problems.length === 0;
}

/**
 * The golden VM the picker shows: the one chosen if it is still a candidate, else the first that
 * can be cloned as it is, else the first; null when there is none.
 */
export function chooseGolden(
  candidates: readonly GoldenCandidate[],
  selectedName: string | null,
): GoldenCandidate | null {
  return (
    candidates.find((c) => c.name === selectedName) ??
    candidates.find(cleanGolden) ??
    (candidates.length > 0 ? candidates[0] : null)
  );
}

/** A golden VM as the picker lists it: "golden-desktop — Stopped". */
export function goldenOptionLabel(candidate: GoldenCandidate): string {
  const power = candidate.power === "" ? "Unknown" : candidate.power;
  const problems =
    candidate.problems.length > 0
      ? ` (${plural(candidate.problems.length, "problem", "problems")})`
      : "";
  return `${candidate.name} — ${power}${problems}`;
}

/** What a New pool form holds, as far as the Create button is concerned. */
export type CreateReadiness = {
  golden: GoldenCandidate | null;
  /** "Clone it anyway" is ticked. */
  allowRunning: boolean;
  name: string;
  /** How many fields are marked with a problem ({@link newPoolProblems}). */
  problems: number;
};

/** Each New pool field's name, as its label says it. */
export const NEW_POOL_FIELD_LABELS: Record<NewPoolField, string> = {
  name: "Pool name",
  namespace: "Namespace",
  golden: "Golden VM",
  size: "Size",
  timeout: "Clone timeout",
  warm: "Warm",
  disconnectGrace: "Disconnect grace",
  maxSession: "Max session",
  idleTimeout: "Idle timeout",
  onRelease: "On release",
  policy: "Policy",
};

/** The fields whose rule reads another field's value: warm is judged against the size. */
const JUDGED_WITH: Partial<Record<NewPoolField, readonly NewPoolField[]>> = { size: ["warm"] };

/**
 * Every problem of the New pool form, in the order of its fields: the values that are no whole
 * number (`shape`, found here), then the backend's verdict on the rest (`judged`, null while
 * there is none), leaving out its word on a field already marked here and on a field judged
 * against it (both were judged on a stand-in value).
 */
export function newPoolProblems(
  shape: readonly NewPoolProblem[],
  judged: readonly NewPoolProblem[] | null,
): NewPoolProblem[] {
  const marked = new Set(shape.flatMap((p) => [p.field, ...(JUDGED_WITH[p.field] ?? [])]));
  const all = [...shape, ...(judged ?? []).filter((p) => !marked.has(p.field))];
  const order = Object.keys(NEW_POOL_FIELD_LABELS);
  return all
    .map((p, i) => ({ p, i }))
    .sort((a, b) => order.indexOf(a.p.field) - order.indexOf(b.p.field) || a.i - b.i)
    .map(({ p }) => p);
}

/** Why the New pool form cannot be submitted as it stands, or null when it can. */
export function createBlocker(form: CreateReadiness): string | null {
  const { golden } = form;
  if (golden === null) {
    return "Choose a golden VM to clone.";
  }
  if (golden.problems.length > 0) {
    const n = golden.problems.length;
    return `${golden.name} has ${plural(n, "problem", "problems")} that would make its clones fail or stall; fix ${n === 1 ? "it" : "them"} first, or choose another VM.`;
  }
  if (golden.running && !form.allowRunning) {
    return `${golden.name} is not stopped (${golden.power}): stop it first, or tick "Clone it anyway".`;
  }
  if (form.name.trim() === "") {
    return "Enter a name for the pool.";
  }
  if (form.problems > 0) {
    return form.problems === 1
      ? "Correct the problem listed above."
      : `Correct the ${form.problems} problems listed above.`;
  }
  return null;
}

/** Whether the snapshot already has a pool `name` in `namespace`. */
export function poolExists(pools: readonly PoolView[], namespace: string, name: string): boolean {
  return pools.some((p) => p.namespace === namespace && p.name === name);
}

/**
 * "Will create devpool-1 … devpool-3": the members a valid request would make; "Would create …"
 * when something else still stops the create (`willCreate` false), so the line never
 * contradicts a disabled Create.
 */
export function describeMembersToCreate(members: readonly string[], willCreate = true): string {
  const verb = willCreate ? "Will create" : "Would create";
  if (members.length === 0) {
    return `${verb} no member`;
  }
  const first = members[0];
  const last = members[members.length - 1];
  if (members.length === 1) {
    return `${verb} ${first}`;
  }
  if (members.length === 2) {
    return `${verb} ${first} and ${last}`;
  }
  return `${verb} ${first} … ${last}`;
}

// ---------- Create progress ----------

/** One member of a pool being created, as last reported. */
export type MemberStatus = {
  member: string;
  /** Its VirtualMachineClone object, once reported. */
  clone: string | null;
  step: CreateStep;
  /** The clone's last phase as KubeVirt reported it (kept through the steps after it). */
  phase: string | null;
  /** The clone's condition message. */
  message: string | null;
  /** Why it failed. */
  error: string | null;
  /** Finished, one way or the other. */
  done: boolean;
  /** Milliseconds since the create started, at the last report; null before any. */
  elapsedMs: number | null;
};

/** What is known of a pool create while it runs: the backend's reports, folded. */
export type CreateRun = {
  namespace: string;
  pool: string;
  /** What the backend announced once its checks passed; null until then. */
  started: CreateStarted | null;
  /** In index order. */
  members: MemberStatus[];
};

function queued(member: string): MemberStatus {
  return {
    member,
    clone: null,
    step: "queued",
    phase: null,
    message: null,
    error: null,
    done: false,
    elapsedMs: null,
  };
}

/** A create about to be sent, with the members the validation said it would make. */
export function newCreateRun(
  namespace: string,
  pool: string,
  members: readonly string[],
): CreateRun {
  return { namespace, pool, started: null, members: members.map(queued) };
}

/**
 * Folds one progress report into a run. Reports about another pool are ignored, as are reports
 * about members the run does not make (once it has said which it makes) and reports that arrive
 * after their member finished.
 */
export function applyCreateProgress(run: CreateRun, event: CreateProgress): CreateRun {
  if (event.kind === "started") {
    if (event.namespace !== run.namespace || event.pool !== run.pool) {
      return run;
    }
    const started: CreateStarted = {
      namespace: event.namespace,
      pool: event.pool,
      golden: event.golden,
      members: event.members,
      cloneApiVersion: event.cloneApiVersion,
      runId: event.runId,
    };
    const known = new Map(run.members.map((m) => [m.member, m]));
    return {
      ...run,
      started,
      members: event.members.map((name) => known.get(name) ?? queued(name)),
    };
  }
  const index = run.members.findIndex((m) => m.member === event.member);
  const current = index < 0 ? null : run.members[index];
  const next: MemberStatus = {
    member: event.member,
    clone: event.clone,
    step: event.step,
    // The steps after the clone (labelling, done) report no phase: its last one stays.
    phase: event.phase ?? current?.phase ?? null,
    message: event.message,
    error: event.error,
    done: event.done,
    elapsedMs: event.elapsedMs,
  };
  if (current === null) {
    return run.started === null ? { ...run, members: [...run.members, next] } : run;
  }
  if (current.done && !event.done) {
    return run;
  }
  const members = run.members.slice();
  members[index] = next;
  return { ...run, members };
}

/** A run that the backend said succeeded: every member it made is done. */
export function finishCreateRun(run: CreateRun, created: PoolCreated): CreateRun {
  const made = new Set(created.members);
  const known = new Set(run.members.map((m) => m.member));
  const members = run.members.map((m) =>
    made.has(m.member) && m.step !== "done"
      ? {
          ...m,
          step: "done" as const,
          done: true,
          error: null,
          elapsedMs: m.elapsedMs ?? created.elapsedMs,
        }
      : m,
  );
  for (const name of created.members) {
    if (!known.has(name)) {
      members.push({ ...queued(name), step: "done", done: true, elapsedMs: created.elapsedMs });
    }
  }
  return { ...run, members };
}

export type CreateTally = {
  total: number;
  /** Done or failed. */
  finished: number;
  succeeded: number;
  failed: number;
};

/** How far a run is: members finished out of all. */
export function tallyCreateRun(run: CreateRun): CreateTally {
  let succeeded = 0;
  let failed = 0;
  for (const m of run.members) {
    if (m.step === "failed") failed += 1;
    else if (m.done) succeeded += 1;
  }
  return { total: run.members.length, finished: succeeded + failed, succeeded, failed };
}

/** "2 of 3 members finished (1 failed)". */
export function describeTally(tally: CreateTally): string {
  const failed = tally.failed > 0 ? ` (${tally.failed} failed)` : "";
  const noun = tally.total === 1 ? "member" : "members";
  return `${tally.finished} of ${tally.total} ${noun} finished${failed}`;
}

/**
 * How long a member has taken: once it finished, the time of its last report; while the run
 * goes on (`runElapsedMs` known), the run's time so far; else the time of its last report, if
 * any.
 */
export function memberElapsedMs(status: MemberStatus, runElapsedMs: number | null): number | null {
  if (status.done && status.elapsedMs !== null) {
    return status.elapsedMs;
  }
  if (runElapsedMs !== null) {
    return Math.max(runElapsedMs, status.elapsedMs ?? 0);
  }
  return status.elapsedMs;
}

/** The wording of a member's step. */
export function stepLabel(step: CreateStep): string {
  switch (step) {
    case "queued":
      return "Queued";
    case "cloneCreated":
      return "Clone created";
    case "cloning":
      return "Cloning";
    case "labelling":
      return "Labelling";
    case "done":
      return "Done";
    case "failed":
      return "Failed";
  }
}

/** Badge colour of a member's step: grey waiting, blue working, green done, red failed. */
export function stepTone(step: CreateStep): Tone {
  switch (step) {
    case "queued":
      return "grey";
    case "cloneCreated":
    case "cloning":
    case "labelling":
      return "blue";
    case "done":
      return "green";
    case "failed":
      return "red";
  }
}

/** `pool "devpool" created: 3 members`. */
export function formatPoolCreated(created: PoolCreated): string {
  return `pool "${created.name}" created: ${plural(created.members.length, "member", "members")}`;
}

// ---------- Delete ----------

/**
 * Whether deleting a member needs force: it has the assigned-to label or an active Lease, which
 * is every state but free and free (stale lease).
 */
export function isAssigned(member: MemberView): boolean {
  return member.state !== "free" && member.state !== "freeStaleLease";
}

/** The members of a pool a delete would take from their users. */
export function assignedMembers(pool: PoolView): MemberView[] {
  return pool.members.filter(isAssigned);
}

/**
 * Who would lose a desktop: "devpool-1 is assigned to alice." or
 * "2 members are assigned: devpool-1 (alice), devpool-3 (bob)."; empty when nobody would.
 */
export function describeAssigned(assigned: readonly MemberView[]): string {
  const holder = (m: MemberView) =>
    m.holder === null || m.holder === "" ? "unknown holder" : m.holder;
  if (assigned.length === 0) {
    return "";
  }
  if (assigned.length === 1) {
    return `${assigned[0].name} is assigned to ${holder(assigned[0])}.`;
  }
  const list = assigned.map((m) => `${m.name} (${holder(m)})`).join(", ");
  return `${assigned.length} members are assigned: ${list}.`;
}

/** Why the delete button cannot be used yet, or null when it can. */
export function deleteBlocker(
  pool: string,
  typed: string,
  assignedCount: number,
  force: boolean,
): string | null {
  if (typed !== pool) {
    return `Type the pool name "${pool}" to confirm.`;
  }
  if (assignedCount > 0 && !force) {
    return `${plural(assignedCount, "member is", "members are")} assigned: tick "Delete assigned members too" to delete ${assignedCount === 1 ? "it" : "them"} as well.`;
  }
  return null;
}

/**
 * "deleted pool devpool: 3 members, 3 Leases, 0 clone objects", the assigned members that
 * were deleted because of force, and what claimed to belong but was left alone as not ours
 * (each with why).
 */
export function formatPoolDeleted(deleted: PoolDeleted): string {
  const removed = [
    plural(deleted.members.length, "member", "members"),
    plural(deleted.leases.length, "Lease", "Leases"),
    plural(deleted.clones.length, "clone object", "clone objects"),
  ];
  let text = `deleted pool ${deleted.name}: ${removed.join(", ")}`;
  if (deleted.forced.length > 0) {
    text += `; taken from their users: ${deleted.forced.join(", ")}`;
  }
  if (deleted.leftAlone.length > 0) {
    text += `; not ours, left alone: ${deleted.leftAlone.join("; ")}`;
  }
  return text;
}

// ---------- Filter ----------

/** A filter query read: what to look for, and whether a field must be exactly that (the query
 * in double quotes, as a state count's button puts it: `"assigned"` finds the assigned members,
 * not also those "assigned (legacy, label-only)"). */
function readQuery(query: string): { needle: string; exact: boolean } {
  const trimmed = query.trim();
  const quoted = trimmed.length >= 2 && trimmed.startsWith('"') && trimmed.endsWith('"');
  return {
    needle: (quoted ? trimmed.slice(1, -1) : trimmed).toLowerCase(),
    exact: quoted,
  };
}

/** The query a state's count filters by: exactly that state. */
export function stateQuery(label: string): string {
  return `"${label}"`;
}

/**
 * The pools that match `query` (case-insensitive, surrounding spaces ignored; in double quotes,
 * a whole field must match): a pool whose name or namespace matches is kept whole; otherwise
 * only its members whose name, holder, labelled holder, state or power matches, and pools left
 * without members are dropped. An empty query keeps everything (the same array).
 */
export function filterPools(pools: readonly PoolView[], query: string): readonly PoolView[] {
  const { needle, exact } = readQuery(query);
  if (needle === "") return pools;
  const has = (text: string | null) =>
    text !== null && (exact ? text.toLowerCase() === needle : text.toLowerCase().includes(needle));
  const out: PoolView[] = [];
  for (const pool of pools) {
    if (has(pool.name) || has(pool.namespace)) {
      out.push(pool);
      continue;
    }
    const members = pool.members.filter(
      (m) =>
        has(m.name) || has(m.holder) || has(m.labelHolder) || has(m.stateLabel) || has(m.power),
    );
    if (members.length > 0) out.push({ ...pool, members });
  }
  return out;
}

/** "3 of 1,000 pools, 12 members match "alice"" : what a filter shows ("match exactly" for a
 * quoted query). */
export function describeFilter(
  shown: readonly PoolView[],
  all: readonly PoolView[],
  query: string,
): string {
  const { exact } = readQuery(query);
  const members = shown.reduce((n, p) => n + p.members.length, 0);
  const pools = `${shown.length.toLocaleString("en-US")} of ${all.length.toLocaleString("en-US")} ${all.length === 1 ? "pool" : "pools"}`;
  const match = exact ? `match exactly ${query.trim()}` : `match "${query.trim()}"`;
  return `${pools}, ${members.toLocaleString("en-US")} ${members === 1 ? "member" : "members"} ${match}`;
}

// ---------- Order and totals ----------

/** How the pools list is ordered. */
export type PoolOrder = "name" | "mostFree" | "fewestFree" | "largest";

/** The orders offered, with their labels, first the default. */
export const POOL_ORDERS: readonly { value: PoolOrder; label: string }[] = [
  { value: "name", label: "Name" },
  { value: "mostFree", label: "Most free first" },
  { value: "fewestFree", label: "Fewest free first" },
  { value: "largest", label: "Most members first" },
];

/** Narrows a stored or selected string to a PoolOrder ("name" for anything else). */
export function parsePoolOrder(value: string | null): PoolOrder {
  return POOL_ORDERS.find((o) => o.value === value)?.value ?? "name";
}

/**
 * `pools` in `order`; ties (and "name") keep the backend's (namespace, name) order. "name"
 * returns the same array.
 */
export function sortPools(pools: readonly PoolView[], order: PoolOrder): readonly PoolView[] {
  if (order === "name") return pools;
  const key: (p: PoolView) => number =
    order === "mostFree"
      ? (p) => -p.counts.free
      : order === "fewestFree"
        ? (p) => p.counts.free
        : (p) => -p.counts.total;
  return pools
    .map((pool, index) => ({ pool, index, k: key(pool) }))
    .sort((a, b) => a.k - b.k || a.index - b.index)
    .map((e) => e.pool);
}

/** How many members are in each state, over `pools`, by the state's name; states with none
 * are left out. */
export function stateTotals(pools: readonly PoolView[]): { label: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const pool of pools) {
    for (const member of pool.members) {
      counts.set(member.stateLabel, (counts.get(member.stateLabel) ?? 0) + 1);
    }
  }
  // By name, so that a count changing never moves the buttons.
  return [...counts.entries()]
    .map(([label, count]) => ({ label, count }))
    .sort((a, b) => a.label.localeCompare(b.label));
}
