import { describe, expect, it } from "vitest";
import { session } from "./fixtures";
import {
  describeConnections,
  describeHelper,
  describeSessionState,
  findSession,
  formatBytes,
  sessionCounts,
  sessionKindLabel,
  sessionMember,
  sessionsButtonLabel,
  sessionsButtonText,
} from "./sessions";

describe("formatBytes", () => {
  it("counts bytes below a KiB", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(1)).toBe("1 B");
    expect(formatBytes(1023)).toBe("1023 B");
  });

  it("uses binary units, one decimal below ten", () => {
    expect(formatBytes(1024)).toBe("1.0 KiB");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatBytes(12 * 1024 * 1024)).toBe("12 MiB");
    expect(formatBytes(3.25 * 1024 ** 3)).toBe("3.3 GiB");
    expect(formatBytes(2 * 1024 ** 4)).toBe("2.0 TiB");
  });

  it("moves up a unit rather than show 1024", () => {
    expect(formatBytes(1024 * 1024 - 1)).toBe("1.0 MiB");
  });

  it("shows a dash for nonsense", () => {
    expect(formatBytes(-1)).toBe("—");
    expect(formatBytes(Number.NaN)).toBe("—");
  });
});

describe("session counts", () => {
  const list = [
    session(1),
    session(2, { state: { kind: "ended", reason: "stopped", failed: false } }),
    session(3, { kind: "ssh" }),
  ];

  it("counts active and ended sessions", () => {
    expect(sessionCounts(list)).toEqual({ active: 2, ended: 1 });
    expect(sessionCounts([])).toEqual({ active: 0, ended: 0 });
  });

  it("words the header button", () => {
    expect(sessionsButtonText({ active: 2, ended: 1 })).toBe("Sessions 2");
    expect(sessionsButtonText({ active: 0, ended: 0 })).toBe("Sessions 0");
    expect(sessionsButtonLabel({ active: 2, ended: 1 })).toBe("Sessions: 2 active, 1 ended");
    expect(sessionsButtonLabel({ active: 1, ended: 0 })).toBe("Sessions: 1 active");
  });

  it("finds a session by id", () => {
    expect(findSession(list, 3)?.kind).toBe("ssh");
    expect(findSession(list, 9)).toBeNull();
    expect(findSession(list, null)).toBeNull();
  });
});

describe("session wording", () => {
  it("names every kind", () => {
    expect(sessionKindLabel("console")).toBe("Console in the app");
    expect(sessionKindLabel("viewer")).toBe("VNC viewer");
    expect(sessionKindLabel("rdp")).toBe("RDP client");
    expect(sessionKindLabel("rdpInApp")).toBe("RDP in the app");
    expect(sessionKindLabel("ssh")).toBe("SSH");
    expect(sessionKindLabel("forward")).toBe("Port forward");
    expect(sessionKindLabel("usb")).toBe("USB");
  });

  it("names the helper and its pid", () => {
    expect(describeHelper(session(1))).toBeNull();
    expect(describeHelper(session(1, { helper: "remote-viewer", helperPid: 4242 }))).toBe(
      "remote-viewer (pid 4242)",
    );
    expect(describeHelper(session(1, { helper: "xfreerdp" }))).toBe("xfreerdp");
    expect(describeHelper(session(1, { helperPid: 7 }))).toBe("pid 7");
  });

  it("says where a session stands", () => {
    expect(describeSessionState(session(1))).toBe("active");
    expect(
      describeSessionState(
        session(1, { state: { kind: "ended", reason: "viewer exited (0)", failed: false } }),
      ),
    ).toBe("ended: viewer exited (0)");
  });

  it("counts connections and names the member", () => {
    expect(describeConnections(session(1, { connections: 0, connectionsTotal: 3 }))).toBe(
      "0 open · 3 so far",
    );
    expect(sessionMember(session(1))).toBe("devpool-1 (corral-vms)");
  });
});
