/**
 * Pure helpers for the claim actions (Get a desktop, Assign, Unassign/Release). Nothing here
 * decides who may claim or release what: the backend judges that on every call. These only
 * pick what to offer and word what the backend answered.
 */
import type {
  ClaimProgress,
  Claimed,
  HistoryOf,
  MemberView,
  NamespaceEntitlements,
  Permissions,
  PoolView,
  PowerAction,
  Released,
  Scope,
} from "../bindings";
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
  /** Run by the broker (a DesktopPool): offered first when nothing is picked. */
  managed: boolean;
};

/** The key of a pool, unique across namespaces. */
export function poolKey(namespace: string, pool: string): string {
  return `${namespace}/${pool}`;
}

/**
 * Which pools you may claim from, per namespace (RBAC's `claim` on `desktoppools`), as the
 * backend read it; a namespace missing from it is not known yet.
 */
export type Entitled = readonly NamespaceEntitlements[];

/**
 * Whether `entitled` lets you claim from `pool` of `namespace`: yes while it is not known (the
 * cluster judges the claim), for every pool of a namespace entitled without names, and for the
 * pools it names.
 */
export function mayClaimFrom(entitled: Entitled | null, namespace: string, pool: string): boolean {
  const here = entitled?.find((e) => e.namespace === namespace);
  return here === undefined || here.every || here.pools.includes(pool);
}

/**
 * The free members a claim of yours may take from `pool`: what the backend judged for you
 * (`offer`: in a dedicated pool your own member or the unowned ones), else every free one.
 */
function freeForYou(pool: PoolView): number {
  return pool.offer?.free ?? pool.counts.free;
}

/**
 * The pools with at least one member free for you that you may claim from (`entitled`; all
 * while it is not known), in the snapshot's order; a dedicated pool where you own a member is
 * labelled with it ("your desktop dev-3").
 */
export function claimablePools(
  pools: readonly PoolView[],
  entitled: Entitled | null = null,
): PoolChoice[] {
  return pools
    .filter((p) => freeForYou(p) > 0 && mayClaimFrom(entitled, p.namespace, p.name))
    .map((p) => {
      const yours = p.offer?.yours ?? null;
      const free = freeForYou(p);
      return {
        key: poolKey(p.namespace, p.name),
        namespace: p.namespace,
        pool: p.name,
        free,
        label:
          yours !== null
            ? `${p.name} (${p.namespace}, your desktop ${yours})`
            : `${p.name} (${p.namespace}, ${free} free)`,
        managed: p.managed,
      };
    });
}

/**
 * The pool "Get a desktop" would claim from: the one selected while it is offered, and null
 * once a new snapshot has taken its last free member (never another pool in its place); with
 * nothing selected, the first managed pool offered (the broker runs it: warm members, renewal),
 * else the first offered; null when none is.
 */
export function chooseClaimPool(
  choices: readonly PoolChoice[],
  selectedKey: string | null,
): PoolChoice | null {
  if (selectedKey !== null) return choices.find((c) => c.key === selectedKey) ?? null;
  return choices.find((c) => c.managed) ?? (choices.length > 0 ? choices[0] : null);
}

/**
 * At most this many pools are listed under "Get a desktop" at once (a list that fits under the
 * box in the smallest window, 600 px high); typing narrows them.
 */
export const POOL_MATCHES_SHOWN = 12;

/**
 * The offered pools that `query` names, in order: those whose key (`<namespace>/<pool>`, so
 * the pool's name or its namespace or both) contains it, ignoring case and surrounding spaces.
 * An empty query matches every pool.
 */
export function matchClaimPools(
  choices: readonly PoolChoice[],
  query: string,
): readonly PoolChoice[] {
  const q = query.trim().toLowerCase();
  if (q === "") return choices;
  return choices.filter((c) => c.key.toLowerCase().includes(q));
}

