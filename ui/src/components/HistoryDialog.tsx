import { useEffect, useId, useState } from "react";
import { memberHistory } from "../api";
import type { ErrorView, MemberHistory } from "../bindings";
import { historyRows } from "../lib/history";
import { formatDateTimeWithZone } from "../lib/time";
import { ActionError } from "./ActionNotice";
import { Modal } from "./Modal";
import { Working } from "./Working";

type HistoryState =
  | { kind: "loading" }
  | { kind: "loaded"; history: MemberHistory }
  | { kind: "failed"; error: ErrorView };

type MemberHistoryDialogProps = {
  namespace: string;
  member: string;
  /** Changes whenever the member does in the live view: the history is read again. */
  revision: string;
  onClose: () => void;
};

/**
 * A member's history: its claims, releases, reclaims (with why), force releases and resets,
 * newest first, from the Events the broker (and a force release) recorded; beside it, how long
 * the API server keeps them.
 */
export function MemberHistoryDialog({
  namespace,
  member,
  revision,
  onClose,
}: MemberHistoryDialogProps) {
  const [state, setState] = useState<HistoryState>({ kind: "loading" });
  const [attempt, setAttempt] = useState(0);
  const noticeId = useId();

  useEffect(() => {
    let stale = false;
    void memberHistory(namespace, member).then((result) => {
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
  }, [namespace, member, revision, attempt]);

  return (
    <Modal
      title={`History of ${member}`}
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
          <Working label={`Reading the history of ${member}…`} />
        </p>
      ) : state.kind === "failed" ? (
        <div className="golden-failed">
          <ActionError source={`History of ${member}`} error={state.error} testId="history-error" />
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
          Nothing recorded for {member} in namespace {namespace}: no act within the event TTL, or it
          was never claimed in a pool with a broker.
        </p>
      ) : (
        <div className="table-wrap history-wrap">
          <table className="members history-table" data-testid="history-list">
            <caption className="sr-only">History of {member}, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">What</th>
                <th scope="col">User</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody>
              {historyRows(state.history.entries).map((row) => (
                <tr key={row.key} data-testid="history-entry" data-reason={row.reason}>
                  <td className="tabular">
                    <time dateTime={row.time}>{formatDateTimeWithZone(row.time) ?? row.time}</time>
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
                  <td className="mono truncate" title={row.who}>
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
