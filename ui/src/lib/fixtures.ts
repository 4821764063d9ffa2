/** Test fixtures shared by the unit tests: views shaped like the backend's. */
import type {
  MemberPaths,
  MemberView,
  Permissions,
  PoolView,
  SessionView,
  UsageBucket,
  UsbDevice,
  UsbList,
} from "../bindings";

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
    brokerReason: null,
    lease: null,
    power: "Stopped",
    reclaimAt: null,
    reclaimWhy: null,
    notice: false,
    keepable: false,
    onRelease: {
      effect: { kind: "stop", warm: false },
      words: "its VM is stopped; its disk is kept for the next user",
    },
    stateNote: null,
    offers: null,
    owner: null,
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
    history: no('the history is not yours to read in namespace "corral-vms"'),
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
    history: yes,
  };
}

/** An active console session of `corral-vms/devpool-1`, with `overrides` applied. */
export function session(id: number, overrides: Partial<SessionView> = {}): SessionView {
  return {
    id,
    namespace: "corral-vms",
    member: "devpool-1",
    kind: "console",
    target: "display (VNC)",
    localAddress: "127.0.0.1:40123",
    helper: null,
    helperPid: null,
    claimLost: null,
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

/** A pool of `corral-vms` with `members`, counted as the backend counts them. */
export function pool(name: string, members: MemberView[], namespace = "corral-vms"): PoolView {
  const free = members.filter((m) => m.claimable).length;
  return {
    namespace,
    name,
    members,
    counts: { free, claimed: members.length - free, total: members.length },
    strayLeases: [],
    managed: false,
    policy: null,
    policyProblem: null,
    stateCounts: {
      free,
      warm: 0,
      claimed: members.length - free,
      granting: 0,
      releasing: 0,
      removing: 0,
      problems: 0,
      creating: 0,
    },
    resizeNote: null,
    offer: null,
    usage: [],
  };
}

/** `hours` consecutive usage buckets ending with the hour starting at `lastHour` (RFC 3339 UTC),
 * oldest first: peak claimed `peaks[i]` (0 beyond), and 4 minus that free. */
export function usage(lastHour: string, hours: number, peaks: number[] = []): UsageBucket[] {
  const last = Date.parse(lastHour);
  return Array.from({ length: hours }, (_, i) => {
    const peak = peaks[i] ?? 0;
    return {
      hour: new Date(last - (hours - 1 - i) * 3_600_000).toISOString().replace(".000Z", "Z"),
      peakClaimed: peak,
      lowestFree: 4 - peak,
    };
  });
}

/** The backend's security notice (vdi-core `usb::SECURITY_NOTICE`). */
export const USB_NOTICE =
  "While it is attached, the device leaves this machine: nothing here can use it. Live migration of the desktop's VM is blocked. The guest gets full control of the device (a security key or smartcard then answers to whoever controls the desktop).";

/** A writable USB device on bus 1, with `overrides` applied; `id` and `busAddress` follow. */
function usbDevice(
  vendorId: number,
  productId: number,
  bus: number,
  address: number,
  overrides: Partial<UsbDevice>,
): UsbDevice {
  const hex = (n: number) => n.toString(16).padStart(4, "0");
  const node = `/dev/bus/usb/${String(bus).padStart(3, "0")}/${String(address).padStart(3, "0")}`;
  return {
    vendorId,
    productId,
    id: `${hex(vendorId)}:${hex(productId)}`,
    bus,
    address,
    busAddress: `${bus}-${address}`,
    manufacturer: null,
    product: null,
    serial: null,
    deviceClass: 0,
    interfaceClasses: [],
    speed: "full",
    marks: [],
    access: { writable: true, node, fix: null },
    ...overrides,
  };
}

/**
 * Recorded devices as the backend describes them (the same ones as
 * tests/fixtures/usb-devices.json): a YubiKey (OTP+FIDO+CCID), a CCID smartcard reader, a
 * keyboard, and a mass-storage stick this user may not open.
 */
export const usbDevices = {
  yubiKey: usbDevice(0x1050, 0x0407, 1, 7, {
    manufacturer: "Yubico",
    product: "YubiKey OTP+FIDO+CCID",
    interfaceClasses: [3, 3, 11],
    marks: ["smartcard", "securityKey"],
  }),
  ccidReader: usbDevice(0x076b, 0x3031, 1, 3, {
    manufacturer: "OMNIKEY",
    product: "Smart Card Reader USB",
    interfaceClasses: [11],
    marks: ["smartcard"],
  }),
  keyboard: usbDevice(0x046d, 0xc31c, 1, 4, {
    manufacturer: "Logitech",
    product: "USB Keyboard",
    interfaceClasses: [3, 3],
    speed: "low",
  }),
  massStorage: usbDevice(0x0781, 0x5567, 2, 2, {
    manufacturer: "SanDisk",
    product: "Cruzer Blade",
    serial: "4C530001",
    interfaceClasses: [8],
    speed: "high",
    access: {
      writable: false,
      node: "/dev/bus/usb/002/002",
      fix: 'add the line SUBSYSTEM=="usb", ATTRS{idVendor}=="0781", ATTRS{idProduct}=="5567", TAG+="uaccess" to /etc/udev/rules.d/70-corral-usb.rules, then run `sudo udevadm control --reload && sudo udevadm trigger` and plug the device in again',
    },
  }),
} satisfies Record<string, UsbDevice>;

/** A device list of the recorded devices (sorted by bus and address), with `overrides`. */
export function usbList(overrides: Partial<UsbList> = {}): UsbList {
  const { yubiKey, ccidReader, keyboard, massStorage } = usbDevices;
  return {
    devices: [ccidReader, keyboard, yubiKey, massStorage],
    problem: null,
    source: "recording",
    notice: USB_NOTICE,
    ...overrides,
  };
}

/** An active USB session redirecting `device` into `member`, with `overrides` applied. */
export function usbSession(
  id: number,
  device: UsbDevice,
  member: string,
  overrides: Partial<SessionView> = {},
): SessionView {
  const name =
    device.manufacturer !== null && device.product !== null
      ? `${device.manufacturer} ${device.product}`
      : `USB device ${device.id}`;
  return session(id, {
    member,
    kind: "usb",
    target: `usb ${device.id} at ${device.busAddress} (${name})`,
    helper: "usbredirect",
    helperPid: 5151,
    ...overrides,
  });
}
