/**
 * Pure helpers for RDP in the app: what the web client's errors mean to a user, and the status
 * line. The RDP view feeds these with what open_rdp_in_app and IronRDP report.
 */
import type { SessionView } from "../bindings";

/** IronRDP's error kinds (IronErrorKind of @devolutions/iron-remote-desktop). */
export const IRON_ERROR = {
  general: 0,
  wrongPassword: 1,
  logonFailure: 2,
  accessDenied: 3,
  rdCleanPath: 4,
  proxyConnect: 5,
  negotiationFailure: 6,
} as const;

/** What IronRDP says about a failure (its IronError, read once). */
export type IronFacts = {
  kind: number;
  /** Its text (the first line of its backtrace). */
  text: string;
  /** An RDCleanPath error from the proxy: HTTP status, socket error or TLS alert. */
  httpStatus?: number;
  wsaError?: number;
  tlsAlert?: number;
};

/** Reads an IronError (or anything else that was thrown) into plain facts. */
export function ironFacts(reason: unknown): IronFacts {
  if (typeof reason === "object" && reason !== null && "kind" in reason) {
    const error = reason as {
      kind: () => number;
      backtrace?: () => string;
      rdcleanpathDetails?: () =>
        { httpStatusCode?: number; wsaErrorCode?: number; tlsAlertCode?: number } | undefined;
    };
    const details = error.rdcleanpathDetails?.();
    const text = (error.backtrace?.() ?? "").split("\n")[0]?.trim() ?? "";
    return {
      kind: error.kind(),
      text,
      httpStatus: details?.httpStatusCode,
      wsaError: details?.wsaErrorCode,
      tlsAlert: details?.tlsAlertCode,
    };
  }
  // An Error made in the RDP frame is no instance of this page's Error: its message is read
  // wherever it comes from.
  const message =
    typeof reason === "object" && reason !== null && "message" in reason ? reason.message : null;
  const text = typeof message === "string" ? message : String(reason);
  return { kind: IRON_ERROR.general, text };
}

/**
 * The words the backend's proxy session ends with when the guest hung up during CredSSP (a
 * refused login): vdi_core::rdp::LOGIN_REFUSED.
 */
export const LOGIN_REFUSED = "refused the user name or password";

/** Whether a session's end says the guest refused the login. */
export function sessionSaysLoginRefused(session: SessionView | null | undefined): string | null {
  if (session?.state.kind !== "ended") return null;
  return session.state.reason.includes(LOGIN_REFUSED) ? `${session.state.reason}.` : null;
}

/** Whether the failure was the guest refusing the login: the user should be asked again. */
export function isLoginRefused(facts: IronFacts): boolean {
  return facts.kind === IRON_ERROR.wrongPassword || facts.kind === IRON_ERROR.logonFailure;
}

/**
 * One sentence for a failed connection, naming the member and the fix. `backend` is what the
 * proxy session recorded as its last error, which is more precise when it is there.
 */
export function describeRdpFailure(
  member: string,
  facts: IronFacts,
  backend: string | null,
): string {
  switch (facts.kind) {
    case IRON_ERROR.wrongPassword:
    case IRON_ERROR.logonFailure:
      return `${member} refused the user name or password (NLA): check them and connect again.`;
    case IRON_ERROR.accessDenied:
      return `${member} let the login in but denies it remote access: ask its administrator to allow this user Remote Desktop.`;
    case IRON_ERROR.rdCleanPath:
      if (backend !== null) return `${backend}.`;
      if (facts.httpStatus === 403) {
        return "The app's RDP proxy refused the connection: its one-time token was already used. Connect again.";
      }
      if (facts.wsaError !== undefined) {
        return `Nothing answers on port 3389 of ${member}: its RDP server is not running.`;
      }
      if (facts.tlsAlert !== undefined) {
        return `TLS with ${member}'s RDP server failed, or its certificate is not the one accepted.`;
      }
      return `The app's RDP proxy could not reach ${member}.`;
    case IRON_ERROR.proxyConnect:
      return "The RDP view could not reach the app's RDP proxy on 127.0.0.1: connect again.";
    case IRON_ERROR.negotiationFailure:
      return `${member}'s RDP server refused the security the app offers${backend !== null ? `: ${backend}` : ""}.`;
    default:
      return `RDP to ${member} failed: ${backend ?? (facts.text || "no reason given")}.`;
  }
}

/** The size to ask the guest for: the stage's, in whole pixels, within what RDP allows. */
export function desktopSizeFor(width: number, height: number): { width: number; height: number } {
  // MS-RDPEDISP: 200 to 8192 pixels a side, and an even width.
  const clamp = (n: number) => Math.min(8192, Math.max(200, Math.floor(n)));
  const w = clamp(width);
  return { width: w - (w % 2), height: clamp(height) };
}

/**
 * The on-screen box of a `width`×`height` picture in a `boxWidth`×`boxHeight` stage: as large
 * as the stage allows with the picture's aspect kept (letterboxed), in whole pixels; zero for
 * an empty picture or stage.
 */
export function fitBox(
  width: number,
  height: number,
  boxWidth: number,
  boxHeight: number,
): { width: number; height: number } {
  if (width <= 0 || height <= 0 || boxWidth <= 0 || boxHeight <= 0) return { width: 0, height: 0 };
  const scale = Math.min(boxWidth / width, boxHeight / height);
  return {
    width: Math.min(boxWidth, Math.round(width * scale)),
    height: Math.min(boxHeight, Math.round(height * scale)),
  };
}
