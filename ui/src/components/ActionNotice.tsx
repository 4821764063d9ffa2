import { useEffect, useState } from "react";
import type { ErrorView } from "../bindings";
import { errorSeverity, errorTitle } from "../lib/errors";

/** The outcome of the last claim action, shown until dismissed or the next action. */
export type Notice =
  | { id: number; kind: "success"; text: string }
  | { id: number; kind: "error"; source: string; error: ErrorView };

/** How long a success stays on screen unless the pointer or focus is on it. */
const SUCCESS_MS = 15_000;

function DismissButton({ onClick }: { onClick: () => void }) {
  return (
    <button
      type="button"
      className="notice-close"
      aria-label="Dismiss"
      title="Dismiss"
      onClick={onClick}
    >
      <span aria-hidden="true">×</span>
    </button>
  );
}

type ActionErrorProps = {
  /** What was being done: "Release devpool-1". */
  source: string;
  error: ErrorView;
  onDismiss?: () => void;
  testId?: string;
};

/**
 * A failed action, plainly: the backend's message in bold and what to do. Refusals (nothing
 * changed) and partial results (a state the rules allow was left) are warnings.
 */
export function ActionError({
  source,
  error,
  onDismiss,
  testId = "action-error",
}: ActionErrorProps) {
  const severity = errorSeverity(error.kind);
  return (
    <div
      className={`banner banner-${severity} action-error`}
      role="alert"
      data-testid={testId}
      data-kind={error.kind}
    >
      <span className="banner-icon" aria-hidden="true">
        !
      </span>
      <div className="banner-body">
        <p className="banner-kicker">
          {source}: {errorTitle(error.kind)}
        </p>
        <p className="banner-message">
          <strong>{error.message}</strong>
        </p>
        {error.kind === "partial" ? (
          <p className="banner-note">
            Only part of it was done; the member was left in the state described above.
          </p>
        ) : null}
        {error.kind === "refused" ? <p className="banner-note">Nothing was changed.</p> : null}
        {error.suggestion ? (
          <p className="banner-suggestion">
            <span className="banner-label">Fix:</span> {error.suggestion}
          </p>
        ) : null}
      </div>
      {onDismiss ? <DismissButton onClick={onDismiss} /> : null}
    </div>
  );
}

function ActionSuccess({ text, onDismiss }: { text: string; onDismiss: () => void }) {
  const [paused, setPaused] = useState(false);
  useEffect(() => {
    if (paused) return;
    const timer = setTimeout(onDismiss, SUCCESS_MS);
    return () => {
      clearTimeout(timer);
    };
  }, [paused, onDismiss]);
  return (
    <div
      className="notice notice-success"
      role="status"
      data-testid="action-result"
      onMouseEnter={() => {
        setPaused(true);
      }}
      onMouseLeave={() => {
        setPaused(false);
      }}
      onFocus={() => {
        setPaused(true);
      }}
      onBlur={() => {
        setPaused(false);
      }}
    >
      <span className="notice-icon" aria-hidden="true">
        ✓
      </span>
      <p className="notice-text">{text}</p>
      <DismissButton onClick={onDismiss} />
    </div>
  );
}

/** The last action's outcome. `onDismiss` must be stable, or a success never times out. */
export function ActionNotice({ notice, onDismiss }: { notice: Notice; onDismiss: () => void }) {
  return notice.kind === "success" ? (
    <ActionSuccess key={notice.id} text={notice.text} onDismiss={onDismiss} />
  ) : (
    <ActionError
      key={notice.id}
      source={notice.source}
      error={notice.error}
      onDismiss={onDismiss}
    />
  );
}
