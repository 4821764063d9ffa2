import { describe, expect, it } from "vitest";
import type { BrokerBadge, BrokerState, MemberState } from "../bindings";
import {
  FALLBACK_NAMESPACE,
  brokerTone,
  startNamespace,
  describeScope,
  poolCreateCommand,
  poolTestId,
  powerTone,
  sameScope,
  shortenPath,
  stateTone,
} from "./presentation";

describe("stateTone", () => {
  it("colours each claim state", () => {
    const expected: Record<MemberState, string> = {
      free: "green",
      freeStaleLease: "amber",
      claiming: "amber",
      assignedLegacy: "grey",
      assigned: "blue",
      assignedLeaseExpired: "amber",
      conflict: "red",
      unreadable: "red",
      granting: "amber",
      releasing: "grey",
      removing: "grey",
    };
    for (const [state, tone] of Object.entries(expected)) {
      expect(stateTone(state as MemberState)).toBe(tone);
    }
  });
});

describe("brokerTone", () => {
  const badge = (state: BrokerState | null): BrokerBadge => ({
    status:
      state === null
        ? null
        : { state, leader: null, replicas: [], lastReconcile: null, summary: "", refusing: null },
    text: "",
    detail: "",
    notice: null,
    brokered: state === "running" || state === "noLeader",
  });

  it("is green only while a broker leads; amber without one, grey when unknown", () => {
    expect(brokerTone(badge("running"))).toBe("green");
    expect(brokerTone(badge("noLeader"))).toBe("amber");
    expect(brokerTone(badge("absent"))).toBe("amber");
    expect(brokerTone(badge("unknown"))).toBe("amber");
    expect(brokerTone(badge(null))).toBe("grey");
  });
});

describe("powerTone", () => {
  it("colours KubeVirt printable statuses", () => {
    expect(powerTone("Running")).toBe("green");
    expect(powerTone("Stopped")).toBe("grey");
    expect(powerTone("ErrorUnschedulable")).toBe("red");
    expect(powerTone("ErrImagePull")).toBe("red");
    expect(powerTone("ErrorPvcNotFound")).toBe("red");
    expect(powerTone("DataVolumeError")).toBe("red");
    expect(powerTone("CrashLoopBackOff")).toBe("red");
    expect(powerTone("ImagePullBackOff")).toBe("red");
    expect(powerTone("Starting")).toBe("amber");
    expect(powerTone("Stopping")).toBe("amber");
    expect(powerTone("Migrating")).toBe("amber");
    expect(powerTone("Unknown")).toBe("amber");
    expect(powerTone("SomethingNew")).toBe("amber");
  });
});

describe("scopes", () => {
  const ns = (namespace: string) => ({ kind: "namespace" as const, namespace });
  const all = { kind: "all" as const };

  it("compares scopes", () => {
    expect(sameScope(ns("a"), ns("a"))).toBe(true);
    expect(sameScope(ns("a"), ns("b"))).toBe(false);
    expect(sameScope(all, { kind: "all" })).toBe(true);
    expect(sameScope(all, ns("a"))).toBe(false);
    expect(sameScope(ns("a"), null)).toBe(false);
    expect(sameScope(null, null)).toBe(true);
  });

  it("describes scopes", () => {
    expect(describeScope(ns("corral-vms"))).toBe('namespace "corral-vms"');
    expect(describeScope(all)).toBe("any namespace");
  });

  it("fills the namespace into the create command when known", () => {
    expect(poolCreateCommand(ns("lab"))).toBe(
      "corral-vdi pool create <name> --from <golden-vm> --size <N> -n lab",
    );
    expect(poolCreateCommand(all)).toBe(
      "corral-vdi pool create <name> --from <golden-vm> --size <N> -n <namespace>",
    );
  });
});

describe("startNamespace", () => {
  it("uses the namespace the backend chose for the context, else corral-vms", () => {
    const context = { name: "c", cluster: "k", namespace: " team-a ", startNamespace: "team-a" };
    expect(startNamespace(context)).toBe("team-a");
    expect(startNamespace(undefined)).toBe(FALLBACK_NAMESPACE);
    expect(FALLBACK_NAMESPACE).toBe("corral-vms");
  });
});

describe("poolTestId", () => {
  it("joins namespace and name", () => {
    expect(poolTestId("corral-vms", "lab")).toBe("pool-corral-vms-lab");
  });
});

describe("shortenPath", () => {
  it("leaves a short path alone", () => {
    expect(shortenPath("/root/.kube/config", 40)).toBe("/root/.kube/config");
  });

  it("leaves out whole folders from the middle, keeping the first and the last parts", () => {
    const path = "/root/.local/state/corral-vdi/sandbox/demo/kubeconfig";
    expect(shortenPath(path, 42)).toBe("/root/…/corral-vdi/sandbox/demo/kubeconfig");
    expect(shortenPath(path, 41)).toBe("/root/…/sandbox/demo/kubeconfig");
    expect(shortenPath(path, 30)).toBe("/root/…/demo/kubeconfig");
    expect(shortenPath(path, 10)).toBe("/root/…/kubeconfig");
    expect(shortenPath("relative/a/very/long/folder/name/config", 20)).toBe("relative/…/config");
  });
});
