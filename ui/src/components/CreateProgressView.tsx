import { useEffect, useId, useRef } from "react";
import { useNow } from "../lib/clock";
import {
  describeTally,
  formatPoolCreated,
  formatPoolDeleted,
  memberElapsedMs,
  stepLabel,
  stepTone,
  tallyCreateRun,
  type MemberStatus,
} from "../lib/pools";
import { formatDuration, formatElapsed } from "../lib/time";
import type { CreateState } from "../useNewPool";
import { ActionError } from "./ActionNotice";
import { Missing } from "./MemberCells";
import { Working } from "./Working";

type CreateProgressViewProps = {
  state: Exclude<CreateState, { kind: "idle" }>;
  onClose: () => void;
  /** After a failure: removes what the run made (`retryTimeoutSeconds`: then creates the pool
   * again with that per-member timeout). */
  onCleanUp: (retryTimeoutSeconds: number | null) => void;
};

type ProgressRowProps = {
  status: MemberStatus;
  /** The run's time so far while it runs (its total once it succeeded); null after a failure. */
  runElapsedMs: number | null;
};

function ProgressRow({ status, runElapsedMs }: ProgressRowProps) {
  const failed = status.step === "failed";
  const elapsedMs = memberElapsedMs(status, runElapsedMs);
  const detail = failed ? (status.error ?? status.message) : status.message;
  return (
    <tr data-testid={`progress-${status.member}`} data-step={status.step}>
      <th scope="row" className="cell-member">
        <span className="mono" title={status.clone ? `clone ${status.clone}` : undefined}>
          {status.member}
        </span>
      </th>
      <td>
        <span className={`badge tone-${stepTone(status.step)}`}>{stepLabel(status.step)}</span>
      </td>
      <td>
        {status.phase ? (
          <span className="mono truncate" title={status.phase}>
            {status.phase}
          </span>
        ) : (
          <Missing title="No clone phase reported yet" />
        )}
      </td>
      <td className={failed ? "progress-detail progress-failed" : "progress-detail"}>
        {detail ?? <Missing title="No condition message" />}
      </td>
      <td className="tabular">
        {elapsedMs === null ? <Missing title="Nothing reported" /> : formatElapsed(elapsedMs)}
      </td>
    </tr>
  );
}

/** What to do after a failed create: sentences and buttons, not CLI commands. */
function CleanUpChoices({
  state,
  onCleanUp,
}: {
  state: Extract<CreateState, { kind: "failed" }>;
  onCleanUp: (retryTimeoutSeconds: number | null) => void;
}) {
  const made = state.run.members.filter((m) => m.done && m.step !== "failed").length;
  const human = (seconds: number) =>
    seconds % 60 === 0 ? `${seconds / 60} min` : formatDuration(seconds * 1000);
  const longer = Math.min(state.request.timeoutSeconds * 2, 24 * 3600);
  const busy = state.cleaning;
  return (
    <div className="create-choices" data-testid="create-choices">
      <p className="modal-text">
        {made === 0
          ? "No member was made. "
          : `${made} of ${state.request.size} ${state.request.size === 1 ? "member was" : "members were"} made and are left in pool ${state.request.name}. `}
        <strong>Clean up</strong> removes whatever this run made, so the pool is as it was before.{" "}
        <strong>Retry</strong> cleans up and creates the pool again, giving each member{" "}
        {human(longer)} instead of {human(state.request.timeoutSeconds)} (a slow storage backend may
        need it).
      </p>
      {state.cleanUpError !== null ? (
        <ActionError source={`Clean up pool ${state.request.name}`} error={state.cleanUpError} />
      ) : null}
      <div className="create-choice-buttons">
        <button
          type="button"
          className="btn"
          data-testid="create-clean-up"
          disabled={busy}
          onClick={() => {
            onCleanUp(null);
          }}
        >
          {busy ? <Working label="Cleaning up" /> : "Clean up"}
        </button>
        <button
          type="button"
          className="btn"
          data-testid="create-retry"
          disabled={busy}
          onClick={() => {
            onCleanUp(longer);
          }}
        >
          Retry with {human(longer)} per member
        </button>
      </div>
    </div>
  );
}

