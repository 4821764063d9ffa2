/**
 * Pure helpers for the USB devices view: how each local device is worded (classes, speed,
 * marks), which of your desktops may receive it, and where an attached one went. The backend
 * judges every redirection again (your desktop, running, device present and writable); these
 * only choose what to offer and how to say it.
 */
import type { MemberView, PoolView, SessionView, UsbDevice, UsbList, UsbMark } from "../bindings";

/** USB-IF base class codes, in words. */
const CLASS_NAMES: ReadonlyMap<number, string> = new Map([
  [0x01, "audio"],
  [0x02, "communications"],
  [0x03, "HID"],
  [0x05, "physical"],
  [0x06, "still image"],
  [0x07, "printer"],
  [0x08, "mass storage"],
  [0x09, "hub"],
  [0x0a, "communications data"],
  [0x0b, "smartcard"],
  [0x0d, "content security"],
  [0x0e, "video"],
  [0x0f, "personal healthcare"],
  [0x10, "audio/video"],
  [0x11, "billboard"],
  [0x12, "USB-C bridge"],
  [0x3c, "I3C"],
  [0xdc, "diagnostic"],
  [0xe0, "wireless"],
  [0xef, "miscellaneous"],
  [0xfe, "application-specific"],
  [0xff, "vendor-specific"],
]);

/** Two hex digits: 11 → "0x0b". */
function hexByte(code: number): string {
  return `0x${code.toString(16).padStart(2, "0")}`;
}

/** A class code in words: 3 → "HID", 0x0b → "smartcard", an unknown one → "class 0x42". */
export function usbClassName(code: number): string {
  return CLASS_NAMES.get(code) ?? `class ${hexByte(code)}`;
}

/**
 * What a device is, by class, each class once in the order its interfaces give them: a YubiKey
 * (HID, HID, smartcard) is ["HID", "smartcard"]. Without interfaces, its device class (0 means
 * "per interface" and says nothing).
 */
export function deviceClassNames(device: UsbDevice): string[] {
  const codes =
    device.interfaceClasses.length > 0
      ? device.interfaceClasses
      : device.deviceClass !== 0
        ? [device.deviceClass]
        : [];
  return [...new Set(codes.map(usbClassName))];
}

/** The classes as one phrase: "HID, smartcard"; "not reported" when there are none. */
export function describeClasses(device: UsbDevice): string {
  const names = deviceClassNames(device);
  return names.length > 0 ? names.join(", ") : "not reported";
}

/**
 * What a device is called: manufacturer and product ("Yubico YubiKey OTP+FIDO+CCID"), the one
 * it has, else "USB device 1050:0407". The same wording the backend puts in a session's target.
 */
export function usbDescription(device: UsbDevice): string {
  const manufacturer = device.manufacturer?.trim() ?? "";
  const product = device.product?.trim() ?? "";
  if (manufacturer !== "" && product !== "") return `${manufacturer} ${product}`;
  if (product !== "") return product;
  if (manufacturer !== "") return manufacturer;
  return `USB device ${device.id}`;
}

/** A mark as its badge says it. */
export function usbMarkLabel(mark: UsbMark): string {
  switch (mark) {
    case "smartcard":
      return "smartcard";
    case "securityKey":
      return "security key";
    case "securityKeyByVendor":
      return "security key (by vendor)";
  }
}

/** What a mark means, for its badge's description. */
export function usbMarkDetail(mark: UsbMark): string {
  switch (mark) {
    case "smartcard":
      return "It has a smartcard (CCID) interface: a reader, or a token holding certificates.";
    case "securityKey":
      return "It declares the FIDO usage page: a security key (U2F / WebAuthn).";
    case "securityKeyByVendor":
      return "Its maker makes security keys and its HID descriptor could not be read: probably a security key.";
  }
}

/**
 * What attaching a marked device gives the desktop, beyond the general notice; null for an
 * unmarked one.
 */
