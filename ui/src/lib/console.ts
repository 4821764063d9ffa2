/**
 * Pure helpers for the in-app console: its status line and why it disconnected. The console
 * view feeds these with what open_console and noVNC report.
 */
import type { ErrorView, SessionView } from "../bindings";
import { busyConsoleText } from "./connect";

/** Where the console stands, from asking for it to its end. */
export type ConsoleStatus =
  /** open_console is running (the cluster is asked for the VMI's vnc stream). */
  | { kind: "opening"; takeOver: boolean }
  /** Someone else is viewing the console: nothing was opened. */
  | { kind: "busy" }
  /** open_console failed. */
  | { kind: "failed"; error: ErrorView }
  /** noVNC is connecting to the local websocket and shaking hands with the VM's VNC server. */
  | { kind: "connecting" }
  | { kind: "connected"; width: number; height: number; desktopName: string | null }
  | ({ kind: "disconnected" } & DisconnectFacts);

/** The status line's class of state, for styling and tests. */
export function consoleStatusState(
  status: ConsoleStatus,
): "connecting" | "connected" | "disconnected" {
  switch (status.kind) {
    case "opening":
    case "connecting":
      return "connecting";
    case "connected":
      return "connected";
    case "busy":
    case "failed":
    case "disconnected":
      return "disconnected";
  }
}

/** "1024×768", or "size unknown" before the first frame. */
export function formatScreenSize(width: number, height: number): string {
  return width > 0 && height > 0 ? `${width}×${height}` : "size unknown";
}

/**
 * The status line; `session` is the console's session as the backend lists it now, which may
 * say more about a disconnection than noVNC can.
 */
export function consoleStatusText(
  status: ConsoleStatus,
  member: string,
  session: SessionView | null,
): string {
  switch (status.kind) {
    case "opening":
      return status.takeOver
        ? `Connecting: taking over ${member}'s console…`
        : `Connecting: opening ${member}'s console…`;
    case "connecting":
      return "Connecting to the desktop…";
    case "connected": {
      const name = status.desktopName ? ` (${status.desktopName})` : "";
      return `Connected${name} · ${formatScreenSize(status.width, status.height)}`;
    }
    case "busy":
      return `Not connected: ${busyConsoleText(member).toLowerCase()}`;
    case "failed":
      return `Not connected: ${status.error.message}`;
    case "disconnected":
      return `Disconnected: ${disconnectReason(status, session)}`;
  }
}

/** What noVNC said about an ended connection. */
export type DisconnectFacts = {
  /** noVNC's `clean`: the connection ended as the protocol expects. */
  clean: boolean;
  /** Whether the desktop was ever shown on this connection. */
  wasConnected: boolean;
  /** The VNC server's reason when security negotiation failed. */
  securityFailure: string | null;
};

/**
 * Why the console disconnected, in words, with what the backend knows about it (`session`: the
 * console's session as listed, if it is).
 */
export function disconnectReason(facts: DisconnectFacts, session: SessionView | null): string {
  let reason: string;
  if (facts.securityFailure !== null) {
    reason = `the VNC server refused the connection (${facts.securityFailure})`;
  } else if (!facts.wasConnected) {
    reason = "the console could not be reached";
  } else if (facts.clean) {
    // The relay closes the websocket when the VMI's stream ends: a stop, a reboot of the VMI,
    // or another viewer taking the console over.
    reason =
      "the console closed the connection (the VM may have stopped or restarted, or someone " +
      "else took the console over)";
  } else {
    reason = "the connection to the console was lost";
  }
  if (session !== null) {
    if (session.state.kind === "ended") {
      reason += `; the session ended: ${session.state.reason}`;
    } else if (session.lastError !== null) {
      reason += `; last error: ${session.lastError}`;
    }
  }
  return reason;
}
