/**
 * Pure helpers for the claim actions (Get a desktop, Assign, Unassign/Release). Nothing here
 * decides who may claim or release what: the backend judges that on every call. These only
 * pick what to offer and word what the backend answered.
 */
import type { Claimed } from "../bindings/Claimed";
import type { MemberView } from "../bindings/MemberView";
import type { PoolView } from "../bindings/PoolView";
import type { PowerAction } from "../bindings/PowerAction";
import type { Released } from "../bindings/Released";
import type { Scope } from "../bindings/Scope";
import { describeScope } from "./presentation";

/** A member held by the current identity, with the pool it belongs to. */
export type MyDesktop = {
  namespace: string;
  pool: string;
  member: MemberView;
};

/**
 * Every member of `pools` whose holder is exactly `username`, across pools, in the snapshot's
 * order (pools by namespace and name, members by index). None when the identity is unknown.
 */
export function myDesktops(pools: readonly PoolView[], username: string | null): MyDesktop[] {
  if (username === null || username === "") {
    return [];
  }
  const mine: MyDesktop[] = [];
  for (const pool of pools) {
    for (const member of pool.members) {
      if (member.holder === username) {
        mine.push({ namespace: pool.namespace, pool: pool.name, member });
      }
    }
  }
  return mine;
}

/** A pool offered by "Get a desktop". */
export type PoolChoice = {
  /** `<namespace>/<pool>`, unique in a snapshot. */
  key: string;
  namespace: string;
  pool: string;
  free: number;
  /** "devpool (corral-vms, 2 free)". */
  label: string;
};

/** The key of a pool, unique across namespaces. */
export function poolKey(namespace: string, pool: string): string {
  return `${namespace}/${pool}`;
}

/** The pools with at least one free member, in the snapshot's order. */
export function claimablePools(pools: readonly PoolView[]): PoolChoice[] {
  return pools
    .filter((p) => p.counts.free > 0)
    .map((p) => ({
      key: poolKey(p.namespace, p.name),
      namespace: p.namespace,
      pool: p.name,
      free: p.counts.free,
      label: `${p.name} (${p.namespace}, ${p.counts.free} free)`,
    }));
}

/**
 * The pool "Get a desktop" would claim from: the one selected if it is still offered (a new
 * snapshot may have taken its last free member), else the first offered; null when none is.
 */
export function chooseClaimPool(
  choices: readonly PoolChoice[],
  selectedKey: string | null,
): PoolChoice | null {
  return choices.find((c) => c.key === selectedKey) ?? (choices.length > 0 ? choices[0] : null);
}

/** Why "Get a desktop" cannot be used right now, or null when it can. */
export function getDesktopBlocker(
  identityKnown: boolean,
  choices: readonly PoolChoice[],
  scope: Scope,
): string | null {
  if (!identityKnown) {
    return "Your identity is unknown (the cluster did not say who you are), so no desktop can be claimed for you.";
  }
  if (choices.length === 0) {
    return `No pool in ${describeScope(scope)} has a free member right now.`;
  }
  return null;
}

/** Whether a member row offers "Unassign": it has a holder and is not plain free. */
export function canUnassign(member: MemberView): boolean {
  return member.holder !== null && member.holder !== "" && member.state !== "free";
}

/** What a pool's "Assign…" button says when hovered, and whether it is usable. */
export function assignAvailability(pool: PoolView): { enabled: boolean; title: string } {
  if (pool.counts.free > 0) {
    const n = pool.counts.free;
    return {
      enabled: true,
      title: `Hand a free member of ${pool.name} to a user (${n} free)`,
    };
  }
  return {
    enabled: false,
    title:
      pool.counts.total === 0
        ? `${pool.name} has no members to assign`
        : `No member of ${pool.name} is free to assign`,
  };
}

/** Keys of running actions (claims and pool create/delete), so that each button knows whether it is busy. */
export const actionKeys = {
  claim: "claim",
  assign: (namespace: string, pool: string) => `assign:${poolKey(namespace, pool)}`,
  release: (namespace: string, member: string) => `release:${namespace}/${member}`,
  createPool: (namespace: string) => `create-pool:${namespace}`,
  deletePool: (namespace: string, pool: string) => `delete-pool:${poolKey(namespace, pool)}`,
} as const;

/** What was done to a VM's power, as a short phrase: "started", "already stopped", … */
export function describePower(power: PowerAction): string {
  switch (power.kind) {
    case "started":
      return "started";
    case "alreadyRunning":
      return power.reason === "" ? "already running" : `already running: ${power.reason}`;
    case "stopped":
      return "stopping";
    case "alreadyStopped":
      return "already stopped";
  }
}

function plural(n: number, one: string, many: string): string {
  return n === 1 ? one : many;
}

/**
 * One line about a successful claim: "assigned devpool-1 → alice (started)", with
 * ", already yours" (or "already held by …" for an administrator's assign) when the claim was
 * resumed, and the races lost to other claimants when there were any.
 */
export function formatClaimed(claimed: Claimed, how: "claim" | "assign"): string {
  let text = `assigned ${claimed.member} → ${claimed.identity} (${describePower(claimed.power)})`;
  if (claimed.resumed) {
    text += how === "claim" ? ", already yours" : `, already held by ${claimed.identity}`;
  }
  if (claimed.racesLost > 0) {
    const n = claimed.racesLost;
    text += `; lost ${n} ${plural(n, "race", "races")} to other claimants first`;
  }
  return text;
}

/** One line about a successful release: "released devpool-1 (was alice), VM stopping". */
export function formatReleased(released: Released): string {
  const was =
    released.previousHolder === null || released.previousHolder === ""
      ? "it had no holder"
      : `was ${released.previousHolder}`;
  let text = `released ${released.member} (${was}), VM ${describePower(released.power)}`;
  if (!released.leaseReleased && !released.labelRemoved) {
    text += "; there was no Lease or label to remove";
  }
  return text;
}
