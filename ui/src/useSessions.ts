import { useCallback, useEffect, useRef, useState } from "react";
import { clearEndedSessions, listSessions, onSessionsChanged, stopSession } from "./api";
import type { ErrorView, SessionView } from "./bindings";

/**
 * The live session list: the `sessions-changed` event's list (the whole list on every change),
 * after one list_sessions for what started before the window listened. Stop and Clear ended
 * refetch nothing: the event brings the new list.
 */
export function useSessions() {
  const [sessions, setSessions] = useState<SessionView[]>([]);
  const [error, setError] = useState<{ source: string; error: ErrorView } | null>(null);
  const [stopping, setStopping] = useState<ReadonlySet<number>>(() => new Set());
  const [clearing, setClearing] = useState(false);
  const stoppingRef = useRef(new Set<number>());

  useEffect(() => {
    const flags = {
      disposed: false,
      /** Once an event came, it is newer than any list_sessions answer still on its way. */
      heard: false,
    };
    // Read through a function, so that changes made by callbacks are not narrowed away.
    const superseded = () => flags.disposed || flags.heard;
    let unlisten: (() => void) | null = null;
    void (async () => {
      const subscription = await onSessionsChanged((next) => {
        if (flags.disposed) return;
        flags.heard = true;
        setSessions(next);
      });
      if (flags.disposed) {
        if (subscription.ok) subscription.value();
        return;
      }
      if (!subscription.ok) {
        setError({ source: "Listening for sessions", error: subscription.error });
        return;
      }
      unlisten = subscription.value;
      const listed = await listSessions();
      if (superseded()) return;
      if (listed.ok) {
        setSessions(listed.value);
      } else {
        setError({ source: "Listing sessions", error: listed.error });
      }
    })();
    return () => {
      flags.disposed = true;
      unlisten?.();
    };
  }, []);

  const stop = useCallback((id: number) => {
    if (stoppingRef.current.has(id)) return;
    stoppingRef.current.add(id);
    setStopping(new Set(stoppingRef.current));
    setError(null);
    void stopSession(id).then((result) => {
      stoppingRef.current.delete(id);
      setStopping(new Set(stoppingRef.current));
      if (!result.ok) setError({ source: `Stop session ${id}`, error: result.error });
    });
  }, []);

  const clearEnded = useCallback(() => {
    setClearing(true);
    setError(null);
    void clearEndedSessions().then((result) => {
      setClearing(false);
      if (!result.ok) setError({ source: "Clear ended sessions", error: result.error });
    });
  }, []);

  const dismissError = useCallback(() => {
    setError(null);
  }, []);

  return { sessions, error, stopping, clearing, stop, clearEnded, dismissError };
}
