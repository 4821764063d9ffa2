import { describe, expect, it } from "vitest";
import { adminPermissions, member, pool as fixturePool, userPermissions } from "./fixtures";
import type {
  ClaimProgress,
  Claimed,
  MemberOffers,
  MemberView,
  PoolView,
  Released,
  Scope,
} from "../bindings";
import {
  actionKeys,
  assignAvailability,
  canUnassign,
  chooseClaimPool,
  claimablePools,
  matchClaimPools,
  describePower,
  formatClaimed,
  formatReleased,
  claimStepFor,
  isClaimAction,
  getDesktopBlocker,
  mayClaimFrom,
  type Entitled,
  myDesktops,
  poolKey,
  releaseButton,
  deniedActions,
} from "./claims";

function pool(namespace: string, name: string, members: MemberView[]): PoolView {
  return fixturePool(
    name,
    members.map((m) => ({ ...m, namespace })),
    namespace,
  );
}

const held = (holder: string): Partial<MemberView> => ({
  state: "assigned",
  stateLabel: "assigned",
  claimable: false,
  holder,
  power: "Running",
});

const pools: PoolView[] = [
  pool("corral-vms", "devpool", [
    member("devpool-1", held("alice")),
    member("devpool-2"),
    member("devpool-3", held("bob")),
  ]),
  pool("corral-vms", "legacy", [
    member("legacy-1", { ...held("alice"), state: "assignedLegacy" }),
    member("legacy-2", held("alice@example.com")),
  ]),
  pool("team-b", "full", [member("full-1", held("carol"))]),
  pool("team-b", "empty", []),
];

describe("myDesktops", () => {
  it("lists the members held by the identity across pools, in order", () => {
    const mine = myDesktops(pools, "alice");
    expect(mine.map((d) => [d.namespace, d.pool, d.member.name])).toEqual([
      ["corral-vms", "devpool", "devpool-1"],
      ["corral-vms", "legacy", "legacy-1"],
    ]);
  });

  it("matches the identity exactly", () => {
    expect(myDesktops(pools, "alice@example.com").map((d) => d.member.name)).toEqual(["legacy-2"]);
    expect(myDesktops(pools, "Alice")).toEqual([]);
    expect(myDesktops(pools, "ali")).toEqual([]);
  });

  it("is empty when the identity is unknown or holds nothing", () => {
    expect(myDesktops(pools, null)).toEqual([]);
    expect(myDesktops(pools, "")).toEqual([]);
    expect(myDesktops(pools, "dave")).toEqual([]);
    expect(myDesktops([], "alice")).toEqual([]);
  });
});

describe("claimablePools", () => {
  it("offers only pools with free members, labelled with namespace and count", () => {
    expect(claimablePools(pools)).toEqual([
      {
        key: "corral-vms/devpool",
        namespace: "corral-vms",
        pool: "devpool",
        free: 1,
        label: "devpool (corral-vms, 1 free)",
        managed: false,
      },
    ]);
  });

  it("offers what the backend judged free for you, and names your dedicated desktop", () => {
    const dedicated = pool("corral-vms", "ded", [member("ded-1"), member("ded-2")]);
    // Both free, but both owned by others: nothing for you.
    const others = { ...dedicated, offer: { free: 0, yours: null } };
    expect(claimablePools([others])).toEqual([]);
    const yours = { ...dedicated, offer: { free: 1, yours: "ded-2" } };
    expect(claimablePools([yours]).map((c) => [c.label, c.free])).toEqual([
      ["ded (corral-vms, your desktop ded-2)", 1],
    ]);
  });

  it("tells pools of the same name in different namespaces apart", () => {
    const choices = claimablePools([
      pool("a", "lab", [member("lab-1")]),
      pool("b", "lab", [member("lab-1"), member("lab-2")]),
    ]);
    expect(choices.map((c) => c.key)).toEqual(["a/lab", "b/lab"]);
    expect(choices.map((c) => c.label)).toEqual(["lab (a, 1 free)", "lab (b, 2 free)"]);
  });

  it("offers only the pools RBAC entitles you to, all while that is not known", () => {
    const shown = [
      pool("a", "lab", [member("lab-1")]),
      pool("a", "eng", [member("eng-1")]),
      pool("b", "lab", [member("lab-1")]),
      pool("c", "any", [member("any-1")]),
    ];
    const keys = (entitled: Entitled | null) => claimablePools(shown, entitled).map((c) => c.key);
    expect(keys(null)).toEqual(["a/lab", "a/eng", "b/lab", "c/any"]);
    const entitled: Entitled = [
      { namespace: "a", every: false, pools: ["lab"] },
      { namespace: "b", every: false, pools: [] },
      { namespace: "c", every: true, pools: [] },
    ];
    expect(keys(entitled)).toEqual(["a/lab", "c/any"]);
    // A namespace the answer does not name yet is every pool's: the cluster judges the claim.
    expect(mayClaimFrom(entitled, "d", "x")).toBe(true);
    expect(mayClaimFrom(entitled, "a", "eng")).toBe(false);
  });
});

