import { describe, expect, it } from "vitest";
import type { LeaseView, MemberView } from "../bindings";
import { USB_NOTICE, member, pool, session, usbDevices, usbList, usbSession } from "./fixtures";
import {
  asSentence,
  attachedCount,
  attachedSession,
  describeAttached,
  describeClasses,
  describeRedirected,
  describeSpeed,
  deviceClassNames,
  findTarget,
  markWarning,
  noTargetText,
  redirectArgument,
  redirectTargets,
  splitCode,
  usbButtonLabel,
  usbButtonText,
  usbClassName,
  usbDescription,
  usbEmptyText,
  usbMarkDetail,
  usbMarkLabel,
  usbSourceText,
  usbTestId,
} from "./usb";

const { yubiKey, ccidReader, keyboard, massStorage } = usbDevices;

describe("device wording", () => {
  it("names classes in words", () => {
    expect(usbClassName(3)).toBe("HID");
    expect(usbClassName(0x0b)).toBe("smartcard");
    expect(usbClassName(8)).toBe("mass storage");
    expect(usbClassName(9)).toBe("hub");
    expect(usbClassName(1)).toBe("audio");
    expect(usbClassName(0x0e)).toBe("video");
    expect(usbClassName(0xff)).toBe("vendor-specific");
    expect(usbClassName(0x42)).toBe("class 0x42");
    expect(usbClassName(4)).toBe("class 0x04");
  });

  it("lists each interface class once, in order", () => {
    expect(deviceClassNames(yubiKey)).toEqual(["HID", "smartcard"]);
    expect(describeClasses(yubiKey)).toBe("HID, smartcard");
    expect(describeClasses(keyboard)).toBe("HID");
    expect(describeClasses(massStorage)).toBe("mass storage");
  });

  it("falls back to the device class, and says when there is none", () => {
    expect(describeClasses({ ...keyboard, interfaceClasses: [], deviceClass: 0xe0 })).toBe(
      "wireless",
    );
    expect(describeClasses({ ...keyboard, interfaceClasses: [], deviceClass: 0 })).toBe(
      "not reported",
    );
  });

  it("describes a device as the backend does", () => {
    expect(usbDescription(yubiKey)).toBe("Yubico YubiKey OTP+FIDO+CCID");
    expect(usbDescription({ ...yubiKey, manufacturer: null })).toBe("YubiKey OTP+FIDO+CCID");
    expect(usbDescription({ ...yubiKey, product: null })).toBe("Yubico");
    expect(usbDescription({ ...yubiKey, manufacturer: null, product: null })).toBe(
      "USB device 1050:0407",
    );
    expect(usbDescription({ ...yubiKey, manufacturer: " ", product: "" })).toBe(
      "USB device 1050:0407",
    );
  });

  it("words marks", () => {
    expect(usbMarkLabel("smartcard")).toBe("smartcard");
    expect(usbMarkLabel("securityKey")).toBe("security key");
    expect(usbMarkLabel("securityKeyByVendor")).toBe("security key (by vendor)");
    expect(usbMarkDetail("securityKeyByVendor")).toMatch(/could not be read/);
  });

  it("warns about what a marked device gives away", () => {
    expect(markWarning(yubiKey.marks)).toMatch(/security key with a smartcard/);
    expect(markWarning(ccidReader.marks)).toMatch(/smartcard device/);
    expect(markWarning(["securityKeyByVendor"])).toMatch(/^This is a security key:/);
    expect(markWarning(keyboard.marks)).toBeNull();
  });

  it("gives speeds their rate", () => {
    expect(describeSpeed("full")).toBe("full (12 Mb/s)");
    expect(describeSpeed("high")).toBe("high (480 Mb/s)");
    expect(describeSpeed("super+")).toBe("super+ (10 Gb/s)");
    expect(describeSpeed("unknown")).toBe("unknown");
  });

  it("makes test ids of device ids", () => {
    expect(usbTestId("1050:0407")).toBe("1050-0407");
    expect(usbTestId(massStorage.id)).toBe("0781-5567");
  });
});

