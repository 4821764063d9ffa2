/** Test fixtures shared by the unit tests: views shaped like the backend's. */
import type { MemberView } from "../bindings/MemberView";
import type { Permissions } from "../bindings/Permissions";

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
