import { useId, useRef } from "react";
import type { ErrorView, ReleaseView } from "../bindings";
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
  /** What the release does to the member (its pool's policy); null when the view lost it. */
  onRelease: ReleaseView | null;
  /** The release of this member is running. */
  busy: boolean;
  /** Why the last attempt failed (a refusal, a partial release, …). */
  error: ErrorView | null;
  onConfirm: () => void;
  onClose: () => void;
};

/**
 * Confirms releasing a member, saying first what it does to it (stopped, restarted, a fresh copy,
 * or removed with its disk when the pool was made smaller).
 */
export function ReleaseDialog({
  member,
  holder,
  username,
  force,
  onRelease,
  busy,
  error,
  onConfirm,
  onClose,
}: ReleaseDialogProps) {
  const cancelRef = useRef<HTMLButtonElement>(null);
  const questionId = useId();
  // What the core says a release does; nothing guessed when the view has lost the member.
  const then = onRelease === null ? "" : `On release, ${onRelease.words}.`;
  const question = force
    ? `Take ${member} back from ${holder ?? "its holder"} now? They may be using it. ${then} An Event on the VM records that you did it.`
    : holder !== null && holder === username
      ? `Release ${member}, your desktop? ${then}`
      : holder
        ? `Release ${member} (held by ${holder})? ${then}`
        : `Release ${member}? ${then}`;
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
        <button
          ref={cancelRef}
          type="button"
          className="btn"
          data-testid="release-cancel"
          onClick={onClose}
        >
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
