/** Test fixtures shared by the unit tests: views shaped like the backend's. */
import type { MemberView } from "../bindings/MemberView";
import type { MemberPaths } from "../bindings/MemberPaths";
import type { Permissions } from "../bindings/Permissions";
import type { SessionView } from "../bindings/SessionView";

/** A free, stopped member of `corral-vms`, with `overrides` applied. */
export function member(name: string, overrides: Partial<MemberView> = {}): MemberView {
  return {
    name,
    namespace: "corral-vms",
    state: "free",
    stateLabel: "free",
    claimable: true,
    holder: null,
    labelHolder: null,
    claimedAt: null,
    lease: null,
    power: "Stopped",
    ...overrides,
  };
}

/** What an ordinary user (alice) may do in `corral-vms` with the guard installed. */
export function userPermissions(overrides: Partial<Permissions> = {}): Permissions {
  const no = (reason: string) => ({ allowed: false, reason });
  return {
    namespace: "corral-vms",
    admin: false,
    guarded: true,
    claim: { allowed: true, reason: null },
    assign: no("only members of corral-vdi:admins may assign desktops to others"),
    createPool: no("RBAC does not let you create virtualmachineclones.clone.kubevirt.io"),
    deletePool: no("RBAC does not let you delete virtualmachines.kubevirt.io"),
    forceRelease: no("only members of corral-vdi:admins may release someone else's desktop"),
    ...overrides,
  };
}

/** What an administrator may do: everything. */
export function adminPermissions(): Permissions {
  const yes = { allowed: true, reason: null };
  return {
    namespace: "corral-vms",
    admin: true,
    guarded: true,
    claim: yes,
    assign: yes,
    createPool: yes,
    deletePool: yes,
    forceRelease: yes,
  };
}

/** An active console session of `corral-vms/devpool-1`, with `overrides` applied. */
export function session(id: number, overrides: Partial<SessionView> = {}): SessionView {
  return {
    id,
    namespace: "corral-vms",
    member: "devpool-1",
    kind: "console",
    target: "vnc",
    localAddress: "127.0.0.1:40123",
    helper: null,
    helperPid: null,
    startedAt: "2026-12-01T09:30:00Z",
    bytesIn: 0,
    bytesOut: 0,
    connections: 1,
    connectionsTotal: 1,
    lastError: null,
    state: { kind: "active" },
    ...overrides,
  };
}

/** The paths of a running `devpool-1` whose VNC works and whose RDP and SSH ports are closed. */
export function memberPaths(overrides: Partial<MemberPaths> = {}): MemberPaths {
  return {
    namespace: "corral-vms",
    member: "devpool-1",
    phase: "Running",
    paths: [
      { kind: "vnc", available: true, reason: null },
      { kind: "rdp", available: false, reason: "nothing answers on port 3389" },
      { kind: "ssh", available: false, reason: "nothing answers on port 22" },
    ],
    ...overrides,
  };
}
