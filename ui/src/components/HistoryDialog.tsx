import { useEffect, useId, useState } from "react";
import { history } from "../api";
import type { ErrorView, History, HistoryOf } from "../bindings";
import { historyRows } from "../lib/history";
import { formatDateTimeWithZone } from "../lib/time";
import { ActionError } from "./ActionNotice";
import { Modal } from "./Modal";
import { Working } from "./Working";

type HistoryState =
  { kind: "loading" } | { kind: "loaded"; history: History } | { kind: "failed"; error: ErrorView };

type HistoryDialogProps = {
  namespace: string;
  /** A member's history, or a whole pool's. */
  of: HistoryOf;
  /** Changes whenever the member (or the pool) does in the live view: the history is read again. */
  revision: string;
  onClose: () => void;
};

/**
 * A member's history: its claims, releases, reclaims (with why), force releases and resets; or a
 * pool's: every member's, with the members added and removed, the warm buffer's starts and
 * stops, and resizes. Newest first, from the Events the broker (and a force release) recorded;
 * beside it, how long the API server keeps them.
 */
export function HistoryDialog({ namespace, of, revision, onClose }: HistoryDialogProps) {
  const [state, setState] = useState<HistoryState>({ kind: "loading" });
  const [attempt, setAttempt] = useState(0);
  const noticeId = useId();

  const pool = of.kind === "pool";
  const subject = pool ? `pool ${of.name}` : of.name;
  useEffect(() => {
    let stale = false;
    void history(namespace, { kind: pool ? "pool" : "member", name: of.name }).then((result) => {
      if (stale) return;
      setState(
        result.ok
          ? { kind: "loaded", history: result.value }
          : { kind: "failed", error: result.error },
      );
    });
    return () => {
      stale = true;
    };
  }, [namespace, pool, of.name, revision, attempt]);

  return (
    <Modal
      title={`History of ${subject}`}
      onClose={onClose}
      describedBy={noticeId}
      testId="history-dialog"
      wide
    >
      <p id={noticeId} className="form-hint" data-testid="history-ttl">
        {state.kind === "loaded"
          ? state.history.ttlNotice
          : "Events are kept only as long as the API server's event TTL."}
      </p>
      {state.kind === "loading" ? (
        <p className="muted" aria-busy="true">
          <Working label={`Reading the history of ${subject}…`} />
        </p>
      ) : state.kind === "failed" ? (
        <div className="golden-failed">
          <ActionError
            source={`History of ${subject}`}
            error={state.error}
            testId="history-error"
          />
          <button
            type="button"
            className="btn btn-small"
            onClick={() => {
              setState({ kind: "loading" });
              setAttempt((n) => n + 1);
            }}
          >
            Try again
          </button>
        </div>
      ) : state.history.entries.length === 0 ? (
        <p className="muted my-empty" data-testid="history-empty">
          Nothing recorded for {subject} in namespace {namespace}: no act within the event TTL, or{" "}
          {pool ? "the pool has no broker" : "it was never claimed in a pool with a broker"}.
        </p>
      ) : (
        <div className="table-wrap history-wrap">
          <table
            className={`members history-table${pool ? " history-of-pool" : ""}`}
            data-testid="history-list"
          >
            <caption className="sr-only">History of {subject}, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">What</th>
                {pool ? <th scope="col">Member</th> : null}
                <th scope="col">User</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody>
              {historyRows(state.history.entries).map((row) => (
                <tr key={row.key} data-testid="history-entry" data-reason={row.reason}>
                  <td className="tabular history-time">
                    <HistoryTime time={row.time} />
                  </td>
                  <td>
                    <span
                      className={`badge tone-${row.warning ? "amber" : "grey"}`}
                      title={row.message}
                    >
                      {row.reason}
                    </span>
                    {row.count > 1 ? <span className="muted"> ×{row.count}</span> : null}
                  </td>
                  {pool ? (
                    <td className="mono" data-testid="history-member">
                      {row.member ?? "the pool"}
                    </td>
                  ) : null}
                  <td className="mono" title={row.who}>
                    {row.who}
                  </td>
                  <td className="history-why" title={row.message}>
                    {row.why}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <div className="modal-actions">
        <button type="button" className="btn" onClick={onClose}>
          Close
        </button>
      </div>
    </Modal>
  );
}

/** "2026-12-01 09:30:05 UTC+01:00": the date, then the time with its zone, each on one line. */
function HistoryTime({ time }: { time: string }) {
  const shown = formatDateTimeWithZone(time);
  if (shown === null) return <>{time}</>;
  return (
    <time dateTime={time}>
      <span className="nowrap">{shown.slice(0, 10)}</span>{" "}
      <span className="nowrap">{shown.slice(11)}</span>
    </time>
  );
}
