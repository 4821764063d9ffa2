/** Test fixtures shared by the unit tests: views shaped like the backend's. */
import type { MemberView } from "../bindings/MemberView";

/** A free, stopped member of `corral-vms`, with `overrides` applied. */
export function member(name: string, overrides: Partial<MemberView> = {}): MemberView {
  return {
    name,
    namespace: "corral-vms",
    state: "free",
    stateLabel: "free",
    claimable: true,
    holder: null,
    claimedAt: null,
    lease: null,
    power: "Stopped",
    ...overrides,
  };
}
