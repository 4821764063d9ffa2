import { describe, expect, it } from "vitest";
import { shownDialog, type DialogRequests } from "./dialogs";

const NONE: DialogRequests = {
  claim: false,
  connect: false,
  sessions: false,
  usb: false,
  capacity: false,
};

describe("shownDialog", () => {
  it("shows nothing when nothing is asked for", () => {
    expect(shownDialog(NONE)).toBeNull();
  });

  it("shows each dialog alone", () => {
    for (const kind of ["claim", "connect", "sessions", "usb", "capacity"] as const) {
      expect(shownDialog({ ...NONE, [kind]: true })).toBe(kind);
    }
  });

  it("puts a claim or pool action's dialog over everything, and Capacity under everything", () => {
    const all: DialogRequests = {
      claim: true,
      connect: true,
      sessions: true,
      usb: true,
      capacity: true,
    };
    expect(shownDialog(all)).toBe("claim");
    expect(shownDialog({ ...all, claim: false })).toBe("connect");
    expect(shownDialog({ ...all, claim: false, connect: false })).toBe("sessions");
    expect(shownDialog({ ...NONE, usb: true, capacity: true })).toBe("usb");
  });
});
