import { useEffect, useState, type RefObject } from "react";

/** Where a remote view's connection stands, for its status line's class. */
export type RemoteState = "connecting" | "connected" | "disconnected";

/**
 * The full-screen state of a remote view (the console, RDP): follows the document's, toggles
 * `viewRef`'s element, says why when the platform refuses, and leaves full screen when the view
 * goes.
 */
export function useFullscreen(viewRef: RefObject<HTMLElement | null>) {
  const [fullscreen, setFullscreen] = useState(false);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    const onChange = () => {
      setFullscreen(document.fullscreenElement !== null);
    };
    document.addEventListener("fullscreenchange", onChange);
    return () => {
      document.removeEventListener("fullscreenchange", onChange);
      if (document.fullscreenElement !== null) {
        void document.exitFullscreen().catch(() => undefined);
      }
    };
  }, []);

  const toggle = () => {
    setError(null);
    if (document.fullscreenElement !== null) {
      void document.exitFullscreen().catch(() => undefined);
      return;
    }
    const view = viewRef.current;
    if (view === null) return;
    view.requestFullscreen().catch((reason: unknown) => {
      setError(
        `Full screen is not available here${reason instanceof Error ? `: ${reason.message}` : ""}.`,
      );
    });
  };

  return { fullscreen, error, toggle };
}

/** Names the window after the desktop shown (`what`: Console, RDP) while the view is open. */
export function useDesktopTitle(member: string, namespace: string, what: string) {
  useEffect(() => {
    const previous = document.title;
    document.title = `${member} (${namespace}) · ${what} · Corral VDI Console`;
    return () => {
      document.title = previous;
    };
  }, [member, namespace, what]);
}

type RemoteHeadingProps = {
  titleId: string;
  /** What the view shows: "Console", "RDP". */
  what: string;
  member: string;
  namespace: string;
  state: RemoteState;
  statusText: string;
  /** The status line's test id. */
  statusTestId: string;
};

/** A remote view's title and live status line. */
export function RemoteHeading({
  titleId,
  what,
  member,
  namespace,
  state,
  statusText,
  statusTestId,
}: RemoteHeadingProps) {
  return (
    <div className="console-heading">
      <h1 id={titleId} className="console-title">
        {what}: <span className="mono">{member}</span>{" "}
        <span className="console-ns mono">in namespace {namespace}</span>
      </h1>
      <p
        className={`console-status console-status-${state}`}
        data-testid={statusTestId}
        data-state={state}
        role="status"
        aria-live="polite"
      >
        {statusText}
      </p>
    </div>
  );
}