export function markWarning(marks: readonly UsbMark[]): string | null {
  const key = marks.includes("securityKey") || marks.includes("securityKeyByVendor");
  const card = marks.includes("smartcard");
  if (key && card) {
    return "This is a security key with a smartcard: while it is attached, whoever controls the desktop can sign in and sign with it as you.";
  }
  if (key) {
    return "This is a security key: while it is attached, whoever controls the desktop can sign in with it as you.";
  }
  if (card) {
    return "This is a smartcard device: while it is attached, whoever controls the desktop can use the card's keys as you.";
  }
  return null;
}

const SPEEDS: ReadonlyMap<string, string> = new Map([
  ["low", "low (1.5 Mb/s)"],
  ["full", "full (12 Mb/s)"],
  ["high", "high (480 Mb/s)"],
  ["super", "super (5 Gb/s)"],
  ["super+", "super+ (10 Gb/s)"],
]);

/** The negotiated speed with its rate: "high (480 Mb/s)"; "unknown" as it is. */
export function describeSpeed(speed: string): string {
  return SPEEDS.get(speed) ?? speed;
}

/** How the list follows changes, in words: "updated as devices are plugged in and out"… */
export function usbSourceText(source: string): string {
  switch (source) {
    case "hotplug":
      return "updated as devices are plugged in and out";
    case "polling":
      return "checked every second";
    case "recording":
      return "recorded list (test build)";
    default:
      return source;
  }
}

/** A backend sentence as a sentence: a capital first letter and a full stop. */
export function asSentence(text: string): string {
  const trimmed = text.trim();
  if (trimmed === "") return trimmed;
  const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return /[.!?]$/.test(capital) ? capital : `${capital}.`;
}

/** A piece of backend text: plain, or a command it quotes in backticks. */
export type TextPart = { code: boolean; text: string };

/**
 * Splits backend text at its backticks, so that the commands it quotes can be shown as code:
 * "run `sudo udevadm trigger` then" → plain "run ", code "sudo udevadm trigger", plain " then".
 * An unmatched backtick stays as it is.
 */
export function splitCode(text: string): TextPart[] {
  const pieces = text.split("`");
  if (pieces.length % 2 === 0) return text === "" ? [] : [{ code: false, text }];
  return pieces
    .map((piece, i) => ({ code: i % 2 === 1, text: piece }))
    .filter((part) => part.text !== "");
}

/** What an empty list says: why it is empty when the backend knows, else nothing is plugged in. */
export function usbEmptyText(list: UsbList): string {
  return list.problem !== null && list.problem.trim() !== ""
    ? asSentence(list.problem)
    : "No USB devices are plugged in.";
}

/** The data-testid part naming a device: "1050:0407" → "1050-0407". */
export function usbTestId(id: string): string {
  return id.replaceAll(":", "-");
}

/**
 * What `usb_redirect` is given for `device`: its id ("1050:0407"), unless another device in
 * `devices` has the same id (two identical sticks), then its bus-address ("2-5").
 */
export function redirectArgument(device: UsbDevice, devices: readonly UsbDevice[]): string {
  const twins = devices.filter((d) => d.id === device.id).length;
  return twins > 1 ? device.busAddress : device.id;
}

/** The header button's text: "USB devices 3"; just "USB devices" before the list is known. */
export function usbButtonText(count: number | null): string {
  return count === null ? "USB devices" : `USB devices ${count}`;
}

/** The header button's accessible name: "USB devices: 3 plugged in, 1 attached". */
export function usbButtonLabel(count: number | null, attached: number): string {
  if (count === null) return "USB devices: not listed yet";
  const plugged = `${count} plugged in`;
  return attached > 0 ? `USB devices: ${plugged}, ${attached} attached` : `USB devices: ${plugged}`;
}

/**
 * The active redirection of `device`, if any: the active session of kind "usb" whose target is
 * "usb <id> at <bus-address> (<description>)", as the backend words it — the bus address tells
 * two devices of one kind apart.
 */
