import { describe, expect, it } from "vitest";
import { member, pool } from "./fixtures";
import type {
  CreateProgress,
  GoldenCandidate,
  MemberProgress,
  MemberView,
  NewPoolField,
  NewPoolProblem,
  PoolCreated,
  PoolDeleted,
  PoolView,
} from "../bindings";
import {
  applyCreateProgress,
  assignedMembers,
  chooseGolden,
  createBlocker,
  deleteBlocker,
  describeAssigned,
  describeFilter,
  describeMembersToCreate,
  filterPools,
  stateQuery,
  describeTally,
  finishCreateRun,
  formatPoolCreated,
  formatPoolDeleted,
  goldenOptionLabel,
  isAssigned,
  memberElapsedMs,
  newCreateRun,
  newPoolProblems,
  parseWholeNumber,
  parsePoolOrder,
  poolExists,
  sortPools,
  stateTotals,
  stepLabel,
  stepTone,
  tallyCreateRun,
  type CreateReadiness,
  type CreateRun,
  type MemberStatus,
} from "./pools";

function candidate(name: string, overrides: Partial<GoldenCandidate> = {}): GoldenCandidate {
  return { name, power: "Stopped", running: false, problems: [], ...overrides };
}

const running = (power = "Running"): Partial<GoldenCandidate> => ({ power, running: true });
const SNAPSHOTS_OFF =
  'volume "rootdisk": its StorageClass has no VolumeSnapshotClass — enable snapshots for it';

describe("parseWholeNumber", () => {
  it("accepts whole numbers, trimmed, leaving the range to the backend", () => {
    expect(parseWholeNumber("3", "size")).toEqual({ ok: true, value: 3 });
    expect(parseWholeNumber(" 120 ", "timeout")).toEqual({ ok: true, value: 120 });
    expect(parseWholeNumber("0", "size")).toEqual({ ok: true, value: 0 });
    expect(parseWholeNumber("501", "size")).toEqual({ ok: true, value: 501 });
    expect(parseWholeNumber("4294967295", "size")).toEqual({ ok: true, value: 4294967295 });
  });

  it("says what is wrong with anything else", () => {
    expect(parseWholeNumber("", "size")).toEqual({ ok: false, problem: "Enter the size." });
    for (const text of ["-1", "2.5", "1e3", "abc", "3 4"]) {
      expect(parseWholeNumber(text, "size")).toEqual({
        ok: false,
        problem: "The size must be a whole number.",
      });
    }
    expect(parseWholeNumber("4294967296", "timeout")).toEqual({
      ok: false,
      problem: "The timeout is far too large.",
    });
  });
});

describe("chooseGolden", () => {
  const list = [
    candidate("a-running", running()),
    candidate("b-broken", { problems: [SNAPSHOTS_OFF] }),
    candidate("c-clean"),
    candidate("d-clean"),
  ];

  it("keeps the chosen VM while it is a candidate", () => {
    expect(chooseGolden(list, "b-broken")?.name).toBe("b-broken");
    expect(chooseGolden(list, "a-running")?.name).toBe("a-running");
  });

  it("otherwise offers the first VM that can be cloned as it is", () => {
    expect(chooseGolden(list, null)?.name).toBe("c-clean");
    expect(chooseGolden(list, "gone")?.name).toBe("c-clean");
  });

  it("falls back to the first VM, and to none", () => {
    expect(chooseGolden([candidate("x", running()), candidate("y", running())], null)?.name).toBe(
      "x",
    );
    expect(chooseGolden([], "x")).toBeNull();
  });
});

describe("goldenOptionLabel", () => {
  it("shows the name and the power as the cluster says it", () => {
    expect(goldenOptionLabel(candidate("golden-desktop"))).toBe("golden-desktop — Stopped");
    expect(goldenOptionLabel(candidate("g", running("Starting")))).toBe("g — Starting");
    expect(goldenOptionLabel(candidate("g", { power: "" }))).toBe("g — Unknown");
  });

  it("counts problems", () => {
    expect(goldenOptionLabel(candidate("g", { problems: [SNAPSHOTS_OFF] }))).toBe(
      "g — Stopped (1 problem)",
    );
    expect(goldenOptionLabel(candidate("g", { problems: ["a — b", "c — d"] }))).toBe(
      "g — Stopped (2 problems)",
    );
  });
});