describe("getDesktopBlocker with entitlements", () => {
  it("says when free pools are there but none is for you", () => {
    const scope: Scope = { kind: "namespace", namespace: "corral-vms" };
    expect(getDesktopBlocker(true, [], scope, 2)).toContain(
      "2 pools have free members, but RBAC does not entitle you to claim from them",
    );
    expect(getDesktopBlocker(true, [], scope, 0)).toContain("has a free member right now");
  });
});

describe("matchClaimPools", () => {
  const choices = claimablePools([
    pool("corral-vms", "lab", [member("lab-1")]),
    pool("corral-vms", "Design", [member("design-1")]),
    pool("team-b", "lab", [member("lab-1")]),
  ]);
  const keys = (query: string) => matchClaimPools(choices, query).map((c) => c.key);

  it("offers every pool, in order, for an empty or blank query", () => {
    expect(keys("")).toEqual(["corral-vms/lab", "corral-vms/Design", "team-b/lab"]);
    expect(keys("  ")).toEqual(keys(""));
  });

  it("finds pools by name, namespace or both, ignoring case and surrounding spaces", () => {
    expect(keys("LA")).toEqual(["corral-vms/lab", "team-b/lab"]);
    expect(keys(" design ")).toEqual(["corral-vms/Design"]);
    expect(keys("team-b")).toEqual(["team-b/lab"]);
    expect(keys("corral-vms/la")).toEqual(["corral-vms/lab"]);
  });

  it("finds nothing for a name no pool has", () => {
    expect(keys("nosuch")).toEqual([]);
  });
});

describe("chooseClaimPool", () => {
  const choices = claimablePools([
    pool("a", "lab", [member("lab-1")]),
    pool("b", "lab", [member("lab-1")]),
  ]);

  it("keeps the selected pool while it is offered", () => {
    expect(chooseClaimPool(choices, "b/lab")?.key).toBe("b/lab");
  });

  it("offers the first pool when nothing is selected", () => {
    expect(chooseClaimPool(choices, null)?.key).toBe("a/lab");
  });

  it("offers a managed pool before an unmanaged one when nothing is selected", () => {
    const mixed = claimablePools([
      pool("a", "legacy", [member("legacy-1")]),
      { ...pool("a", "managed", [member("managed-1")]), managed: true },
    ]);
    expect(chooseClaimPool(mixed, null)?.key).toBe("a/managed");
    expect(chooseClaimPool(mixed, "a/legacy")?.key).toBe("a/legacy");
  });

  it("never puts another pool in place of a selected one that is no longer offered", () => {
    expect(chooseClaimPool(choices, "c/gone")).toBeNull();
  });

  it("is null when no pool is offered", () => {
    expect(chooseClaimPool([], "a/lab")).toBeNull();
  });
});

describe("getDesktopBlocker", () => {
  const ns = { kind: "namespace" as const, namespace: "corral-vms" };
  const choices = claimablePools(pools);

  it("allows a claim with a known identity and a free pool", () => {
    expect(getDesktopBlocker(true, choices, ns)).toBeNull();
  });

  it("explains an unknown identity first", () => {
    expect(getDesktopBlocker(false, choices, ns)).toMatch(/identity is unknown/);
    expect(getDesktopBlocker(false, [], ns)).toMatch(/identity is unknown/);
  });

  it("explains that no pool has a free member, naming the scope", () => {
    expect(getDesktopBlocker(true, [], ns)).toBe(
      'No pool in namespace "corral-vms" has a free member right now.',
    );
    expect(getDesktopBlocker(true, [], { kind: "all" })).toBe(
      "No pool in any namespace has a free member right now.",
    );
  });
});

describe("canUnassign", () => {
  it("is offered for held members that are not free", () => {
    expect(canUnassign(member("m", held("alice")))).toBe(true);
    expect(canUnassign(member("m", { ...held("alice"), state: "assignedLegacy" }))).toBe(true);
    expect(canUnassign(member("m", { ...held("alice"), state: "claiming" }))).toBe(true);
    expect(canUnassign(member("m", { ...held("alice"), state: "freeStaleLease" }))).toBe(true);
  });

  it("is not offered for free or holderless members", () => {
    expect(canUnassign(member("m"))).toBe(false);
    expect(canUnassign(member("m", { state: "claiming", holder: null }))).toBe(false);
    expect(canUnassign(member("m", { state: "free", holder: "alice" }))).toBe(false);
    expect(canUnassign(member("m", { state: "assigned", holder: "" }))).toBe(false);
  });
});

