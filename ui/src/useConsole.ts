import { useCallback, useRef, useState } from "react";
import { openConsole, stopSession } from "./api";
import type { ConsoleEndpoint, ErrorView } from "./bindings";

/** The member whose console is on screen. */
export type ConsoleTarget = { namespace: string; member: string };

/** Where opening the console stands (what noVNC does with an open one is the view's). */
export type ConsoleStep =
  | { kind: "opening"; takeOver: boolean }
  /** Someone else is viewing the console: nothing was opened; the user may take over. */
  | { kind: "busy"; error: ErrorView }
  | { kind: "failed"; error: ErrorView }
  | { kind: "open"; endpoint: ConsoleEndpoint };

export type ConsoleState = { target: ConsoleTarget; step: ConsoleStep };

/**
 * After stopping its own session (Reconnect), how often to ask again while the cluster still
 * says someone is viewing, and how long to wait in between.
 */
const BUSY_RETRIES = 2;
const BUSY_RETRY_MS = 750;

/**
 * The in-app console's session: open_console on demand (preserving another viewer's session
 * unless the user takes over), a new session on Reconnect (once the old one is stopped), and
 * stop_session on Close. Actions run from event handlers only, so a console is never opened
 * twice by a re-rendering effect. The answer to an attempt that was superseded (Reconnect,
 * Close) has its session stopped.
 */
export function useConsole() {
  const [state, setState] = useState<ConsoleState | null>(null);

  // Read only in callbacks.
  const requestRef = useRef(0);
  const sessionRef = useRef<number | null>(null);
  const targetRef = useRef<ConsoleTarget | null>(null);

  /** Stops the console's current session, if any; resolves once the backend has. */
  const stopCurrent = useCallback((): Promise<unknown> => {
    const id = sessionRef.current;
    sessionRef.current = null;
    return id === null ? Promise.resolve() : stopSession(id);
  }, []);

  const start = useCallback(
    (target: ConsoleTarget, takeOver: boolean) => {
      requestRef.current += 1;
      const request = requestRef.current;
      const hadSession = sessionRef.current !== null;
      targetRef.current = target;
      setState({ target, step: { kind: "opening", takeOver } });
      void (async () => {
        // Our own viewer must be gone before asking again, or it would count as someone else.
        await stopCurrent();
        let result = await openConsole(target.namespace, target.member, takeOver);
        // The cluster may still see the session just stopped for a moment: ask again then.
        for (let retry = 0; hadSession && retry < BUSY_RETRIES; retry += 1) {
          if (result.ok || result.error.kind !== "busy" || request !== requestRef.current) break;
          await new Promise((resolve) => setTimeout(resolve, BUSY_RETRY_MS));
          result = await openConsole(target.namespace, target.member, takeOver);
        }
        if (request !== requestRef.current) {
          // Superseded while it ran: nobody will use this console.
          if (result.ok) void stopSession(result.value.id);
          return;
        }
        if (result.ok) {
          sessionRef.current = result.value.id;
          setState({ target, step: { kind: "open", endpoint: result.value } });
        } else if (result.error.kind === "busy") {
          setState({ target, step: { kind: "busy", error: result.error } });
        } else {
          setState({ target, step: { kind: "failed", error: result.error } });
        }
      })();
    },
    [stopCurrent],
  );

  /** Opens `target`'s console, leaving anyone already viewing it alone. */
  const open = useCallback(
    (target: ConsoleTarget) => {
      start(target, false);
    },
    [start],
  );

  /** Opens the console again, disconnecting whoever else views it. */
  const takeOver = useCallback(() => {
    const target = targetRef.current;
    if (target !== null) start(target, true);
  }, [start]);

  /** Stops this console's session and opens a new one (leaving other viewers alone). */
  const reconnect = useCallback(() => {
    const target = targetRef.current;
    if (target !== null) start(target, false);
  }, [start]);

  /** Stops the console's session and leaves the view. */
  const close = useCallback(() => {
    requestRef.current += 1;
    void stopCurrent();
    targetRef.current = null;
    setState(null);
  }, [stopCurrent]);

  return { state, open, takeOver, reconnect, close };
}