describe("createBlocker", () => {
  const ready: CreateReadiness = {
    golden: candidate("golden"),
    allowRunning: false,
    name: "devpool",
    problems: 0,
  };

  it("is null when the form can be sent", () => {
    expect(createBlocker(ready)).toBeNull();
  });

  it("needs a golden VM without problems", () => {
    expect(createBlocker({ ...ready, golden: null })).toBe("Choose a golden VM to clone.");
    expect(createBlocker({ ...ready, golden: candidate("g", { problems: [SNAPSHOTS_OFF] }) })).toBe(
      "g has 1 problem that would make its clones fail or stall; fix it first, or choose another VM.",
    );
    expect(
      createBlocker({
        ...ready,
        allowRunning: true,
        golden: candidate("g", { ...running(), problems: ["a", "b"] }),
      }),
    ).toContain("g has 2 problems");
  });

  it("needs a running golden VM to be allowed explicitly", () => {
    const golden = candidate("g", running());
    expect(createBlocker({ ...ready, golden })).toBe(
      'g is not stopped (Running): stop it first, or tick "Clone it anyway".',
    );
    expect(createBlocker({ ...ready, golden, allowRunning: true })).toBeNull();
  });

  it("needs a name and no value marked", () => {
    expect(createBlocker({ ...ready, name: "  " })).toBe("Enter a name for the pool.");
    expect(createBlocker({ ...ready, problems: 1 })).toBe("Correct the problem listed above.");
    expect(createBlocker({ ...ready, problems: 3 })).toBe("Correct the 3 problems listed above.");
  });
});

describe("newPoolProblems", () => {
  const problem = (field: NewPoolField, message: string): NewPoolProblem => ({ field, message });

  it("lists every problem in the order of the fields", () => {
    const shape = [problem("timeout", "The timeout must be a whole number.")];
    const judged = [
      problem("warm", "5 is out of range (0 to the size, 1)"),
      problem("name", 'pool name "Dev" is not a valid name'),
      problem("maxSession", '"8x" is not a duration'),
    ];
    expect(newPoolProblems(shape, judged).map((p) => p.field)).toEqual([
      "name",
      "timeout",
      "warm",
      "maxSession",
    ]);
  });

  it("keeps its own word on a field over the backend's, which judged a stand-in", () => {
    const shape = [problem("size", "Enter the size.")];
    const judged = [problem("size", "pool size 1 is fine"), problem("timeout", "out of range")];
    expect(newPoolProblems(shape, judged)).toEqual([shape[0], judged[1]]);
    expect(newPoolProblems([], null)).toEqual([]);
  });

  it("drops the word on warm while the size it is judged against is a stand-in", () => {
    const shape = [problem("size", "Enter the size.")];
    const judged = [problem("warm", "2 is out of range (0 to the size, 1)")];
    expect(newPoolProblems(shape, judged)).toEqual(shape);
    expect(newPoolProblems([], judged)).toEqual(judged);
  });
});

describe("poolExists", () => {
  const pools = [pool("devpool", []), pool("lab", [], "other")];

  it("matches name and namespace", () => {
    expect(poolExists(pools, "corral-vms", "devpool")).toBe(true);
    expect(poolExists(pools, "other", "devpool")).toBe(false);
    expect(poolExists(pools, "corral-vms", "lab")).toBe(false);
    expect(poolExists([], "corral-vms", "devpool")).toBe(false);
  });
});

describe("describeMembersToCreate", () => {
  it("names the first and last member", () => {
    expect(describeMembersToCreate(["devpool-1", "devpool-2", "devpool-3"])).toBe(
      "Will create devpool-1 … devpool-3",
    );
    expect(describeMembersToCreate(["p-1", "p-2"])).toBe("Will create p-1 and p-2");
    expect(describeMembersToCreate(["p-1"])).toBe("Will create p-1");
    expect(describeMembersToCreate([])).toBe("Will create no member");
    expect(describeMembersToCreate(["p-1", "p-2", "p-3"], false)).toBe("Would create p-1 … p-3");
  });
});

// ---------- Create progress ----------

const started: CreateProgress = {
  kind: "started",
  namespace: "corral-vms",
  pool: "devpool",
  golden: "golden-desktop",
  members: ["devpool-1", "devpool-2", "devpool-3"],
  cloneApiVersion: "v1beta1",
  runId: "run-1",
};

function report(
  memberName: string,
  step: MemberProgress["step"],
  overrides: Partial<MemberProgress> = {},
): CreateProgress {
  return {
    kind: "member",
    member: memberName,
    clone: `corral-vdi-clone-${memberName}`,
    step,
    phase: null,
    message: null,
    done: step === "done" || step === "failed",
    error: null,
    elapsedMs: 100,
    ...overrides,
  };
}

