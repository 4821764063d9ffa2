import { useId, useRef, useState, type SubmitEvent } from "react";
import type { ErrorView } from "../bindings";
import { ActionError } from "./ActionNotice";
import { Modal } from "./Modal";
import { Working } from "./Working";

type AssignDialogProps = {
  namespace: string;
  pool: string;
  /** The assign command for this pool is running. */
  busy: boolean;
  /** While it runs: what the cluster's broker is doing about it, if it reports (granting). */
  step: string | null;
  /** Why the last attempt failed, shown in the dialog so the user can correct it. */
  error: ErrorView | null;
  onSubmit: (user: string) => void;
  onClose: () => void;
};

/** An administrator hands a free member of a pool to a user, named as the cluster knows them. */
export function AssignDialog({
  namespace,
  pool,
  busy,
  step,
  error,
  onSubmit,
  onClose,
}: AssignDialogProps) {
  const inputRef = useRef<HTMLInputElement>(null);
  const inputId = useId();
  const hintId = useId();
  const introId = useId();
  const missingId = useId();
  const [user, setUser] = useState("");
  const [missing, setMissing] = useState(false);

  const submit = (event: SubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy) return;
    if (user.trim() === "") {
      setMissing(true);
      inputRef.current?.focus();
      return;
    }
    setMissing(false);
    // Sent as typed: a name with a space around it is refused by the backend's validation
    // (the CLI's), with the reason shown here, rather than quietly becoming another name.
    onSubmit(user);
  };

  return (
    <Modal
      title={`Assign a desktop from ${pool}`}
      onClose={onClose}
      initialFocusRef={inputRef}
      describedBy={introId}
      testId="assign-dialog"
    >
      <form className="modal-form" onSubmit={submit} noValidate>
        <p id={introId} className="modal-text">
          Hands a free member of pool <strong>{pool}</strong> in namespace{" "}
          <span className="mono">{namespace}</span> to a user and starts its VM.
        </p>
        <div className="form-field">
          <label htmlFor={inputId}>User</label>
          <input
            ref={inputRef}
            id={inputId}
            type="text"
            className="user-input"
            data-testid="assign-user"
            value={user}
            required
            aria-required="true"
            aria-invalid={missing || undefined}
            aria-describedby={missing ? `${missingId} ${hintId}` : hintId}
            readOnly={busy}
            spellCheck={false}
            autoCapitalize="off"
            autoCorrect="off"
            autoComplete="off"
            placeholder="alice or alice@example.com"
            onChange={(e) => {
              setUser(e.target.value);
              if (missing && e.target.value.trim() !== "") setMissing(false);
            }}
          />
          {missing ? (
            <p id={missingId} className="form-invalid">
              Enter the user&apos;s identity.
            </p>
          ) : null}
          <p id={hintId} className="form-hint">
            The user&apos;s identity as the cluster knows it: their Kubernetes username exactly as
            the API server reports it (what <code>kubectl auth whoami</code> shows for them), such
            as <span className="mono">alice</span> or{" "}
            <span className="mono">alice@example.com</span>. It is not checked against any
            directory.
          </p>
        </div>
        {busy && step !== null ? (
          <p className="muted claim-progress" role="status" data-testid="claim-progress">
            {step}
          </p>
        ) : null}
        {error ? <ActionError source={`Assign from ${pool}`} error={error} /> : null}
        <div className="modal-actions">
          <button type="button" className="btn" onClick={onClose}>
            Cancel
          </button>
          <button
            type="submit"
            className="btn btn-primary"
            data-testid="assign-submit"
            disabled={busy}
            aria-busy={busy || undefined}
          >
            {busy ? <Working /> : "Assign"}
          </button>
        </div>
      </form>
    </Modal>
  );
}