describe("the list", () => {
  it("says how it follows changes", () => {
    expect(usbSourceText("hotplug")).toBe("updated as devices are plugged in and out");
    expect(usbSourceText("polling")).toBe("checked every second");
    expect(usbSourceText("recording")).toBe("recorded list (test build)");
    expect(usbSourceText("other")).toBe("other");
  });

  it("says why it is empty", () => {
    expect(usbEmptyText(usbList({ devices: [] }))).toBe("No USB devices are plugged in.");
    expect(
      usbEmptyText(
        usbList({
          devices: [],
          problem:
            "this machine has no USB bus (there is no /dev/bus/usb), so no device can be redirected from it",
        }),
      ),
    ).toBe(
      "This machine has no USB bus (there is no /dev/bus/usb), so no device can be redirected from it.",
    );
    expect(usbEmptyText(usbList({ devices: [], problem: "  " }))).toBe(
      "No USB devices are plugged in.",
    );
  });

  it("makes sentences of backend text", () => {
    expect(asSentence("libusb could not start")).toBe("Libusb could not start.");
    expect(asSentence("Done!")).toBe("Done!");
    expect(asSentence("")).toBe("");
  });

  it("shows the commands a fix quotes as code", () => {
    expect(splitCode("run `sudo udevadm trigger` and plug it in again")).toEqual([
      { code: false, text: "run " },
      { code: true, text: "sudo udevadm trigger" },
      { code: false, text: " and plug it in again" },
    ]);
    expect(splitCode("`a``b`")).toEqual([
      { code: true, text: "a" },
      { code: true, text: "b" },
    ]);
    expect(splitCode("no code")).toEqual([{ code: false, text: "no code" }]);
    expect(splitCode("one ` backtick")).toEqual([{ code: false, text: "one ` backtick" }]);
    expect(splitCode("")).toEqual([]);
  });

  it("words the header button", () => {
    expect(usbButtonText(4)).toBe("USB devices 4");
    expect(usbButtonText(null)).toBe("USB devices");
    expect(usbButtonLabel(4, 1)).toBe("USB devices: 4 plugged in, 1 attached");
    expect(usbButtonLabel(0, 0)).toBe("USB devices: 0 plugged in");
    expect(usbButtonLabel(null, 0)).toBe("USB devices: not listed yet");
  });

  it("names a device by id unless an identical one is plugged in too", () => {
    const devices = usbList().devices;
    expect(redirectArgument(yubiKey, devices)).toBe("1050:0407");
    const twin = { ...yubiKey, bus: 3, address: 5, busAddress: "3-5" };
    expect(redirectArgument(twin, [...devices, twin])).toBe("3-5");
    expect(redirectArgument(yubiKey, [...devices, twin])).toBe("1-7");
  });
});

describe("attached devices", () => {
  const sessions = [
    session(1),
    usbSession(2, yubiKey, "devpool-1"),
    usbSession(3, ccidReader, "devpool-2", {
      state: { kind: "ended", reason: "stopped", failed: false },
    }),
    session(4, { kind: "ssh", target: "usb 046d:c31c is not a usb session" }),
  ];

  it("finds the active usb session of a device by its target", () => {
    expect(attachedSession(yubiKey, sessions)?.id).toBe(2);
    expect(attachedSession(ccidReader, sessions)).toBeNull();
    expect(attachedSession(keyboard, sessions)).toBeNull();
    expect(attachedSession(massStorage, [])).toBeNull();
  });

  it("tells two devices of one kind apart by their bus address", () => {
    const twin = { ...yubiKey, busAddress: "3-5", bus: 3, address: 5 };
    const attached = [usbSession(5, twin, "x")];
    expect(attachedSession(twin, attached)).not.toBeNull();
    expect(attachedSession(yubiKey, attached)).toBeNull();
    expect(
      attachedSession(yubiKey, [
        usbSession(6, yubiKey, "x", { target: "usb 1050:04071 at 1-7 (y)" }),
      ]),
    ).toBeNull();
  });

  it("counts and words them", () => {
    expect(attachedCount(usbList().devices, sessions)).toBe(1);
    const attached = usbSession(2, yubiKey, "devpool-1");
    expect(describeAttached(attached)).toBe("attached to devpool-1");
    expect(describeRedirected(yubiKey, attached)).toBe(
      "Attached Yubico YubiKey OTP+FIDO+CCID (1050:0407) to devpool-1: it stays there until you detach it, unplug it or the desktop stops (session #2).",
    );
  });
});