describe("assignAvailability", () => {
  it("is enabled while a member is free", () => {
    for (const perms of [null, adminPermissions()]) {
      const a = assignAvailability(pools[0], perms);
      expect(a.enabled).toBe(true);
      expect(a.title).toBe("Hand a free member of devpool to a user (1 free)");
    }
  });

  it("explains why it is disabled", () => {
    expect(assignAvailability(pools[2], null)).toEqual({
      enabled: false,
      title: "No member of full is free to assign",
    });
    expect(assignAvailability(pools[3], null)).toEqual({
      enabled: false,
      title: "empty has no members to assign",
    });
  });

  it("is disabled with the cluster's reason for those who may not assign", () => {
    expect(assignAvailability(pools[0], userPermissions())).toEqual({
      enabled: false,
      title:
        "You may not assign desktops in corral-vms: only members of corral-vdi:admins may assign desktops to others",
    });
  });
});

describe("releaseButton", () => {
  const judged = (release: MemberOffers["release"]): Partial<MemberView> => ({
    ...held("bob"),
    offers: { release, connect: null },
  });

  it("shows the backend's judgment: nothing, a release, or a refusal with its reason", () => {
    expect(releaseButton(member("m", judged(null)), userPermissions())).toEqual({ kind: "none" });
    const yours = { force: false, offer: { allowed: true, reason: null, ask: null } };
    expect(releaseButton(member("m", judged(yours)), userPermissions())).toEqual({
      kind: "release",
      enabled: true,
      reason: null,
    });
    const refused = {
      force: false,
      offer: { allowed: false, reason: "Assigned to bob by label", ask: null },
    };
    expect(releaseButton(member("m", judged(refused)), userPermissions())).toEqual({
      kind: "release",
      enabled: false,
      reason: "Assigned to bob by label",
    });
  });

  it("lets a force release through only with the right to delete the Lease", () => {
    const force = {
      force: true,
      offer: {
        allowed: true,
        reason: "m is claimed by bob until 13:00; only bob can release it",
        ask: null,
      },
    };
    expect(releaseButton(member("m", judged(force)), adminPermissions())).toEqual({
      kind: "force",
      enabled: true,
      reason: null,
    });
    const refused = releaseButton(member("m", judged(force)), userPermissions());
    expect(refused.kind !== "none" && !refused.enabled).toBe(true);
    expect(refused.kind !== "none" && refused.reason).toMatch(/^m is claimed by bob until 13:00/);
  });

  it("releases nothing as an identity the cluster did not name", () => {
    const unknown = releaseButton(member("m", held("bob")), userPermissions());
    expect(unknown.kind !== "none" && unknown.enabled).toBe(false);
    expect(releaseButton(member("m"), userPermissions())).toEqual({ kind: "none" });
  });
});

describe("keys", () => {
  it("are unique per pool and member across namespaces", () => {
    expect(poolKey("a", "lab")).toBe("a/lab");
    expect(actionKeys.assign("a", "lab")).not.toBe(actionKeys.assign("b", "lab"));
    expect(actionKeys.release("a", "lab-1")).toBe("release:a/lab-1");
    expect(actionKeys.release("a", "lab-1")).not.toBe(actionKeys.release("b", "lab-1"));
    expect(actionKeys.deletePool("a", "lab")).toBe("delete-pool:a/lab");
    expect(actionKeys.deletePool("a", "lab")).not.toBe(actionKeys.deletePool("b", "lab"));
    expect(actionKeys.deletePool("a", "lab")).not.toBe(actionKeys.assign("a", "lab"));
    expect(actionKeys.createPool("a")).not.toBe(actionKeys.createPool("b"));
  });
});

describe("describePower", () => {
  it("words each power action", () => {
    expect(describePower({ kind: "started" })).toBe("started");
    expect(
      describePower({ kind: "alreadyRunning", reason: "printableStatus is already Running" }),
    ).toBe("no start needed: printableStatus is already Running");
    expect(describePower({ kind: "alreadyRunning", reason: "" })).toBe("no start needed");
    expect(describePower({ kind: "stopped" })).toBe("stopping");
    expect(describePower({ kind: "alreadyStopped" })).toBe("already stopped");
    expect(describePower({ kind: "brokerStarted" })).toBe("started by the broker");
    expect(
      describePower({
        kind: "brokerReleases",
        reason: { effect: { kind: "reset" }, words: "a fresh copy replaces it" },
      }),
    ).toBe("the broker acts: a fresh copy replaces it");
  });
});

