import type { ReactNode } from "react";

/** Placeholders for the main area when there are no pools to show. */

export function LoadingPools({ message }: { message: string }) {
  return (
    <div className="loading" aria-busy="true" data-testid="loading">
      <p className="loading-text">{message}</p>
      <div className="skeleton" aria-hidden="true">
        {[0, 1].map((section) => (
          <div className="skeleton-pool" key={section}>
            <div className="skeleton-bar skeleton-head" />
            {[0, 1, 2].map((row) => (
              <div className="skeleton-bar skeleton-row" key={row} />
            ))}
          </div>
        ))}
      </div>
    </div>
  );
}

export function Placeholder({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="placeholder">
      <h2 className="placeholder-title">{title}</h2>
      {children ? <div className="muted">{children}</div> : null}
    </div>
  );
}
