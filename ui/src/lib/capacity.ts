/**
 * Words and numbers of the GPU and host-device capacity views: the New pool preview (a
 * CapacityPlan) and the Capacity view (a ClusterCapacity). The arithmetic is the backend's;
 * this only says it.
 */
import type { CapacityPlan } from "../bindings/CapacityPlan";
import type { ClusterCapacity } from "../bindings/ClusterCapacity";
import type { DeviceClass } from "../bindings/DeviceClass";
import type { DeviceHolder } from "../bindings/DeviceHolder";
import type { NodeCapacity } from "../bindings/NodeCapacity";

/** How KubeVirt hands a device resource out, as the CLI prints it. */
export function deviceClassLabel(kind: DeviceClass): string {
  switch (kind) {
    case "pciPassthrough":
      return "PCI passthrough";
    case "mediated":
      return "mediated (vGPU)";
    case "usb":
      return "USB";
    case "external":
      return "external device plugin";
    case "notPermitted":
      return "not permitted";
    case "unknown":
      return "unknown";
  }
}

/** "2 × nvidia.com/A10, 1 × nvidia.com/T4" : what one VM asks for. */
export function needsText(plan: CapacityPlan): string {
  return plan.needs.map((n) => `${n.perVm} × ${n.resource}`).join(", ");
}

/**
 * The preview's one-line verdict: whether the pool fits, as "fits N of the M you ask for".
 */
export function planVerdict(plan: CapacityPlan): string {
  if (plan.needs.length === 0) {
    return `${plan.vm} asks for no GPU or host device: nothing to check.`;
  }
  if (plan.notPermitted.length > 0) {
    return `KubeVirt does not permit ${plan.notPermitted.join(", ")}: no member could start.`;
  }
  const many = plan.size === 1 ? "the 1 you ask for" : `the ${plan.size} you ask for`;
  if (plan.admitted) {
    return plan.size === 1 ? "Fits: 1 member can start now." : `Fits all ${plan.size}: ${many}.`;
  }
  return `Fits ${plan.fits} of ${many}.`;
}

/** Why Create is disabled for this plan, or null when the pool fits. */
export function planBlocker(plan: CapacityPlan): string | null {
  if (plan.admitted) return null;
  if (plan.notPermitted.length > 0) {
    return `The cluster's KubeVirt CR does not permit ${plan.notPermitted.join(", ")} (permittedHostDevices).`;
  }
  return `The cluster's free devices hold ${plan.fits} of the ${plan.size} members: make the pool smaller or free devices.`;
}

/** "desk-1 (pool sec), desk-2 ×2, migration target desk-3" : who holds a resource. */
export function holdersText(holders: readonly DeviceHolder[]): string {
  if (holders.length === 0) return "nobody";
  return holders
    .map((h) => {
      const who =
        h.pool === null ? `${h.namespace}/${h.vm}` : `${h.namespace}/${h.vm} (pool ${h.pool})`;
      const count = h.count === 1 ? "" : ` ×${h.count}`;
      return `${h.migrationTarget ? "migration target " : ""}${who}${count}`;
    })
    .join(", ");
}

/** Why nothing new is scheduled on a node, or null when things may be. */
export function nodeCondition(node: NodeCapacity): string | null {
  const reasons: string[] = [];
  if (node.cordoned) reasons.push("cordoned");
  if (node.taints.length > 0) reasons.push(`taints ${node.taints.join(", ")}`);
  if (!node.kubevirtSchedulable) reasons.push("no kubevirt.io/schedulable=true");
  return reasons.length === 0 ? null : reasons.join("; ");
}

/** The Capacity view's totals per resource: allocatable, held, free across all nodes. */
export type ResourceTotal = {
  resource: string;
  kind: DeviceClass;
  allocatable: number;
  held: number;
  free: number;
  nodes: number;
};

/** Sums each resource over the nodes, sorted by resource name. */
export function resourceTotals(view: ClusterCapacity): ResourceTotal[] {
  const totals = new Map<string, ResourceTotal>();
  for (const node of view.nodes) {
    for (const r of node.resources) {
      const t = totals.get(r.resource) ?? {
        resource: r.resource,
        kind: r.class,
        allocatable: 0,
        held: 0,
        free: 0,
        nodes: 0,
      };
      t.allocatable += r.allocatable;
      t.held += r.held;
      t.free += r.free;
      t.nodes += 1;
      totals.set(r.resource, t);
    }
  }
  return [...totals.values()].sort((a, b) => a.resource.localeCompare(b.resource));
}

/** The Capacity view's empty state, or null when some node has a device resource. */
export function capacityEmptyText(view: ClusterCapacity): string | null {
  if (view.nodes.length === 0) return "The cluster reports no nodes.";
  if (view.nodes.every((n) => n.resources.length === 0)) {
    return view.nodes.length === 1
      ? "The cluster's one node reports no GPU or host device."
      : `None of the ${view.nodes.length} nodes reports a GPU or host device.`;
  }
  return null;
}