describe("claim progress", () => {
  const step: ClaimProgress = {
    namespace: "corral-vms",
    pool: "devpool",
    member: "devpool-2",
    message: "granting: waiting for the broker to bind access and start devpool-2",
    reason: null,
    elapsedMs: 1200,
  };

  it("belongs to claims and assigns, not to releases or pool actions", () => {
    expect(isClaimAction(actionKeys.claim)).toBe(true);
    expect(isClaimAction(actionKeys.assign("corral-vms", "devpool"))).toBe(true);
    expect(isClaimAction(actionKeys.release("corral-vms", "devpool-1"))).toBe(false);
    expect(isClaimAction(actionKeys.deletePool("corral-vms", "devpool"))).toBe(false);
    expect(isClaimAction(actionKeys.createPool("corral-vms"))).toBe(false);
  });

  it("is shown for its own pool only", () => {
    expect(claimStepFor(step, "corral-vms", "devpool")).toBe(step.message);
    expect(claimStepFor(step, "corral-vms", "other")).toBeNull();
    expect(claimStepFor(step, "elsewhere", "devpool")).toBeNull();
    expect(claimStepFor(null, "corral-vms", "devpool")).toBeNull();
  });
});

describe("formatClaimed", () => {
  const claimed: Claimed = {
    namespace: "corral-vms",
    pool: "devpool",
    member: "devpool-1",
    identity: "alice",
    resumed: false,
    racesLost: 0,
    leaseExpiresAt: "2026-01-01T10:00:00Z",
    power: { kind: "started" },
  };

  it("says who got which member and what happened to its VM, in the act's words", () => {
    expect(formatClaimed(claimed, "assign")).toBe("assigned devpool-1 → alice (started)");
    expect(formatClaimed(claimed, "claim")).toBe("you got devpool-1 (started)");
  });

  it("says when the claim was resumed", () => {
    const resumed: Claimed = {
      ...claimed,
      resumed: true,
      power: { kind: "alreadyRunning", reason: "printableStatus is already Running" },
    };
    expect(formatClaimed(resumed, "claim")).toBe(
      "you already hold devpool-1 (no start needed: printableStatus is already Running)",
    );
    expect(formatClaimed(resumed, "assign")).toBe(
      "assigned devpool-1 → alice (no start needed: printableStatus is already Running), already held by alice",
    );
  });

  it("counts races lost, only when there were any", () => {
    expect(formatClaimed({ ...claimed, racesLost: 1 }, "claim")).toBe(
      "you got devpool-1 (started); lost 1 race to other claimants first",
    );
    expect(formatClaimed({ ...claimed, racesLost: 3, resumed: true }, "assign")).toBe(
      "assigned devpool-1 → alice (started), already held by alice; lost 3 races to other claimants first",
    );
  });
});

describe("formatReleased", () => {
  const released: Released = {
    namespace: "corral-vms",
    member: "devpool-1",
    previousHolder: "alice",
    leaseReleased: true,
    labelRemoved: true,
    power: { kind: "stopped" },
    forced: false,
  };

  it("says who held it and what happened to its VM", () => {
    expect(formatReleased(released)).toBe("released devpool-1 (was alice), VM stopping");
    const removed = {
      effect: { kind: "remove", size: 2 },
      words: "its VM and its disk are deleted and not replaced",
    } as const;
    expect(
      formatReleased({
        ...released,
        labelRemoved: false,
        power: { kind: "brokerReleases", reason: removed },
      }),
    ).toBe("released devpool-1 (was alice), its VM and its disk are deleted and not replaced");
    expect(formatReleased({ ...released, power: { kind: "alreadyStopped" } })).toBe(
      "released devpool-1 (was alice), VM already stopped",
    );
  });

  it("says when there was nothing to release", () => {
    expect(
      formatReleased({
        ...released,
        previousHolder: null,
        leaseReleased: false,
        labelRemoved: false,
        power: { kind: "alreadyStopped" },
      }),
    ).toBe(
      "released devpool-1 (it had no holder), VM already stopped; there was no Lease or label to remove",
    );
  });
});

describe("deniedActions", () => {
  it("names each denied pool action with the cluster's reason", () => {
    expect(deniedActions(userPermissions()).map((d) => d.action)).toEqual([
      "Assign…",
      "Delete…",
      "Force release…",
    ]);
    expect(deniedActions(userPermissions())[1].reason).toBe(
      "RBAC does not let you delete virtualmachines.kubevirt.io",
    );
    expect(deniedActions(adminPermissions())).toEqual([]);
  });
});
