import { describe, expect, it } from "vitest";
import {
  consoleStatusState,
  consoleStatusText,
  disconnectReason,
  formatScreenSize,
  type ConsoleStatus,
} from "./console";
import { session } from "./fixtures";

const lost = { clean: false, wasConnected: true, securityFailure: null };

describe("consoleStatusText", () => {
  it("says it is connecting", () => {
    expect(consoleStatusText({ kind: "opening", takeOver: false }, "devpool-1", null)).toBe(
      "Connecting: opening devpool-1's console…",
    );
    expect(consoleStatusText({ kind: "opening", takeOver: true }, "devpool-1", null)).toBe(
      "Connecting: taking over devpool-1's console…",
    );
    expect(consoleStatusText({ kind: "connecting" }, "devpool-1", null)).toBe(
      "Connecting to the desktop…",
    );
  });

  it("gives the framebuffer size once connected", () => {
    const connected: ConsoleStatus = {
      kind: "connected",
      width: 1280,
      height: 800,
      desktopName: null,
    };
    expect(consoleStatusText(connected, "devpool-1", null)).toBe("Connected · 1280×800");
    expect(consoleStatusText({ ...connected, desktopName: "QEMU (vm)" }, "devpool-1", null)).toBe(
      "Connected (QEMU (vm)) · 1280×800",
    );
  });

  it("says why it is not connected", () => {
    expect(consoleStatusText({ kind: "busy" }, "devpool-1", null)).toBe(
      "Not connected: someone is viewing devpool-1's console",
    );
    const error = {
      kind: "notFound" as const,
      message: "devpool-1 is not running",
      suggestion: null,
      retryable: false,
    };
    expect(consoleStatusText({ kind: "failed", error }, "devpool-1", null)).toBe(
      "Not connected: devpool-1 is not running",
    );
    expect(consoleStatusText({ kind: "disconnected", ...lost }, "devpool-1", null)).toBe(
      "Disconnected: the connection to the console was lost",
    );
  });

  it("classes each status", () => {
    expect(consoleStatusState({ kind: "opening", takeOver: false })).toBe("connecting");
    expect(consoleStatusState({ kind: "connecting" })).toBe("connecting");
    expect(consoleStatusState({ kind: "connected", width: 1, height: 1, desktopName: null })).toBe(
      "connected",
    );
    expect(consoleStatusState({ kind: "busy" })).toBe("disconnected");
    expect(consoleStatusState({ kind: "disconnected", ...lost })).toBe("disconnected");
  });
});

describe("disconnectReason", () => {
  it("tells a refused handshake, an unreachable console, a close and a loss apart", () => {
    expect(disconnectReason({ ...lost, securityFailure: "too many clients" }, null)).toBe(
      "the VNC server refused the connection (too many clients)",
    );
    expect(disconnectReason({ ...lost, wasConnected: false }, null)).toBe(
      "the console could not be reached",
    );
    expect(disconnectReason({ ...lost, clean: true }, null)).toBe(
      "the console closed the connection (the VM may have stopped or restarted, or someone " +
        "else took the console over)",
    );
    expect(disconnectReason(lost, null)).toBe("the connection to the console was lost");
  });

  it("adds what the session list knows", () => {
    expect(
      disconnectReason(
        lost,
        session(1, { state: { kind: "ended", reason: "stopped by you", failed: false } }),
      ),
    ).toBe("the connection to the console was lost; the session ended: stopped by you");
    expect(
      disconnectReason(lost, session(1, { lastError: "Active VNC connection. Request denied." })),
    ).toBe(
      "the connection to the console was lost; last error: Active VNC connection. Request denied.",
    );
    expect(disconnectReason(lost, session(1))).toBe("the connection to the console was lost");
  });
});

describe("formatScreenSize", () => {
  it("gives width×height, or says it is unknown", () => {
    expect(formatScreenSize(1024, 768)).toBe("1024×768");
    expect(formatScreenSize(0, 0)).toBe("size unknown");
  });
});