/** Why "Get a desktop" cannot be used right now, or null when it can. */
export function getDesktopBlocker(
  identityKnown: boolean,
  choices: readonly PoolChoice[],
  scope: Scope,
  withheld = 0,
): string | null {
  if (!identityKnown) {
    return "Your identity is unknown (the cluster did not say who you are), so no desktop can be claimed for you.";
  }
  if (choices.length === 0 && withheld > 0) {
    return `No pool in ${describeScope(scope)} with a free member is for you: ${withheld === 1 ? "one pool has" : `${withheld} pools have`} free members, but RBAC does not entitle you to claim from ${withheld === 1 ? "it" : "them"}. Ask an administrator (corral-vdi pool entitle).`;
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

/** The release a member row offers the current identity, and whether it may use it. */
export type ReleaseButton =
  { kind: "none" } | { kind: "release" | "force"; enabled: boolean; reason: string | null };

/**
 * The release button of `member`'s row: the backend's judgment for your identity
 * (`member.offers`, the claim rules of vdi-core's `claim::offers`), with, for a force release,
 * whether RBAC lets you delete the Lease (`perms`, null while unknown). Without an identity
 * nothing can be released as you.
 */
export function releaseButton(member: MemberView, perms: Permissions | null): ReleaseButton {
  if (member.offers === null) {
    return canUnassign(member)
      ? {
          kind: "release",
          enabled: false,
          reason:
            "Your identity is unknown (the cluster did not say who you are), so nothing can be released as you.",
        }
      : { kind: "none" };
  }
  const release = member.offers.release;
  if (release === null) return { kind: "none" };
  const kind = release.force ? "force" : "release";
  if (!release.offer.allowed) return { kind, enabled: false, reason: release.offer.reason };
  if (release.force && !(perms?.forceRelease.allowed ?? false)) {
    const why = perms?.forceRelease.reason;
    return {
      kind,
      enabled: false,
      reason: `${release.offer.reason ?? "Someone else holds it"}${why ? ` (${why})` : ""}.`,
    };
  }
  return { kind, enabled: true, reason: null };
}

/**
 * What a pool's "Assign…" button says when hovered, and whether it is usable: not when the
 * identity may not assign desktops to others (`perms`, null while unknown), nor when no member
 * is free.
 */
export function assignAvailability(
  pool: PoolView,
  perms: Permissions | null,
): { enabled: boolean; title: string } {
  if (perms !== null && !perms.assign.allowed) {
    return {
      enabled: false,
      title: `You may not assign desktops in ${pool.namespace}: ${perms.assign.reason ?? "not allowed"}`,
    };
  }
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
  poolSettings: (namespace: string, pool: string) => `pool-settings:${poolKey(namespace, pool)}`,
  history: (namespace: string, of: HistoryOf) => `history:${namespace}/${of.kind}/${of.name}`,
  usage: (namespace: string, pool: string) => `usage:${poolKey(namespace, pool)}`,
  keep: (namespace: string, member: string) => `keep:${namespace}/${member}`,
} as const;

/** Whether `key` (see actionKeys) is a claim's — Get a desktop, or an administrator's
 * Assign… — whose wait for the broker's grant reports its steps. */
export function isClaimAction(key: string): boolean {
  return key === actionKeys.claim || key.startsWith("assign:");
}

/**
 * The step of a running claim to show for the pool `namespace`/`pool`, or null: the broker's
 * `progress` when it is that pool's claim.
 */
export function claimStepFor(
  progress: ClaimProgress | null,
  namespace: string,
  pool: string,
): string | null {
  if (progress === null || progress.namespace !== namespace || progress.pool !== pool) {
    return null;
  }
  return progress.message;
}

/** What was done to a VM's power, as a short phrase: "started", "already stopped", … */
export function describePower(power: PowerAction): string {
  switch (power.kind) {
    case "started":
      return "started";
    case "alreadyRunning":
      return power.reason === "" ? "no start needed" : `no start needed: ${power.reason}`;
    case "stopped":
      return "stopping";
    case "alreadyStopped":
      return "already stopped";
    case "alreadyStopping":
      return "already stopping";
    case "brokerStarted":
      return "started by the broker";
    case "brokerReleases":
      return `the broker acts: ${power.reason.words}`;
    case "leftAsIs":
      return `left as it is: ${power.reason}`;
  }
}

function plural(n: number, one: string, many: string): string {
  return n === 1 ? one : many;
}

/**
 * One line about a successful claim, in the words of the act: "Get a desktop" (`claim`) gives
 * "you got devpool-1 (started)", or "you already hold devpool-1 (…)" when it was yours already;
 * an administrator's Assign… gives "assigned devpool-1 → alice (started)", with ", already held
 * by alice" when it was. The races lost to other claimants follow when there were any.
 */
export function formatClaimed(claimed: Claimed, how: "claim" | "assign"): string {
  const power = describePower(claimed.power);
  let text: string;
  if (how === "claim") {
    text = claimed.resumed
      ? `you already hold ${claimed.member} (${power})`
      : `you got ${claimed.member} (${power})`;
  } else {
    text = `assigned ${claimed.member} → ${claimed.identity} (${power})`;
    if (claimed.resumed) text += `, already held by ${claimed.identity}`;
  }
  if (claimed.racesLost > 0) {
    const n = claimed.racesLost;
    text += `; lost ${n} ${plural(n, "race", "races")} to other claimants first`;
  }
  return text;
}

/**
 * One line about a successful release: "released devpool-1 (was alice), VM stopping"; with a
 * broker, what it does by the pool's policy ("…, its VM is stopped; its disk is kept …").
 */
export function formatReleased(released: Released): string {
  const was =
    released.previousHolder === null || released.previousHolder === ""
      ? "it had no holder"
      : `was ${released.previousHolder}`;
  const verb = released.forced ? "force-released" : "released";
  const power =
    released.power.kind === "brokerReleases"
      ? released.power.reason.words
      : `VM ${describePower(released.power)}`;
  let text = `${verb} ${released.member} (${was}), ${power}`;
  if (released.forced) {
    text += "; an Event on the VM records it";
  }
  if (!released.leaseReleased && !released.labelRemoved) {
    text += "; there was no Lease or label to remove";
  }
  return text;
}

/**
 * The pool-level actions `perms` denies (Assign…, Delete…, Force release), each with the
 * cluster's reason; "New pool…" and "Get a desktop" say theirs where they are.
 */
export function deniedActions(perms: Permissions): { action: string; reason: string }[] {
  const out: { action: string; reason: string }[] = [];
  for (const [action, verdict] of [
    ["Assign…", perms.assign],
    ["Delete…", perms.deletePool],
    ["Force release…", perms.forceRelease],
  ] as const) {
    if (!verdict.allowed) {
      out.push({ action, reason: verdict.reason ?? "not allowed" });
    }
  }
  return out;
}