/** A pool create once sent: its members' progress, then its outcome. */
export function CreateProgressView({ state, onClose, onCleanUp }: CreateProgressViewProps) {
  const now = useNow();
  const regionRef = useRef<HTMLDivElement>(null);
  const closeRef = useRef<HTMLButtonElement>(null);
  const barLabelId = useId();
  const { request, run } = state;
  const running = state.kind === "running";

  // The form's fields are gone: keep focus in the dialog, on the Close button once it ends.
  useEffect(() => {
    if (running) {
      regionRef.current?.focus();
    } else {
      closeRef.current?.focus();
    }
  }, [running]);

  const tally = tallyCreateRun(run);
  let runElapsedMs: number | null;
  if (state.kind === "running") {
    runElapsedMs = Math.max(0, now - state.sentAtMs);
  } else if (state.kind === "succeeded") {
    runElapsedMs = state.created.elapsedMs;
  } else {
    // Members not finished when it failed show nothing more than their last report.
    runElapsedMs = null;
  }
  // A refusal before anything was made leaves no progress worth showing.
  const showMembers = run.started !== null || running;

  return (
    <div className="create-view">
      <p className="modal-text">
        {running ? "Creating pool" : "Pool"} <strong>{request.name}</strong> in namespace{" "}
        <span className="mono">{request.namespace}</span> from{" "}
        <span className="mono">{request.golden}</span>, {request.size}{" "}
        {request.size === 1 ? "member" : "members"}
        {running ? "…" : " requested."}
      </p>

      {state.kind === "succeeded" ? (
        <div
          className="notice notice-success create-result"
          role="status"
          data-testid="create-result"
        >
          <span className="notice-icon" aria-hidden="true">
            ✓
          </span>
          <div className="create-result-body">
            <p className="notice-text">{formatPoolCreated(state.created)}</p>
            <dl className="facts">
              <dt>Members</dt>
              <dd className="mono">{state.created.members.join(", ")}</dd>
              <dt>Golden VM</dt>
              <dd className="mono">{state.created.golden}</dd>
              <dt>Clone API version</dt>
              <dd className="mono">{state.created.cloneApiVersion}</dd>
              <dt>Time taken</dt>
              <dd className="tabular">{formatElapsed(state.created.elapsedMs)}</dd>
              {state.created.entitled.length > 0 ? (
                <>
                  <dt>Who may use it</dt>
                  <dd data-testid="create-entitled">{state.created.entitled.join("; ")}</dd>
                </>
              ) : null}
            </dl>
            {state.created.warnings.length > 0 ? (
              <ul className="form-warnings" aria-label="Warnings">
                {state.created.warnings.map((warning) => (
                  <li key={warning} className="form-warning" data-testid="create-warning">
                    {warning}
                  </li>
                ))}
              </ul>
            ) : null}
          </div>
        </div>
      ) : null}
      {state.kind === "failed" ? (
        <>
          {/* The backend's suggestion names CLI commands; here the buttons below are the fix. */}
          <ActionError
            source={`Create pool ${request.name}`}
            error={{ ...state.error, suggestion: null }}
            testId="create-error"
          />
          {/* Only a run that passed its checks (its "started" report) made anything; before
              that, the pool's name may be someone else's pool, which Clean up would delete. */}
          {run.started !== null ? (
            <CleanUpChoices state={state} onCleanUp={onCleanUp} />
          ) : (
            <p className="modal-text" data-testid="create-nothing-made">
              Nothing was made, so there is nothing to clean up.
            </p>
          )}
        </>
      ) : null}
      {state.kind === "cleanedUp" ? (
        <div className="notice notice-success" role="status" data-testid="create-cleaned-up">
          <span className="notice-text">{formatPoolDeleted(state.deleted)}</span>
        </div>
      ) : null}

      {showMembers ? (
        <div
          ref={regionRef}
          className="create-progress"
          data-testid="create-progress"
          tabIndex={-1}
          aria-busy={running || undefined}
        >
          <div className="create-progress-head">
            <span id={barLabelId} data-testid="create-progress-count">
              {describeTally(tally)}
            </span>
            <span className="muted tabular">
              {/* Once it succeeded, the result above says how long it took. */}
              {state.kind === "running" ? (
                <Working label={`${formatDuration(runElapsedMs ?? 0)} elapsed`} />
              ) : null}
            </span>
          </div>
          <div
            className="create-bar"
            role="progressbar"
            aria-valuemin={0}
            aria-valuemax={Math.max(tally.total, 1)}
            aria-valuenow={tally.finished}
            aria-labelledby={barLabelId}
            data-testid="create-bar"
          >
            <span
              className="create-bar-done"
              style={{ width: `${(100 * tally.succeeded) / Math.max(tally.total, 1)}%` }}
            />
            <span
              className="create-bar-failed"
              data-testid="create-bar-failed"
              style={{ width: `${(100 * tally.failed) / Math.max(tally.total, 1)}%` }}
            />
          </div>
          {run.started === null ? (
            <p className="muted">Checking the namespace, the golden VM and the member names…</p>
          ) : (
            <p className="muted">
              VirtualMachineClone API <span className="mono">{run.started.cloneApiVersion}</span> ·
              run <span className="mono">{run.started.runId}</span>
            </p>
          )}
          {state.kind === "running" && state.progressError !== null ? (
            <p className="form-warning">
              Live progress is unavailable ({state.progressError.message}); the create runs
              regardless and its outcome will show here.
            </p>
          ) : null}
          <div className="table-wrap">
            <table className="members progress-table">
              <caption className="sr-only">
                Members of pool {request.name}
                {running ? " being created" : ""}
              </caption>
              <colgroup>
                <col className="col-progress-member" />
                <col className="col-progress-step" />
                <col className="col-progress-phase" />
                <col className="col-progress-message" />
                <col className="col-progress-elapsed" />
              </colgroup>
              <thead>
                <tr>
                  <th scope="col">Member</th>
                  <th scope="col">Step</th>
                  <th scope="col">Phase</th>
                  <th scope="col">Message</th>
                  <th scope="col">Elapsed</th>
                </tr>
              </thead>
              <tbody>
                {run.members.map((status) => (
                  <ProgressRow key={status.member} status={status} runElapsedMs={runElapsedMs} />
                ))}
              </tbody>
            </table>
          </div>
        </div>
      ) : null}

      {running ? (
        <p className="form-hint" data-testid="create-running-note">
          A create cannot be stopped half-way: this dialog stays open until every member is done or
          has failed (Esc does nothing meanwhile).
        </p>
      ) : (
        <div className="modal-actions">
          <button
            ref={closeRef}
            type="button"
            className="btn btn-primary"
            data-testid="create-close"
            onClick={onClose}
          >
            Close
          </button>
        </div>
      )}
    </div>
  );
}
