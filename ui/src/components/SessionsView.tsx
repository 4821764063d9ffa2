import { useId, useRef } from "react";
import type { ErrorView, SessionView } from "../bindings";
import {
  describeConnections,
  describeHelper,
  formatBytes,
  sessionCounts,
  sessionKindLabel,
  sessionTestId,
} from "../lib/sessions";
import { formatDateTimeWithZone } from "../lib/time";
import { ActionError } from "./ActionNotice";
import { Missing } from "./MemberCells";
import { Modal } from "./Modal";
import { Working } from "./Working";

type SessionsViewProps = {
  /** The live list (`sessions-changed`), oldest first. */
  sessions: readonly SessionView[];
  /** Sessions whose Stop is running. */
  stopping: ReadonlySet<number>;
  clearing: boolean;
  error: { source: string; error: ErrorView } | null;
  onStop: (id: number) => void;
  onClearEnded: () => void;
  onDismissError: () => void;
  onClose: () => void;
};

/**
 * Every stream, forward and helper process the app started, live: what it reaches, where it
 * listens, what it carried, and where it stands. Active ones can be stopped; all of them end
 * when the app exits.
 */
export function SessionsView({
  sessions,
  stopping,
  clearing,
  error,
  onStop,
  onClearEnded,
  onDismissError,
  onClose,
}: SessionsViewProps) {
  const introId = useId();
  const closeRef = useRef<HTMLButtonElement>(null);
  const counts = sessionCounts(sessions);
  return (
    <Modal
      title="Sessions"
      onClose={onClose}
      describedBy={introId}
      initialFocusRef={closeRef}
      testId="sessions-view"
      className="modal-sessions"
    >
      <p id={introId} className="modal-text muted">
        Consoles, viewers, forwards and the programs they started. They all end when the app exits.{" "}
        {counts.active} active, {counts.ended} ended.
      </p>
      {error ? (
        <ActionError
          source={error.source}
          error={error.error}
          onDismiss={onDismissError}
          testId="sessions-error"
        />
      ) : null}
      {sessions.length === 0 ? (
        <p className="muted sessions-empty" data-testid="sessions-empty">
          No sessions: Connect… on a running desktop starts one.
        </p>
      ) : (
        <div className="table-wrap sessions-wrap">
          <table className="members sessions-table">
            <caption className="sr-only">Sessions, oldest first</caption>
            <thead>
              <tr>
                <th scope="col">Kind</th>
                <th scope="col">Member</th>
                <th scope="col">Target</th>
                <th scope="col">Local address</th>
                <th scope="col">Helper</th>
                <th scope="col">Started</th>
                <th scope="col">In / out</th>
                <th scope="col">Connections</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {sessions.map((s) => (
                <SessionRow key={s.id} session={s} stopping={stopping.has(s.id)} onStop={onStop} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      <div className="modal-actions">
        <button
          type="button"
          className="btn"
          data-testid="clear-ended"
          disabled={counts.ended === 0 || clearing}
          aria-busy={clearing || undefined}
          title={
            counts.ended === 0 ? "No session has ended" : "Remove ended sessions from the list"
          }
          onClick={onClearEnded}
        >
          {clearing ? <Working /> : "Clear ended"}
        </button>
        <button
          ref={closeRef}
          type="button"
          className="btn"
          data-testid="sessions-close"
          onClick={onClose}
        >
          Close
        </button>
      </div>
    </Modal>
  );
}

function SessionRow({
  session,
  stopping,
  onStop,
}: {
  session: SessionView;
  stopping: boolean;
  onStop: (id: number) => void;
}) {
  const helper = describeHelper(session);
  const started = formatDateTimeWithZone(session.startedAt);
  const active = session.state.kind === "active";
  return (
    <tr
      data-testid={sessionTestId(session.id)}
      data-state={session.state.kind}
      className={active ? undefined : "session-ended"}
    >
      <th scope="row">
        {sessionKindLabel(session.kind)} <span className="muted">#{session.id}</span>
      </th>
      <td className="session-member">
        <span className="mono nowrap">{session.member}</span>{" "}
        <span className="muted mono nowrap">({session.namespace})</span>
      </td>
      <td className="mono">{session.target}</td>
      <td className="mono">
        {session.localAddress ?? <Missing title="Nothing listens on this machine" />}
      </td>
      <td className="mono session-wrap">
        {helper === null ? (
          <Missing title="No helper program" />
        ) : (
          <>
            <span className="nowrap">{session.helper ?? ""}</span>{" "}
            <span className="nowrap">
              {session.helperPid === null
                ? ""
                : session.helper === null
                  ? `pid ${session.helperPid}`
                  : `(pid ${session.helperPid})`}
            </span>
          </>
        )}
      </td>
      <td className="tabular session-wrap">
        {/* "2026-12-01 09:30:05 UTC+01:00": the date, then the time with its zone. */}
        {started === null ? (
          session.startedAt
        ) : (
          <time dateTime={session.startedAt} title={session.startedAt}>
            <span className="nowrap">{started.slice(0, 10)}</span>{" "}
            <span className="nowrap">{started.slice(11)}</span>
          </time>
        )}
      </td>
      <td
        className="tabular"
        title={`${String(session.bytesIn)} bytes in, ${String(session.bytesOut)} bytes out`}
      >
        {formatBytes(session.bytesIn)} / {formatBytes(session.bytesOut)}
      </td>
      <td className="tabular session-wrap">{describeConnections(session)}</td>
      <td className="session-state">
        {session.state.kind === "active" ? (
          <span className="badge tone-green">active</span>
        ) : (
          <span className="session-ended-reason">
            <span className="badge tone-grey">ended</span> {session.state.reason}
          </span>
        )}
        {session.lastError !== null ? (
          <span className="session-error" data-testid={`session-error-${session.id}`}>
            Last error: {session.lastError}
          </span>
        ) : null}
      </td>
      <td className="cell-actions">
        {active ? (
          <button
            type="button"
            className="btn btn-small btn-quiet-danger"
            data-testid={`stop-session-${session.id}`}
            disabled={stopping}
            aria-busy={stopping || undefined}
            aria-label={
              stopping
                ? undefined
                : `Stop session ${session.id} (${session.kind}, ${session.member})`
            }
            onClick={() => {
              onStop(session.id);
            }}
          >
            {stopping ? <Working /> : "Stop"}
          </button>
        ) : null}
      </td>
    </tr>
  );
}
