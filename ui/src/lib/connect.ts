/**
 * Pure helpers for Connect: the paths (VNC, RDP, SSH) as the dialog shows them, and the wording
 * of what the backend started. Who may connect, and what to ask first, is the backend's
 * (`member.offers.connect`); it judges every path and every connection too.
 */
import type {
  ConnectPath,
  MemberPaths,
  PathKind,
  RdpFileSaved,
  SessionView,
  SshOpened,
} from "../bindings";

/**
 * The SSH user name to start with: the identity's name up to its first "@"
 * ("alice@example.com" → "alice"); empty when the identity is unknown.
 */
export function defaultSshUser(username: string | null): string {
  if (username === null) return "";
  const at = username.indexOf("@");
  return (at < 0 ? username : username.slice(0, at)).trim();
}

/** The paths in the order the dialog lists them (see [`pathOrder`]). */
export const PATH_KINDS: readonly PathKind[] = ["vnc", "rdp", "ssh"];

/**
 * The order the dialog lists `paths` in: RDP first when the guest answers on 3389 (RDP in the
 * app is then the one-click way in, as the console is for the others), else VNC, RDP, SSH.
 */
export function pathOrder(paths: MemberPaths): readonly PathKind[] {
  return pathFor(paths, "rdp").available ? ["rdp", "vnc", "ssh"] : PATH_KINDS;
}

/** A path's name. */
export function pathTitle(kind: PathKind): string {
  switch (kind) {
    case "vnc":
      return "VNC console";
    case "rdp":
      return "Remote Desktop (RDP)";
    case "ssh":
      return "SSH";
  }
}

/** What a path gives, in one line. */
export function pathSummary(kind: PathKind): string {
  switch (kind) {
    case "vnc":
      return "The VM's screen, keyboard and mouse, from KubeVirt's VNC console.";
    case "rdp":
      return "The guest's RDP server (port 3389): in this window, or in a native client through a forward on this machine.";
    case "ssh":
      return "A shell on the guest's SSH server (port 22), through a forward on this machine.";
  }
}

/**
 * The path of `kind` in the backend's answer; one it did not report counts as unavailable,
 * saying so.
 */
export function pathFor(paths: MemberPaths, kind: PathKind): ConnectPath {
  return (
    paths.paths.find((p) => p.kind === kind) ?? {
      kind,
      available: false,
      reason: "the app did not report this path",
    }
  );
}

/** "Available", or "Not available: <reason>". */
export function pathAvailability(path: ConnectPath): string {
  if (path.available) return "Available";
  const reason = path.reason?.trim();
  return reason ? `Not available: ${reason}` : "Not available";
}

/**
 * Whether the desktop runs, in plain words: "The desktop is running", "The desktop is not
 * running"; any other phase of its VMI as KubeVirt names it ("The desktop is Scheduling").
 */
export function describePhase(paths: MemberPaths): string {
  if (paths.phase === null) return "The desktop is not running";
  return paths.phase === "Running" ? "The desktop is running" : `The desktop is ${paths.phase}`;
}

/** What someone viewing a console means: "Someone is viewing devpool-1's console". */
export function busyConsoleText(member: string): string {
  return `Someone is viewing ${member}'s console`;
}

function where(session: SessionView): string {
  return session.localAddress === null ? "" : ` through ${session.localAddress}`;
}

/**
 * What a started viewer or RDP client is: "remote-viewer started (pid 4242) through
 * 127.0.0.1:40123: session 3, listed in Sessions."
 */
export function describeStarted(session: SessionView): string {
  const helper = session.helper ?? "The client";
  const pid = session.helperPid === null ? "" : ` (pid ${session.helperPid})`;
  return `${helper} started${pid}${where(session)}: session ${session.id}, listed in Sessions.`;
}

/** Where the .rdp file is and what it points at. */
export function describeRdpSaved(saved: RdpFileSaved): string {
  return (
    `Saved ${saved.path}. It points at ${saved.session.localAddress ?? "a local forward"}, ` +
    `which stays open (session ${saved.session.id}) until you stop it in Sessions.`
  );
}

/** Whether ssh runs in a terminal, or what to do with the command line. */
export function describeSshOpened(opened: SshOpened): string {
  return opened.terminal
    ? `A terminal was opened with this command (session ${opened.session.id}).`
    : `No terminal was found: run this command in yours (session ${opened.session.id}).`;
}