function fold(run: CreateRun, events: CreateProgress[]): CreateRun {
  return events.reduce(applyCreateProgress, run);
}

function status(run: CreateRun, name: string): MemberStatus | undefined {
  return run.members.find((m) => m.member === name);
}

describe("applyCreateProgress", () => {
  const initial = newCreateRun("corral-vms", "devpool", ["devpool-1", "devpool-2", "devpool-3"]);

  it("starts with every member queued", () => {
    expect(initial.started).toBeNull();
    expect(initial.members.map((m) => [m.member, m.step, m.done, m.elapsedMs])).toEqual([
      ["devpool-1", "queued", false, null],
      ["devpool-2", "queued", false, null],
      ["devpool-3", "queued", false, null],
    ]);
    expect(tallyCreateRun(initial)).toEqual({ total: 3, finished: 0, succeeded: 0, failed: 0 });
  });

  it("takes the members the backend announces", () => {
    const run = applyCreateProgress(newCreateRun("corral-vms", "devpool", ["devpool-1"]), started);
    expect(run.started).toEqual({
      namespace: "corral-vms",
      pool: "devpool",
      golden: "golden-desktop",
      members: ["devpool-1", "devpool-2", "devpool-3"],
      cloneApiVersion: "v1beta1",
      runId: "run-1",
    });
    expect(run.members.map((m) => m.member)).toEqual(["devpool-1", "devpool-2", "devpool-3"]);
  });

  it("keeps what was reported before the announcement", () => {
    const run = fold(initial, [report("devpool-2", "cloneCreated"), started]);
    expect(status(run, "devpool-2")?.step).toBe("cloneCreated");
  });

  it("follows each member's steps, last phase and message", () => {
    const run = fold(initial, [
      started,
      report("devpool-1", "cloneCreated", { elapsedMs: 50 }),
      report("devpool-1", "cloning", {
        phase: "SnapshotInProgress",
        message: "Waiting for the snapshot",
        elapsedMs: 900,
      }),
      report("devpool-2", "cloning", { phase: "RestoreInProgress", elapsedMs: 1_000 }),
      report("devpool-1", "labelling", { elapsedMs: 2_000 }),
      report("devpool-1", "done", { elapsedMs: 2_100 }),
    ]);
    expect(status(run, "devpool-1")).toEqual({
      member: "devpool-1",
      clone: "corral-vdi-clone-devpool-1",
      step: "done",
      // The last phase reported stays after the clone (labelling and done report none).
      phase: "SnapshotInProgress",
      message: null,
      error: null,
      done: true,
      elapsedMs: 2_100,
    });
    expect(status(run, "devpool-2")).toMatchObject({
      step: "cloning",
      phase: "RestoreInProgress",
      done: false,
    });
    expect(status(run, "devpool-3")?.step).toBe("queued");
    expect(tallyCreateRun(run)).toEqual({ total: 3, finished: 1, succeeded: 1, failed: 0 });
  });

  it("counts failures as finished", () => {
    const run = fold(initial, [
      started,
      report("devpool-1", "done"),
      report("devpool-2", "failed", {
        phase: "Failed",
        error: "clone corral-vdi-clone-devpool-2 failed: restore failed",
      }),
    ]);
    expect(status(run, "devpool-2")).toMatchObject({
      step: "failed",
      done: true,
      error: "clone corral-vdi-clone-devpool-2 failed: restore failed",
    });
    const tally = tallyCreateRun(run);
    expect(tally).toEqual({ total: 3, finished: 2, succeeded: 1, failed: 1 });
    expect(describeTally(tally)).toBe("2 of 3 members finished (1 failed)");
  });

  it("ignores a report arriving after its member finished", () => {
    const run = fold(initial, [
      started,
      report("devpool-1", "done", { elapsedMs: 500 }),
      report("devpool-1", "labelling", { elapsedMs: 400 }),
    ]);
    expect(status(run, "devpool-1")).toMatchObject({ step: "done", elapsedMs: 500 });
  });

  it("ignores reports about another pool or an unannounced member", () => {
    const other: CreateProgress = { ...started, pool: "lab", members: ["lab-1"] };
    const elsewhere: CreateProgress = { ...started, namespace: "other" };
    const run = fold(initial, [started, other, elsewhere, report("lab-1", "cloning")]);
    expect(run.started?.pool).toBe("devpool");
    expect(run.started?.namespace).toBe("corral-vms");
    expect(run.members.map((m) => m.member)).toEqual(["devpool-1", "devpool-2", "devpool-3"]);
  });

  it("adds members reported before any announcement", () => {
    const run = applyCreateProgress(
      newCreateRun("corral-vms", "devpool", []),
      report("devpool-1", "cloneCreated"),
    );
    expect(run.members.map((m) => m.member)).toEqual(["devpool-1"]);
  });

  it("does not change the run it is given", () => {
    const before = JSON.stringify(initial);
    fold(initial, [started, report("devpool-1", "done")]);
    expect(JSON.stringify(initial)).toBe(before);
  });
});

