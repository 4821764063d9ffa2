import { describe, expect, it } from "vitest";
import { adminPermissions, member, pool as fixturePool, userPermissions } from "./fixtures";
import type { ClaimProgress, Claimed, MemberView, PoolView, Released } from "../bindings";
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
  myDesktops,
  poolKey,
  releaseOffer,
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
      },
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

describe("releaseOffer", () => {
  const active = (holder: string): Partial<MemberView> => ({
    ...held(holder),
    labelHolder: holder,
    lease: {
      holder,
      acquiredAt: "2026-11-30T12:00:00Z",
      renewedAt: "2026-11-30T12:00:00Z",
      durationSeconds: 3600,
      expiresAt: "2026-11-30T13:00:00Z",
      active: true,
      renewTimeInFuture: false,
      transitions: 0,
      resourceVersion: "1",
      problem: null,
    },
  });

  it("offers nothing on free members", () => {
    expect(releaseOffer(member("m"), "alice", userPermissions())).toEqual({ kind: "none" });
  });

  it("lets the holder release her own claim", () => {
    expect(releaseOffer(member("m", active("alice")), "alice", userPermissions())).toEqual({
      kind: "release",
      enabled: true,
      reason: null,
    });
  });

  it("offers someone else's active claim as a force release, to administrators only", () => {
    const bobs = member("m", active("bob"));
    expect(releaseOffer(bobs, "admin", adminPermissions())).toEqual({
      kind: "force",
      enabled: true,
      reason: null,
    });
    const offer = releaseOffer(bobs, "alice", userPermissions());
    expect(offer.kind).toBe("force");
    expect(offer.kind !== "none" && offer.enabled).toBe(false);
    // The time as everywhere else: local, to the second, with the zone.
    expect(offer.kind !== "none" && offer.reason).toMatch(
      /^Claimed by bob until 2026-11-30 \d\d:\d\d:00 UTC([+-]\d\d:\d\d)?; only bob can release it/,
    );
  });

  it("treats an unreadable claim as possibly live: its holder releases it, others must force", () => {
    const lease = active("bob").lease;
    const unreadable = member("m", {
      ...active("bob"),
      state: "unreadable",
      lease: lease
        ? {
            ...lease,
            active: false,
            renewedAt: null,
            expiresAt: null,
            problem: "renewTime 9999-12-31T23:59:59.000000Z is out of range",
          }
        : null,
    });
    expect(releaseOffer(unreadable, "bob", userPermissions())).toEqual({
      kind: "release",
      enabled: true,
      reason: null,
    });
    const offer = releaseOffer(unreadable, "alice", userPermissions());
    expect(offer.kind).toBe("force");
    expect(offer.kind !== "none" && offer.reason).toMatch(
      /^Claimed by bob until an unknown time \(its Lease cannot be read: renewTime 9999-12-31T23:59:59.000000Z is out of range\)/,
    );
  });

  it("leaves a conflict to administrators", () => {
    const conflict = member("m", {
      ...active("alice"),
      state: "conflict",
      labelHolder: "bob",
    });
    expect(releaseOffer(conflict, "admin", adminPermissions())).toEqual({
      kind: "release",
      enabled: true,
      reason: null,
    });
    const offer = releaseOffer(conflict, "alice", userPermissions());
    expect(offer.kind !== "none" && offer.reason).toBe(
      "The label names bob but the Lease is held by alice: an administrator (corral-vdi:admins) resolves this conflict.",
    );
  });

  it("leaves label-only members to the person they name under the guard", () => {
    const legacy = member("m", { ...held("carol"), state: "assignedLegacy", labelHolder: "carol" });
    expect(releaseOffer(legacy, "carol", userPermissions())).toMatchObject({ enabled: true });
    expect(releaseOffer(legacy, "bob", userPermissions())).toMatchObject({ enabled: false });
    expect(releaseOffer(legacy, "bob", userPermissions({ guarded: false }))).toMatchObject({
      enabled: true,
    });
  });

  it("is disabled while the identity is unknown", () => {
    expect(releaseOffer(member("m", active("alice")), null, null)).toMatchObject({
      enabled: false,
    });
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
    expect(describePower({ kind: "brokerStops" })).toBe("the broker stops it");
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
    expect(
      formatReleased({ ...released, labelRemoved: false, power: { kind: "brokerStops" } }),
    ).toBe("released devpool-1 (was alice), the broker stops its VM");
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