describe("redirect targets", () => {
  const lease = (holder: string, active = true): LeaseView => ({
    holder,
    acquiredAt: "2026-12-01T09:00:00Z",
    renewedAt: "2026-12-01T09:00:00Z",
    durationSeconds: 3600,
    expiresAt: "2026-12-01T10:00:00Z",
    active,
    renewTimeInFuture: false,
    transitions: 0,
    resourceVersion: "1",
    problem: null,
    assignedBy: null,
  });
  const held = (name: string, holder: string, overrides: Partial<MemberView> = {}) =>
    member(name, {
      state: "assigned",
      stateLabel: "assigned",
      claimable: false,
      holder,
      labelHolder: holder,
      lease: lease(holder),
      power: "Running",
      ...overrides,
    });

  const pools = [
    pool("devpool", [
      held("devpool-1", "alice"),
      held("devpool-2", "alice", { power: "Stopped" }),
      held("devpool-3", "bob"),
      member("devpool-4"),
    ]),
    pool("lab", [held("lab-1", "alice", { namespace: "other" })], "other"),
  ];

  it("offers only your running desktops, and greys your others with the reason", () => {
    const targets = redirectTargets(pools, "alice");
    expect(targets.available.map((t) => `${t.namespace}/${t.member}`)).toEqual([
      "corral-vms/devpool-1",
      "other/lab-1",
    ]);
    expect(targets.available[0]).toEqual({
      namespace: "corral-vms",
      pool: "devpool",
      member: "devpool-1",
      power: "Running",
      reason: null,
    });
    expect(targets.unavailable).toEqual([
      {
        namespace: "corral-vms",
        pool: "devpool",
        member: "devpool-2",
        power: "Stopped",
        reason: "not running — start it",
      },
    ]);
    expect(noTargetText(targets)).toBeNull();
  });

  it("offers nothing without an identity", () => {
    expect(redirectTargets(pools, null)).toEqual({ available: [], unavailable: [] });
    expect(redirectTargets(pools, "")).toEqual({ available: [], unavailable: [] });
  });

  it("says when you have no running desktop", () => {
    const none = redirectTargets(pools, "carol");
    expect(noTargetText(none)).toBe("You have no running desktop: Get a desktop first.");
    const stopped = redirectTargets([pool("devpool", [pools[0].members[1]])], "alice");
    expect(noTargetText(stopped)).toBe("You have no running desktop: start one of yours first.");
  });

  it("words the other reasons as the backend judges them", () => {
    const reasons = redirectTargets(
      [
        pool("devpool", [
          held("p", "alice", { power: "Paused" }),
          held("s", "alice", { power: "Starting" }),
          held("c", "alice", { state: "conflict", labelHolder: "bob" }),
          held("e", "alice", {
            state: "freeStaleLease",
            labelHolder: null,
            lease: lease("alice", false),
          }),
          held("l", "alice", { state: "assignedLegacy", lease: null }),
          held("x", "alice", { state: "assignedLeaseExpired", lease: lease("alice", false) }),
        ]),
      ],
      "alice",
    );
    expect(reasons.unavailable.map((t) => [t.member, t.reason])).toEqual([
      ["p", "paused — unpause it"],
      ["s", "starting — wait until it is running"],
      ["c", "in conflict — an administrator resolves it"],
      ["e", "your claim has expired — get a desktop again"],
    ]);
    expect(reasons.available.map((t) => t.member)).toEqual(["l", "x"]);
  });

  it("finds a target again in a newer list", () => {
    const targets = redirectTargets(pools, "alice");
    expect(findTarget(targets, "other", "lab-1")?.reason).toBeNull();
    expect(findTarget(targets, "corral-vms", "devpool-2")?.reason).toBe("not running — start it");
    expect(findTarget(targets, "corral-vms", "devpool-3")).toBeNull();
  });
});

describe("fixtures", () => {
  it("are shaped like the backend's recording", () => {
    const list = usbList();
    expect(list.devices.map((d) => d.id)).toEqual([
      "076b:3031",
      "046d:c31c",
      "1050:0407",
      "0781:5567",
    ]);
    expect(list.notice).toBe(USB_NOTICE);
    expect(massStorage.access).toMatchObject({ writable: false, node: "/dev/bus/usb/002/002" });
    expect(yubiKey.access.node).toBe("/dev/bus/usb/001/007");
  });
});