describe("finishCreateRun", () => {
  const created: PoolCreated = {
    namespace: "corral-vms",
    name: "devpool",
    golden: "golden-desktop",
    members: ["devpool-1", "devpool-2", "devpool-3"],
    cloneApiVersion: "v1beta1",
    entitled: [],
    elapsedMs: 4_200,
    warnings: [],
  };

  it("marks every member made as done, keeping reported times", () => {
    const run = fold(newCreateRun("corral-vms", "devpool", ["devpool-1", "devpool-2"]), [
      started,
      report("devpool-1", "done", { elapsedMs: 3_000 }),
      report("devpool-2", "labelling", { elapsedMs: 3_500 }),
    ]);
    const finished = finishCreateRun(run, created);
    expect(finished.members.map((m) => [m.member, m.step, m.done, m.elapsedMs])).toEqual([
      ["devpool-1", "done", true, 3_000],
      ["devpool-2", "done", true, 3_500],
      ["devpool-3", "done", true, 4_200],
    ]);
    expect(tallyCreateRun(finished)).toEqual({ total: 3, finished: 3, succeeded: 3, failed: 0 });
  });

  it("adds members that were never reported", () => {
    const finished = finishCreateRun(newCreateRun("corral-vms", "devpool", []), created);
    expect(finished.members.map((m) => m.member)).toEqual(["devpool-1", "devpool-2", "devpool-3"]);
    expect(describeTally(tallyCreateRun(finished))).toBe("3 of 3 members finished");
  });
});

describe("memberElapsedMs", () => {
  const base: MemberStatus = {
    member: "devpool-1",
    clone: null,
    step: "cloning",
    phase: null,
    message: null,
    error: null,
    done: false,
    elapsedMs: 1_000,
  };

  it("is the time of the last report once the member finished", () => {
    expect(memberElapsedMs({ ...base, step: "done", done: true }, 9_000)).toBe(1_000);
  });

  it("runs with the create until then", () => {
    expect(memberElapsedMs(base, 9_000)).toBe(9_000);
    expect(memberElapsedMs({ ...base, elapsedMs: null }, 2_000)).toBe(2_000);
    // A report ahead of the local clock is not taken back.
    expect(memberElapsedMs(base, 500)).toBe(1_000);
  });

  it("is the last report, if any, when the run is over", () => {
    expect(memberElapsedMs(base, null)).toBe(1_000);
    expect(memberElapsedMs({ ...base, elapsedMs: null }, null)).toBeNull();
  });
});

describe("steps", () => {
  it("have a wording and a tone each", () => {
    expect(stepLabel("cloneCreated")).toBe("Clone created");
    expect(stepLabel("failed")).toBe("Failed");
    expect(stepTone("queued")).toBe("grey");
    expect(stepTone("cloning")).toBe("blue");
    expect(stepTone("done")).toBe("green");
    expect(stepTone("failed")).toBe("red");
  });
});

describe("formatPoolCreated", () => {
  const created: PoolCreated = {
    namespace: "corral-vms",
    name: "devpool",
    golden: "golden-desktop",
    members: ["devpool-1", "devpool-2", "devpool-3"],
    cloneApiVersion: "v1beta1",
    entitled: [],
    elapsedMs: 4_200,
    warnings: [],
  };

  it("names the pool and counts its members", () => {
    expect(formatPoolCreated(created)).toBe('pool "devpool" created: 3 members');
    expect(formatPoolCreated({ ...created, members: ["devpool-1"] })).toBe(
      'pool "devpool" created: 1 member',
    );
  });
});

// ---------- Delete ----------

const assigned = (
  holder: string,
  state: MemberView["state"] = "assigned",
): Partial<MemberView> => ({
  state,
  stateLabel: state,
  claimable: false,
  holder,
});

