import { useId, useRef, useState, type SubmitEvent } from "react";
import type { ErrorView, PoolView } from "../bindings";
import { assignedMembers, deleteBlocker, describeAssigned, isAssigned } from "../lib/pools";
import { ActionError } from "./ActionNotice";
import { StateBadge } from "./MemberCells";
import { Modal } from "./Modal";
import { Working } from "./Working";

type DeletePoolDialogProps = {
  namespace: string;
  pool: string;
  /** The pool as the current snapshot shows it; null when it is no longer there. */
  view: PoolView | null;
  /** The delete of this pool is running. */
  busy: boolean;
  /** Why the last attempt failed (a refusal naming the assigned members, …). */
  error: ErrorView | null;
  onSubmit: (force: boolean) => void;
  onClose: () => void;
};

function ignore() {
  // Not while the delete runs: its outcome is shown here.
}

/**
 * Confirms deleting a pool: its members, their Leases and leftover clone objects. What it lists
 * comes from the live snapshot; the backend judges again (and refuses while members are
 * assigned, unless forced).
 */
export function DeletePoolDialog({
  namespace,
  pool,
  view,
  busy,
  error,
  onSubmit,
  onClose,
}: DeletePoolDialogProps) {
  const inputRef = useRef<HTMLInputElement>(null);
  const introId = useId();
  const inputId = useId();
  const blockerId = useId();
  const [typed, setTyped] = useState("");
  const [force, setForce] = useState(false);

  const members = view?.members ?? [];
  const assigned = view === null ? [] : assignedMembers(view);
  // The backend may know of assignments the snapshot has not shown yet.
  const offerForce = assigned.length > 0 || error?.kind === "conflict";
  const blocker = deleteBlocker(pool, typed, assigned.length, force);

  const submit = (event: SubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy || blocker !== null) return;
    onSubmit(offerForce && force);
  };

  return (
    <Modal
      title={`Delete pool ${pool}`}
      role="alertdialog"
      onClose={busy ? ignore : onClose}
      initialFocusRef={inputRef}
      describedBy={introId}
      testId="delete-dialog"
    >
      <form className="modal-form" onSubmit={submit} noValidate>
        <div id={introId} className="modal-text">
          <p>
            Deletes pool <strong>{pool}</strong> in namespace{" "}
            <span className="mono">{namespace}</span>. This removes:
          </p>
        </div>
        <ul className="delete-list" data-testid="delete-members">
          {members.map((m) => {
            const taken = isAssigned(m);
            return (
              <li
                key={m.name}
                className={taken ? "delete-member delete-assigned" : "delete-member"}
                data-testid={`delete-member-${m.name}`}
                data-assigned={taken || undefined}
              >
                <span className="mono">{m.name}</span>
                <StateBadge member={m} />
                {m.holder ? (
                  <span className="muted">
                    held by <span className="mono">{m.holder}</span>
                  </span>
                ) : null}
              </li>
            );
          })}
          {members.length === 0 ? (
            <li className="muted delete-member">
              {view === null
                ? "The pool is no longer in the live view; anything left of it."
                : "No member VMs."}
            </li>
          ) : null}
          <li className="muted delete-member">
            their <span className="mono">corral-vdi-&lt;member&gt;</span> Leases and any leftover
            clone objects
          </li>
        </ul>
        {offerForce ? (
          <div className="delete-force">
            {assigned.length > 0 ? (
              <p className="form-warning" data-testid="delete-assigned">
                {describeAssigned(assigned)}
              </p>
            ) : null}
            <label className="checkbox checkbox-wrap">
              <input
                type="checkbox"
                data-testid="delete-force"
                checked={force}
                disabled={busy}
                onChange={(e) => {
                  setForce(e.target.checked);
                }}
              />
              Delete assigned members too (their users lose their desktops)
            </label>
          </div>
        ) : null}
        <div className="form-field">
          <label htmlFor={inputId}>Type the pool name to confirm</label>
          <input
            ref={inputRef}
            id={inputId}
            type="text"
            className="user-input"
            data-testid="delete-confirm-name"
            value={typed}
            placeholder={pool}
            readOnly={busy}
            spellCheck={false}
            autoCapitalize="off"
            autoCorrect="off"
            autoComplete="off"
            aria-describedby={blocker !== null ? blockerId : undefined}
            onChange={(e) => {
              setTyped(e.target.value);
            }}
          />
          {blocker !== null ? (
            <p id={blockerId} className="form-hint" data-testid="delete-blocked">
              {blocker}
            </p>
          ) : null}
        </div>
        {error ? <ActionError source={`Delete pool ${pool}`} error={error} /> : null}
        <div className="modal-actions">
          <button type="button" className="btn" disabled={busy} onClick={onClose}>
            Cancel
          </button>
          <button
            type="submit"
            className="btn btn-danger"
            data-testid="delete-submit"
            disabled={busy || blocker !== null}
            aria-busy={busy || undefined}
          >
            {busy ? <Working /> : "Delete pool"}
          </button>
        </div>
      </form>
    </Modal>
  );
}
