/**
 * Pure helpers for the Sessions view: what each session is, how much it carried, where it
 * stands. The backend's supervisor tracks the sessions; these only word what it reports.
 */
import type { SessionKind, SessionView } from "../bindings";

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"] as const;

/**
 * A byte count in binary units: "0 B", "512 B", "1.5 KiB", "12 MiB", "3.2 GiB". One decimal
 * below 10 of a unit, none above; negative or non-finite input shows as "—".
 */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return "—";
  if (n < 1024) return `${Math.floor(n)} B`;
  let unit = 0;
  let scaled = n;
  while (scaled >= 1024 && unit < UNITS.length - 1) {
    scaled /= 1024;
    unit += 1;
  }
  let text = scaled < 10 ? scaled.toFixed(1) : scaled.toFixed(0);
  // 1023.96 KiB rounds to "1024": say "1.0 MiB" instead.
  if (Number(text) >= 1024 && unit < UNITS.length - 1) {
    unit += 1;
    text = (scaled / 1024).toFixed(1);
  }
  return `${text} ${UNITS[unit]}`;
}

/** How many sessions are active and how many have ended. */
export type SessionCounts = { active: number; ended: number };

export function sessionCounts(sessions: readonly SessionView[]): SessionCounts {
  let active = 0;
  for (const s of sessions) {
    if (s.state.kind === "active") active += 1;
  }
  return { active, ended: sessions.length - active };
}

/** The header button's text: "Sessions 2" (the active ones). */
export function sessionsButtonText(counts: SessionCounts): string {
  return `Sessions ${counts.active}`;
}

/** The header button's accessible name: "Sessions: 2 active, 1 ended". */
export function sessionsButtonLabel(counts: SessionCounts): string {
  const ended = counts.ended > 0 ? `, ${counts.ended} ended` : "";
  return `Sessions: ${counts.active} active${ended}`;
}

/** What a kind of session is for, in words. */
export function sessionKindLabel(kind: SessionKind): string {
  switch (kind) {
    case "console":
      return "Console in the app";
    case "viewer":
      return "VNC viewer";
    case "rdp":
      return "RDP client";
    case "rdpInApp":
      return "RDP in the app";
    case "ssh":
      return "SSH";
    case "forward":
      return "Port forward";
    case "usb":
      return "USB";
  }
}

/** "remote-viewer (pid 4242)", "xfreerdp", or null when no helper program runs. */
export function describeHelper(session: SessionView): string | null {
  if (session.helper === null || session.helper === "") {
    return session.helperPid === null ? null : `pid ${session.helperPid}`;
  }
  return session.helperPid === null
    ? session.helper
    : `${session.helper} (pid ${session.helperPid})`;
}

/** "1 open · 3 so far". */
export function describeConnections(session: SessionView): string {
  return `${session.connections} open · ${session.connectionsTotal} so far`;
}

/** "active", or "ended: <reason>". */
export function describeSessionState(session: SessionView): string {
  return session.state.kind === "active" ? "active" : `ended: ${session.state.reason}`;
}

/** The member a session reaches, with its namespace: "devpool-1 (corral-vms)". */
export function sessionMember(session: SessionView): string {
  return `${session.member} (${session.namespace})`;
}

/** The session with `id` in the list, if it is there. */
export function findSession(
  sessions: readonly SessionView[],
  id: number | null,
): SessionView | null {
  if (id === null) return null;
  return sessions.find((s) => s.id === id) ?? null;
}

/** The data-testid of a session's row. */
export function sessionTestId(id: number): string {
  return `session-${id}`;
}
