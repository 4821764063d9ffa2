import { describe, expect, it } from "vitest";
import type { CapacityPlan } from "../bindings/CapacityPlan";
import type { ClusterCapacity } from "../bindings/ClusterCapacity";
import type { NodeCapacity } from "../bindings/NodeCapacity";
import {
  capacityEmptyText,
  holdersText,
  nodeCondition,
  planBlocker,
  planVerdict,
  resourceTotals,
} from "./capacity";

const GPU = "nvidia.com/GA102GL_A10";

function plan(overrides: Partial<CapacityPlan>): CapacityPlan {
  return {
    namespace: "corral-vms",
    vm: "golden-gpu",
    size: 4,
    needs: [{ resource: GPU, perVm: 1, class: "pciPassthrough", entries: ["gpus/gpu1"] }],
    nodes: [],
    placeable: 3,
    fits: 3,
    fitsOne: true,
    admitted: false,
    notPermitted: [],
    notes: [],
    ...overrides,
  };
}

function node(name: string, overrides: Partial<NodeCapacity> = {}): NodeCapacity {
  return {
    node: name,
    cordoned: false,
    taints: [],
    kubevirtSchedulable: true,
    resources: [],
    ...overrides,
  };
}

describe("the New pool preview", () => {
  it("says how many of the members asked for fit, and why Create waits", () => {
    const short = plan({});
    expect(planVerdict(short)).toBe("Fits 3 of the 4 you ask for.");
    expect(planBlocker(short)).toBe(
      "The cluster's free devices hold 3 of the 4 members: make the pool smaller or free devices.",
    );
  });

  it("lets an admitted pool through", () => {
    const fits = plan({ size: 3, admitted: true });
    expect(planVerdict(fits)).toBe("Fits all 3: the 3 you ask for.");
    expect(planBlocker(fits)).toBeNull();
    expect(planVerdict(plan({ size: 1, fits: 1, admitted: true }))).toBe(
      "Fits: 1 member can start now.",
    );
  });

  it("names a device KubeVirt does not permit", () => {
    const refused = plan({ notPermitted: [GPU], fits: 0, placeable: 0 });
    expect(planVerdict(refused)).toContain(`does not permit ${GPU}`);
    expect(planBlocker(refused)).toContain("permittedHostDevices");
  });

  it("has nothing to check for a golden VM without devices", () => {
    const none = plan({ needs: [], admitted: true });
    expect(planVerdict(none)).toBe("golden-gpu asks for no GPU or host device: nothing to check.");
    expect(planBlocker(none)).toBeNull();
  });
});

describe("the Capacity view", () => {
  const view: ClusterCapacity = {
    nodes: [
      node("node-a", {
        resources: [
          {
            resource: GPU,
            class: "pciPassthrough",
            capacity: 6,
            allocatable: 4,
            held: 1,
            free: 3,
            holders: [
              {
                namespace: "corral-vms",
                vm: "sec-1",
                pool: "sec",
                count: 1,
                pod: "virt-launcher-sec-1-abcde",
                migrationTarget: false,
              },
            ],
          },
        ],
      }),
      node("node-b", {
        cordoned: true,
        resources: [
          {
            resource: GPU,
            class: "pciPassthrough",
            capacity: 2,
            allocatable: 2,
            held: 2,
            free: 0,
            holders: [],
          },
        ],
      }),
      node("node-c", { taints: ["gpu=reserved:NoSchedule"], kubevirtSchedulable: false }),
    ],
    permitted: [],
    notes: [],
  };

  it("sums each resource over its nodes", () => {
    expect(resourceTotals(view)).toEqual([
      { resource: GPU, kind: "pciPassthrough", allocatable: 6, held: 3, free: 3, nodes: 2 },
    ]);
  });

  it("names holders with their pool and counts", () => {
    expect(holdersText(view.nodes[0]?.resources[0]?.holders ?? [])).toBe(
      "corral-vms/sec-1 (pool sec)",
    );
    expect(
      holdersText([
        {
          namespace: "ns",
          vm: "x",
          pool: null,
          count: 2,
          pod: null,
          migrationTarget: true,
        },
      ]),
    ).toBe("migration target ns/x ×2");
    expect(holdersText([])).toBe("nobody");
  });

  it("says why a node takes nothing new", () => {
    expect(nodeCondition(view.nodes[0])).toBeNull();
    expect(nodeCondition(view.nodes[1])).toBe("cordoned");
    expect(nodeCondition(view.nodes[2])).toBe(
      "taints gpu=reserved:NoSchedule; no kubevirt.io/schedulable=true",
    );
  });

  it("has an empty state for clusters without devices", () => {
    expect(capacityEmptyText(view)).toBeNull();
    expect(capacityEmptyText({ nodes: [node("n1"), node("n2")], permitted: [], notes: [] })).toBe(
      "None of the 2 nodes reports a GPU or host device.",
    );
    expect(capacityEmptyText({ nodes: [node("n1")], permitted: [], notes: [] })).toBe(
      "The cluster's one node reports no GPU or host device.",
    );
    expect(capacityEmptyText({ nodes: [], permitted: [], notes: [] })).toBe(
      "The cluster reports no nodes.",
    );
  });
});