describe("isAssigned / assignedMembers", () => {
  it("counts every state but free and free (stale lease)", () => {
    expect(isAssigned(member("a"))).toBe(false);
    expect(isAssigned(member("a", { state: "freeStaleLease", holder: "bob" }))).toBe(false);
    for (const state of [
      "assigned",
      "assignedLegacy",
      "assignedLeaseExpired",
      "claiming",
    ] as const) {
      expect(isAssigned(member("a", assigned("alice", state)))).toBe(true);
    }
  });

  it("lists the assigned members in pool order", () => {
    const view = pool("devpool", [
      member("devpool-1", assigned("alice")),
      member("devpool-2"),
      member("devpool-3", assigned("bob", "assignedLegacy")),
      member("devpool-4", { state: "freeStaleLease", holder: "carol" }),
    ]);
    expect(assignedMembers(view).map((m) => [m.name, m.holder])).toEqual([
      ["devpool-1", "alice"],
      ["devpool-3", "bob"],
    ]);
    expect(assignedMembers(pool("empty", []))).toEqual([]);
  });
});

describe("describeAssigned", () => {
  it("names who would lose a desktop", () => {
    expect(describeAssigned([])).toBe("");
    expect(describeAssigned([member("devpool-1", assigned("alice"))])).toBe(
      "devpool-1 is assigned to alice.",
    );
    expect(
      describeAssigned([
        member("devpool-1", assigned("alice")),
        member("devpool-3", { ...assigned("bob", "claiming"), holder: null }),
      ]),
    ).toBe("2 members are assigned: devpool-1 (alice), devpool-3 (unknown holder).");
  });
});

describe("deleteBlocker", () => {
  it("needs the pool name typed exactly", () => {
    expect(deleteBlocker("devpool", "", 0, false)).toBe('Type the pool name "devpool" to confirm.');
    expect(deleteBlocker("devpool", "devpoo", 0, false)).not.toBeNull();
    expect(deleteBlocker("devpool", "devpool ", 0, false)).not.toBeNull();
    expect(deleteBlocker("devpool", "DEVPOOL", 0, false)).not.toBeNull();
    expect(deleteBlocker("devpool", "devpool", 0, false)).toBeNull();
  });

  it("needs force while members are assigned", () => {
    expect(deleteBlocker("devpool", "devpool", 1, false)).toBe(
      '1 member is assigned: tick "Delete assigned members too" to delete it as well.',
    );
    expect(deleteBlocker("devpool", "devpool", 2, false)).toBe(
      '2 members are assigned: tick "Delete assigned members too" to delete them as well.',
    );
    expect(deleteBlocker("devpool", "devpool", 2, true)).toBeNull();
    // The name comes first.
    expect(deleteBlocker("devpool", "x", 2, true)).toBe('Type the pool name "devpool" to confirm.');
  });
});

describe("formatPoolDeleted", () => {
  const deleted: PoolDeleted = {
    namespace: "corral-vms",
    name: "devpool",
    members: ["devpool-1", "devpool-2", "devpool-3"],
    leases: ["corral-vdi-devpool-1", "corral-vdi-devpool-3"],
    clones: [],
    unlabelled: [],
    forced: [],
    leftAlone: [],
  };

  it("counts what was removed", () => {
    expect(formatPoolDeleted(deleted)).toBe(
      "deleted pool devpool: 3 members, 2 Leases, 0 clone objects",
    );
    expect(
      formatPoolDeleted({
        ...deleted,
        members: ["devpool-1"],
        leases: ["corral-vdi-devpool-1"],
        clones: ["corral-vdi-clone-devpool-2"],
      }),
    ).toBe("deleted pool devpool: 1 member, 1 Lease, 1 clone object");
  });

  it("names the members taken from their users", () => {
    expect(
      formatPoolDeleted({ ...deleted, forced: ["devpool-1 (alice)", "devpool-3 (bob)"] }),
    ).toBe(
      "deleted pool devpool: 3 members, 2 Leases, 0 clone objects; taken from their users: devpool-1 (alice), devpool-3 (bob)",
    );
  });

  it("names what claimed to belong but was left alone, and why", () => {
    expect(
      formatPoolDeleted({
        ...deleted,
        leftAlone: [
          'VirtualMachine golden-desktop (named by clone object "planted", but without the corral.dev/vdi-cloned-by mark our clones write)',
          "Lease other (labelled with the pool, but not the claim Lease corral-vdi-<member> of a VM deleted here)",
        ],
      }),
    ).toBe(
      'deleted pool devpool: 3 members, 2 Leases, 0 clone objects; not ours, left alone: VirtualMachine golden-desktop (named by clone object "planted", but without the corral.dev/vdi-cloned-by mark our clones write); Lease other (labelled with the pool, but not the claim Lease corral-vdi-<member> of a VM deleted here)',
    );
  });
});

