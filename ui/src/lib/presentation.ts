import type { BrokerBadge, ContextInfo, MemberState, Scope } from "../bindings";

/** Colour families used by badges; each maps to a CSS class `tone-<tone>`. */
export type Tone = "green" | "blue" | "amber" | "grey" | "red";

/**
 * Badge colour of a claim state: green free, blue assigned, amber stuck/expired/stale or being
 * granted by the broker, grey legacy or being released or removed by the broker, red
 * conflict or an unreadable claim.
 */
export function stateTone(state: MemberState): Tone {
  switch (state) {
    case "free":
      return "green";
    case "assigned":
      return "blue";
    case "freeStaleLease":
    case "claiming":
    case "assignedLeaseExpired":
    case "granting":
      return "amber";
    case "assignedLegacy":
    case "releasing":
    case "removing":
      return "grey";
    case "conflict":
    case "unreadable":
      return "red";
  }
}

/**
 * Badge colour of the broker's badge (its words are the core's): green while one leads, amber
 * when none leads or there is no broker (anyone who may claim can open any console, as the
 * guard's "guard off" is amber), grey when the cluster did not answer.
 */
export function brokerTone(badge: BrokerBadge): Tone {
  if (badge.status === null) return "grey";
  return badge.status.state === "running" ? "green" : "amber";
}

/**
 * Badge colour of a KubeVirt printableStatus, shown verbatim elsewhere:
 * Running green, Stopped grey, error statuses red, anything else (transitional or unknown) amber.
 */
export function powerTone(power: string): Tone {
  if (power === "Running") return "green";
  if (power === "Stopped") return "grey";
  if (
    /^Err/.test(power) ||
    /Error/.test(power) ||
    /BackOff$/.test(power) ||
    /Fail/.test(power) ||
    power === "Unschedulable"
  ) {
    return "red";
  }
  return "amber";
}

/** The namespace a scope covers, or null for all namespaces. */
export function scopeNamespace(scope: Scope): string | null {
  return scope.kind === "namespace" ? scope.namespace : null;
}

/** Whether two scopes cover the same namespaces. */
export function sameScope(a: Scope | null, b: Scope | null): boolean {
  if (a === null || b === null) return a === b;
  if (a.kind === "all" || b.kind === "all") return a.kind === b.kind;
  return a.namespace === b.namespace;
}

/** Human wording of a scope: `namespace "corral-vms"` or `any namespace`. */
export function describeScope(scope: Scope): string {
  return scope.kind === "namespace" ? `namespace "${scope.namespace}"` : "any namespace";
}

/** The CLI command that creates a pool, with the namespace filled in when there is one. */
export function poolCreateCommand(scope: Scope): string {
  const ns = scope.kind === "namespace" ? scope.namespace : "<namespace>";
  return `corral-vdi pool create <name> --from <golden-vm> --size <N> -n ${ns}`;
}

/** The namespace shown before the kubeconfig is read, and for a context it does not define
 * (the backend's `FALLBACK_NAMESPACE`). */
export const FALLBACK_NAMESPACE = "corral-vms";

/** The namespace to open a kubeconfig context in (the backend decides it, so that the session
 * it prepares while the window starts is the one asked for). */
export function startNamespace(context: ContextInfo | undefined): string {
  return context?.startNamespace ?? FALLBACK_NAMESPACE;
}

/** The data-testid of a pool section. */
export function poolTestId(namespace: string, name: string): string {
  return `pool-${namespace}-${name}`;
}

/**
 * A file path shortened to at most `max` characters by leaving out whole folders from its
 * middle: its first folder and as many of its last parts as fit, the file's name always
 * ("/root/…/sandbox/demo/kubeconfig"), so the part that tells files apart stays readable.
 */
export function shortenPath(path: string, max: number): string {
  if (path.length <= max) return path;
  const parts = path.split("/");
  const head = parts[0] === "" ? `/${parts[1]}` : parts[0];
  const rest = parts.slice(parts[0] === "" ? 2 : 1);
  let tail = rest[rest.length - 1];
  for (let i = rest.length - 2; i >= 0; i -= 1) {
    const longer = `${rest[i]}/${tail}`;
    if (`${head}/…/${longer}`.length > max) break;
    tail = longer;
  }
  return `${head}/…/${tail}`;
}
