import { useId, useRef } from "react";
import type { ErrorView } from "../bindings";
import { ActionError } from "./ActionNotice";
import { Modal } from "./Modal";
import { Working } from "./Working";

type ReleaseDialogProps = {
  member: string;
  holder: string | null;
  /** Who you are (from the cluster); null when unknown. */
  username: string | null;
  /** Someone else's active claim: an administrator's force release, recorded as an Event. */
  force: boolean;
  /** The release of this member is running. */
  busy: boolean;
  /** Why the last attempt failed (a refusal, a partial release, …). */
  error: ErrorView | null;
  onConfirm: () => void;
  onClose: () => void;
};

/** Confirms releasing a member, which stops its VM. */
export function ReleaseDialog({
  member,
  holder,
  username,
  force,
  busy,
  error,
  onConfirm,
  onClose,
}: ReleaseDialogProps) {
  const cancelRef = useRef<HTMLButtonElement>(null);
  const questionId = useId();
  const question = force
    ? `Take ${member} back from ${holder ?? "its holder"} now? Their desktop's VM will be stopped while they may be using it, and an Event on the VM records that you did it.`
    : holder !== null && holder === username
      ? `Release ${member}, your desktop? Its VM will be stopped.`
      : holder
        ? `Release ${member} (held by ${holder})? Its VM will be stopped.`
        : `Release ${member}? Its VM will be stopped.`;
  const verb = force ? "Force release" : "Release";
  return (
    <Modal
      title={`${verb} ${member}`}
      role="alertdialog"
      onClose={onClose}
      initialFocusRef={cancelRef}
      describedBy={questionId}
      testId="release-dialog"
    >
      <p id={questionId} className="modal-text" data-testid="release-question">
        {question}
      </p>
      {error ? <ActionError source={`${verb} ${member}`} error={error} /> : null}
      <div className="modal-actions">
        <button ref={cancelRef} type="button" className="btn" onClick={onClose}>
          Cancel
        </button>
        <button
          type="button"
          className="btn btn-danger"
          data-testid="confirm-release"
          disabled={busy}
          aria-busy={busy || undefined}
          onClick={onConfirm}
        >
          {busy ? <Working /> : verb}
        </button>
      </div>
    </Modal>
  );
}