describe("filterPools", () => {
  const pools = [
    pool("sec", [
      member("sec-1", { holder: "alice", stateLabel: "assigned" }),
      member("sec-2", { stateLabel: "free" }),
    ]),
    pool("devpool", [member("devpool-1", { holder: "bob", stateLabel: "assigned" })], "team-b"),
  ];

  it("keeps everything for an empty query", () => {
    expect(filterPools(pools, "  ")).toBe(pools);
  });

  it("keeps a pool whole when its name or namespace matches", () => {
    expect(filterPools(pools, "SEC").map((p) => [p.name, p.members.length])).toEqual([["sec", 2]]);
    expect(filterPools(pools, "team-b").map((p) => p.name)).toEqual(["devpool"]);
  });

  it("keeps only the matching members otherwise, by name, holder or state", () => {
    expect(filterPools(pools, "alice").map((p) => p.members.map((m) => m.name))).toEqual([
      ["sec-1"],
    ]);
    expect(filterPools(pools, "free").map((p) => p.members.map((m) => m.name))).toEqual([
      ["sec-2"],
    ]);
    expect(filterPools(pools, "nobody")).toEqual([]);
  });

  it("says what the filter shows", () => {
    const shown = filterPools(pools, "bob");
    expect(describeFilter(shown, pools, " bob ")).toBe('1 of 2 pools, 1 member match "bob"');
  });

  it("matches a whole field for a quoted query, as a state's count asks", () => {
    const legacy = [
      pool("legacy", [
        member("legacy-1", { holder: "carol", stateLabel: "assigned" }),
        member("legacy-2", { holder: "alice", stateLabel: "assigned (legacy, label-only)" }),
      ]),
    ];
    const names = (query: string) =>
      filterPools(legacy, query).flatMap((p) => p.members.map((m) => m.name));
    expect(names("assigned")).toEqual(["legacy-1", "legacy-2"]);
    expect(names(stateQuery("assigned"))).toEqual(["legacy-1"]);
    expect(names(' "Assigned (legacy, label-only)" ')).toEqual(["legacy-2"]);
    expect(names('"assign"')).toEqual([]);
    expect(
      describeFilter(filterPools(legacy, stateQuery("assigned")), legacy, stateQuery("assigned")),
    ).toBe('1 of 1 pool, 1 member match exactly "assigned"');
  });
});

describe("sortPools", () => {
  const held = { claimable: false, state: "assigned" as const, stateLabel: "assigned" };
  const a = pool("a", [member("a-1"), member("a-2", held)]);
  const b = pool("b", [member("b-1"), member("b-2"), member("b-3")]);
  const c = pool("c", [member("c-1", held)]);
  const d = pool("d", [member("d-1")]);
  const all = [a, b, c, d];
  const names = (pools: readonly PoolView[]) => pools.map((p) => p.name);

  it("keeps the backend's order for name (the same array)", () => {
    expect(sortPools(all, "name")).toBe(all);
  });

  it("orders by free members, ties by name", () => {
    expect(names(sortPools(all, "mostFree"))).toEqual(["b", "a", "d", "c"]);
    expect(names(sortPools(all, "fewestFree"))).toEqual(["c", "a", "d", "b"]);
  });

  it("orders by size, ties by name", () => {
    expect(names(sortPools(all, "largest"))).toEqual(["b", "a", "c", "d"]);
  });

  it("parses only the orders it offers", () => {
    expect(parsePoolOrder("largest")).toBe("largest");
    expect(parsePoolOrder("size")).toBe("name");
    expect(parsePoolOrder(null)).toBe("name");
  });
});

describe("stateTotals", () => {
  it("counts members per state, by the state's name whatever the counts", () => {
    const pools = [
      pool("a", [member("a-1"), member("a-2", { stateLabel: "assigned" })]),
      pool("b", [member("b-1"), member("b-2", { stateLabel: "claiming" })]),
    ];
    expect(stateTotals(pools)).toEqual([
      { label: "assigned", count: 1 },
      { label: "claiming", count: 1 },
      { label: "free", count: 2 },
    ]);
    expect(stateTotals([])).toEqual([]);
  });
});
