import type { ErrorView } from "../bindings";
import { errorTitle } from "../lib/errors";

type BannerProps = {
  /** Red for failures that stop the view, amber for partial problems. */
  severity: "error" | "warning";
  /** What failed, e.g. "Live feed". Prefixed to the error's own headline. */
  source?: string;
  error: ErrorView;
  /** Extra sentence after the suggestion. */
  note?: string;
  action?: { label: string; onClick: () => void };
};

export function Banner({ severity, source, error, note, action }: BannerProps) {
  const headline = source ? `${source}: ${errorTitle(error.kind)}` : errorTitle(error.kind);
  return (
    <div className={`banner banner-${severity}`} role="alert" data-testid="banner">
      <span className="banner-icon" aria-hidden="true">
        !
      </span>
      <div className="banner-body">
        <p className="banner-title">
          <strong>{headline}.</strong> <span className="banner-message">{error.message}</span>
        </p>
        {error.suggestion ? (
          <p className="banner-suggestion">
            <span className="banner-label">Fix:</span> {error.suggestion}
          </p>
        ) : null}
        {note ? <p className="banner-note">{note}</p> : null}
      </div>
      {action ? (
        <button type="button" className="btn banner-action" onClick={action.onClick}>
          {action.label}
        </button>
      ) : null}
    </div>
  );
}
