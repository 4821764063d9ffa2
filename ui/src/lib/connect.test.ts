import { describe, expect, it } from "vitest";
import {
  PATH_KINDS,
  busyConsoleText,
  defaultSshUser,
  describePhase,
  describeRdpSaved,
  describeSshOpened,
  describeStarted,
  pathAvailability,
  pathFor,
  pathTitle,
} from "./connect";
import { memberPaths, session } from "./fixtures";

describe("SSH user", () => {
  it("starts with the identity's name before @", () => {
    expect(defaultSshUser("alice")).toBe("alice");
    expect(defaultSshUser("alice@example.com")).toBe("alice");
    expect(defaultSshUser(null)).toBe("");
    expect(defaultSshUser("@odd")).toBe("");
  });
});

describe("paths", () => {
  it("lists VNC, RDP and SSH", () => {
    expect(PATH_KINDS).toEqual(["vnc", "rdp", "ssh"]);
    expect(PATH_KINDS.map(pathTitle)).toEqual(["VNC console", "Remote Desktop (RDP)", "SSH"]);
  });

  it("finds each path, and counts an unreported one as unavailable", () => {
    const paths = memberPaths();
    expect(pathFor(paths, "vnc").available).toBe(true);
    expect(pathFor(paths, "rdp").reason).toBe("nothing answers on port 3389");
    const missing = pathFor(memberPaths({ paths: [] }), "ssh");
    expect(missing).toEqual({
      kind: "ssh",
      available: false,
      reason: "the app did not report this path",
    });
  });

  it("says why a path is unavailable in words", () => {
    expect(pathAvailability({ kind: "vnc", available: true, reason: null })).toBe("Available");
    expect(pathAvailability({ kind: "rdp", available: false, reason: "VMI is paused" })).toBe(
      "Not available: VMI is paused",
    );
    expect(pathAvailability({ kind: "ssh", available: false, reason: null })).toBe("Not available");
    expect(pathAvailability({ kind: "ssh", available: false, reason: "  " })).toBe("Not available");
  });

  it("says in plain words whether the desktop runs", () => {
    expect(describePhase(memberPaths())).toBe("The desktop is running");
    expect(describePhase(memberPaths({ phase: null }))).toBe("The desktop is not running");
  });
});

describe("what was started", () => {
  it("names the viewer, its pid and its local address", () => {
    const viewer = session(4, {
      kind: "viewer",
      helper: "remote-viewer",
      helperPid: 4242,
      localAddress: "127.0.0.1:40123",
    });
    expect(describeStarted(viewer)).toBe(
      "remote-viewer started (pid 4242) through 127.0.0.1:40123: session 4, listed in Sessions.",
    );
    expect(describeStarted(session(5, { localAddress: null }))).toBe(
      "The client started: session 5, listed in Sessions.",
    );
  });

  it("says where the .rdp file is", () => {
    const saved = {
      path: "/home/alice/Downloads/devpool-1.rdp",
      session: session(6, { kind: "rdp", localAddress: "127.0.0.1:45000" }),
    };
    expect(describeRdpSaved(saved)).toBe(
      "Saved /home/alice/Downloads/devpool-1.rdp. It points at 127.0.0.1:45000, which stays " +
        "open (session 6) until you stop it in Sessions.",
    );
  });

  it("says whether ssh runs in a terminal", () => {
    const opened = {
      session: session(7, { kind: "ssh" }),
      commandLine: "ssh -p 40022 alice@127.0.0.1",
      terminal: true,
    };
    expect(describeSshOpened(opened)).toBe("A terminal was opened with this command (session 7).");
    expect(describeSshOpened({ ...opened, terminal: false })).toBe(
      "No terminal was found: run this command in yours (session 7).",
    );
  });

  it("says someone is viewing a console", () => {
    expect(busyConsoleText("devpool-1")).toBe("Someone is viewing devpool-1's console");
  });
});