export function attachedSession(
  device: UsbDevice,
  sessions: readonly SessionView[],
): SessionView | null {
  const prefix = `usb ${device.id} at ${device.busAddress} `;
  return (
    sessions.find(
      (s) => s.kind === "usb" && s.state.kind === "active" && s.target.startsWith(prefix),
    ) ?? null
  );
}

/** How many of `devices` are attached to a desktop now. */
export function attachedCount(
  devices: readonly UsbDevice[],
  sessions: readonly SessionView[],
): number {
  return devices.filter((d) => attachedSession(d, sessions) !== null).length;
}

/** "attached to devpool-1". */
export function describeAttached(session: SessionView): string {
  return `attached to ${session.member}`;
}

/** One of your desktops, as "Redirect to…" offers it. */
export type RedirectTarget = {
  namespace: string;
  pool: string;
  member: string;
  /** KubeVirt's printableStatus. */
  power: string;
  /** Why it cannot receive a device now; null when it can. */
  reason: string | null;
};

/** Your desktops, split: those that can receive a device now, and the others with why not. */
export type RedirectTargets = {
  available: RedirectTarget[];
  unavailable: RedirectTarget[];
};

/**
 * Whether the backend counts `member` as assigned to `username`: an active Lease held by them
 * (and no conflict), else without an active Lease an assigned-to label naming them.
 */
function assignedTo(member: MemberView, username: string): boolean {
  if (member.lease?.active === true) {
    return member.lease.holder === username && member.state !== "conflict";
  }
  return member.labelHolder === username;
}

/** Why a desktop of yours cannot receive a device now, or null when it can. */
function unavailableReason(member: MemberView, username: string): string | null {
  if (member.state === "conflict") {
    return "in conflict — an administrator resolves it";
  }
  if (!assignedTo(member, username)) {
    return "your claim has expired — get a desktop again";
  }
  switch (member.power) {
    case "Running":
      return null;
    case "Paused":
      return "paused — unpause it";
    case "Starting":
    case "Provisioning":
    case "WaitingForVolumeBinding":
      return "starting — wait until it is running";
    default:
      return "not running — start it";
  }
}

/**
 * The desktops "Redirect to…" shows: the members you hold (holder is `username`) that are
 * running and assigned to you, and greyed the others you hold, with the reason. In the
 * snapshot's order; none when the identity is unknown.
 */
export function redirectTargets(
  pools: readonly PoolView[],
  username: string | null,
): RedirectTargets {
  const targets: RedirectTargets = { available: [], unavailable: [] };
  if (username === null || username === "") return targets;
  for (const pool of pools) {
    for (const member of pool.members) {
      if (member.holder !== username) continue;
      const reason = unavailableReason(member, username);
      const target: RedirectTarget = {
        namespace: member.namespace,
        pool: pool.name,
        member: member.name,
        power: member.power,
        reason,
      };
      (reason === null ? targets.available : targets.unavailable).push(target);
    }
  }
  return targets;
}

/** What "Redirect to…" says when it offers no desktop; null when it offers one. */
export function noTargetText(targets: RedirectTargets): string | null {
  if (targets.available.length > 0) return null;
  return targets.unavailable.length > 0
    ? "You have no running desktop: start one of yours first."
    : "You have no running desktop: Get a desktop first.";
}

/** Whether `target` is still in `targets.available` (a new snapshot may have stopped it). */
export function findTarget(
  targets: RedirectTargets,
  namespace: string,
  member: string,
): RedirectTarget | null {
  const same = (t: RedirectTarget) => t.namespace === namespace && t.member === member;
  return targets.available.find(same) ?? targets.unavailable.find(same) ?? null;
}

/** The success line after attaching: "Attached Yubico YubiKey (1050:0407) to devpool-1 …". */
export function describeRedirected(device: UsbDevice, session: SessionView): string {
  return `Attached ${usbDescription(device)} (${device.id}) to ${session.member}: it stays there until you detach it, unplug it or the desktop stops (session #${session.id}).`;
}
