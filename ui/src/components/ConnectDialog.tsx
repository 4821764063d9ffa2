import { useCallback, useEffect, useId, useRef, useState, type ReactNode } from "react";
import {
  memberPaths,
  openRdp,
  openSsh,
  openViewer,
  saveRdpFile,
  validateGuestLogin,
  type Result,
} from "../api";
import type {
  ConnectPath,
  ErrorView,
  MemberPaths,
  MemberView,
  PathKind,
  SshOpened,
} from "../bindings";
import {
  busyConsoleText,
  defaultSshUser,
  describePhase,
  describeRdpSaved,
  describeSshOpened,
  describeStarted,
  pathAvailability,
  pathFor,
  pathOrder,
  pathSummary,
  pathTitle,
} from "../lib/connect";
import type { ConsoleTarget } from "../useConsole";
import type { RdpTarget } from "./RdpView";
import { ActionError } from "./ActionNotice";
import { CopyCommand } from "./CopyCommand";
import { Modal } from "./Modal";
import { Working } from "./Working";

type PathsState =
  | { kind: "loading" }
  | { kind: "loaded"; paths: MemberPaths }
  | { kind: "failed"; error: ErrorView };

/** The member's paths (member_paths), once `enabled`, and again on retry. */
function useMemberPaths(namespace: string, member: string, enabled: boolean) {
  const [state, setState] = useState<PathsState>({ kind: "loading" });
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    if (!enabled) return;
    let stale = false;
    void memberPaths(namespace, member).then((result) => {
      if (stale) return;
      setState(
        result.ok
          ? { kind: "loaded", paths: result.value }
          : { kind: "failed", error: result.error },
      );
    });
    return () => {
      stale = true;
    };
  }, [namespace, member, enabled, attempt]);

  const retry = useCallback(() => {
    setState({ kind: "loading" });
    setAttempt((n) => n + 1);
  }, []);

  return { state, retry };
}

/** The actions of the dialog, one running at a time. */
type Action = "viewer" | "viewerTakeOver" | "rdp" | "rdpFile" | "ssh";

/** What the last action of a path gave. */
type Outcome =
  | { kind: "done"; text: string }
  | { kind: "failed"; source: string; error: ErrorView }
  /** The native viewer was refused because someone else views the console. */
  | { kind: "busy" }
  | { kind: "ssh"; opened: SshOpened };

type ConnectDialogProps = {
  member: MemberView;
  /** Who you are (from the cluster); null when unknown. */
  username: string | null;
  /** Opens the in-app console (the dialog closes). */
  onOpenConsole: (target: ConsoleTarget) => void;
  /** Opens RDP in the app (the dialog closes). */
  onOpenRdp: (target: RdpTarget) => void;
  onClose: () => void;
};

/**
 * "Connect…": asks first when the member is someone else's desktop, then lists the paths that
 * reach it (VNC, RDP, SSH, each available or with the reason it is not) and opens them. What
 * the actions start is a session, listed in Sessions; it outlives the dialog.
 */
export function ConnectDialog({
  member,
  username,
  onOpenConsole,
  onOpenRdp,
  onClose,
}: ConnectDialogProps) {
  // Someone else's desktop: the backend's question (with a broker, only an administrator gets
  // this far).
  const question = member.offers?.connect?.ask ?? null;
  const [confirmed, setConfirmed] = useState(question === null);
  const { state, retry } = useMemberPaths(member.namespace, member.name, confirmed);
  const [running, setRunning] = useState<Action | null>(null);
  const [outcomes, setOutcomes] = useState<Partial<Record<PathKind, Outcome>>>({});
  const cancelRef = useRef<HTMLButtonElement>(null);
  const pathsRef = useRef<HTMLDivElement>(null);
  const questionId = useId();
  const introId = useId();

  // Once the question is answered, its buttons are gone: keep focus inside the dialog.
  useEffect(() => {
    if (confirmed && question !== null) pathsRef.current?.focus();
  }, [confirmed, question]);

  const run = <T,>(
    action: Action,
    path: PathKind,
    source: string,
    command: () => Promise<Result<T>>,
    outcome: (value: T) => Outcome,
  ) => {
    if (running !== null) return;
    setRunning(action);
    setOutcomes((o) => ({ ...o, [path]: undefined }));
    void command().then((result) => {
      setRunning(null);
      let next: Outcome;
      if (result.ok) {
        next = outcome(result.value);
      } else if (result.error.kind === "busy" && action === "viewer") {
        next = { kind: "busy" };
      } else {
        next = { kind: "failed", source, error: result.error };
      }
      setOutcomes((o) => ({ ...o, [path]: next }));
    });
  };

  const { namespace, name } = member;
  const openInViewer = (takeOver: boolean) => {
    run(
      takeOver ? "viewerTakeOver" : "viewer",
      "vnc",
      takeOver ? "Take over in the viewer" : "Open in viewer",
      () => openViewer(namespace, name, takeOver),
      (session) => ({ kind: "done", text: describeStarted(session) }),
    );
  };
  const openWithFreeRdp = () => {
    run(
      "rdp",
      "rdp",
      "Open with FreeRDP",
      () => openRdp(namespace, name),
      (session) => ({ kind: "done", text: describeStarted(session) }),
    );
  };
  const saveRdp = () => {
    run(
      "rdpFile",
      "rdp",
      "Save .rdp file",
      () => saveRdpFile(namespace, name),
      (saved) => ({ kind: "done", text: describeRdpSaved(saved) }),
    );
  };
  const startSsh = (user: string) => {
    run(
      "ssh",
      "ssh",
      "Open SSH",
      () => openSsh(namespace, name, user),
      (opened) => ({ kind: "ssh", opened }),
    );
  };

  const title = `Connect to ${name}`;
  const recheck = () => {
    retry();
    // The button goes while the paths load: keep focus in the dialog.
    pathsRef.current?.focus();
  };

  if (!confirmed && question !== null) {
    return (
      <Modal
        title={title}
        role="alertdialog"
        onClose={onClose}
        initialFocusRef={cancelRef}
        describedBy={questionId}
        testId="connect-dialog"
      >
        <p id={questionId} className="modal-text" data-testid="connect-holder-question">
          {question}
        </p>
        <div className="modal-actions">
          <button ref={cancelRef} type="button" className="btn" onClick={onClose}>
            Cancel
          </button>
          <button
            type="button"
            className="btn btn-primary"
            data-testid="connect-anyway"
            onClick={() => {
              setConfirmed(true);
            }}
          >
            Connect anyway
          </button>
        </div>
      </Modal>
    );
  }

  let body: ReactNode;
  if (state.kind === "loading") {
    body = (
      <p className="muted connect-loading" role="status" data-testid="connect-loading">
        <Working label={`Finding the paths to ${name}…`} />
      </p>
    );
  } else if (state.kind === "failed") {
    body = (
      <>
        <ActionError source={`Paths to ${name}`} error={state.error} testId="connect-paths-error" />
        <div>
          <button type="button" className="btn" onClick={recheck}>
            Try again
          </button>
        </div>
      </>
    );
  } else {
    const paths = state.paths;
    const busy = running !== null;
    body = (
      <>
        <p
          className="muted connect-phase"
          data-testid="connect-phase"
          title={paths.phase === null ? "It has no VMI" : `Its VMI's phase: ${paths.phase}`}
        >
          {describePhase(paths)}
          {" · "}
          <button
            type="button"
            className="link-button"
            onClick={recheck}
            disabled={busy}
            data-testid="connect-recheck"
          >
            Check again
          </button>
        </p>
        <ul className="connect-paths">
          {pathOrder(paths).map((kind) => (
            <PathItem key={kind} path={pathFor(paths, kind)}>
              {(available, reasonId) => {
                const describedBy = available ? undefined : reasonId;
                switch (kind) {
                  case "vnc":
                    return (
                      <>
                        <div className="connect-actions">
                          <button
                            type="button"
                            className="btn btn-primary"
                            data-testid="open-console"
                            disabled={!available || busy}
                            aria-describedby={describedBy}
                            title={`Show ${name}'s screen in this window`}
                            onClick={() => {
                              onOpenConsole({ namespace, member: name });
                            }}
                          >
                            Console
                          </button>
                          <button
                            type="button"
                            className="btn"
                            data-testid="open-viewer"
                            disabled={!available || busy}
                            aria-busy={running === "viewer" || undefined}
                            aria-describedby={describedBy}
                            title="Open the console in remote-viewer (else TigerVNC)"
                            onClick={() => {
                              openInViewer(false);
                            }}
                          >
                            {running === "viewer" ? <Working /> : "Open in viewer"}
                          </button>
                        </div>
                        <OutcomeView
                          kind={kind}
                          outcome={outcomes.vnc}
                          busyAction={
                            <button
                              type="button"
                              className="btn"
                              data-testid="viewer-take-over"
                              disabled={busy}
                              aria-busy={running === "viewerTakeOver" || undefined}
                              onClick={() => {
                                openInViewer(true);
                              }}
                            >
                              {running === "viewerTakeOver" ? <Working /> : "Take over in viewer"}
                            </button>
                          }
                          member={name}
                        />
                      </>
                    );
                  case "rdp":
                    return (
                      <>
                        <div className="connect-actions">
                          <button
                            type="button"
                            className="btn btn-primary"
                            data-testid="open-rdp-in-app"
                            disabled={!available || busy}
                            aria-describedby={describedBy}
                            title={`Show ${name}'s desktop over RDP in this window`}
                            onClick={() => {
                              onOpenRdp({ namespace, member: name });
                            }}
                          >
                            RDP in the app
                          </button>
                          <button
                            type="button"
                            className="btn"
                            data-testid="open-rdp"
                            disabled={!available || busy}
                            aria-busy={running === "rdp" || undefined}
                            aria-describedby={describedBy}
                            title="Start FreeRDP through a forward to the guest's port 3389"
                            onClick={openWithFreeRdp}
                          >
                            {running === "rdp" ? <Working /> : "Open with FreeRDP"}
                          </button>
                          <button
                            type="button"
                            className="btn"
                            data-testid="save-rdp"
                            disabled={!available || busy}
                            aria-busy={running === "rdpFile" || undefined}
                            aria-describedby={describedBy}
                            title="Write an .rdp file for another RDP client into your downloads folder"
                            onClick={saveRdp}
                          >
                            {running === "rdpFile" ? <Working /> : "Save .rdp file"}
                          </button>
                        </div>
                        <OutcomeView kind={kind} outcome={outcomes.rdp} member={name} />
                      </>
                    );
                  case "ssh":
                    return (
                      <>
                        <SshForm
                          defaultUser={defaultSshUser(username)}
                          available={available}
                          busy={busy}
                          running={running === "ssh"}
                          describedBy={describedBy}
                          onSubmit={startSsh}
                        />
                        <OutcomeView kind={kind} outcome={outcomes.ssh} member={name} />
                      </>
                    );
                }
              }}
            </PathItem>
          ))}
        </ul>
      </>
    );
  }

  return (
    <Modal title={title} onClose={onClose} describedBy={introId} testId="connect-dialog" wide>
      <p id={introId} className="modal-text">
        <span className="mono">{name}</span> in namespace <span className="mono">{namespace}</span>
        {member.holder !== null ? (
          <>
            , held by <span className="mono">{member.holder}</span>
          </>
        ) : null}
        . What you open here is a session: it keeps running after this dialog closes, and Sessions
        lists and stops it.
      </p>
      <div ref={pathsRef} className="connect-body" tabIndex={-1} aria-label="Paths">
        {body}
      </div>
      <div className="modal-actions">
        <button type="button" className="btn" data-testid="connect-close" onClick={onClose}>
          Close
        </button>
      </div>
    </Modal>
  );
}

type PathItemProps = {
  path: ConnectPath;
  /** The path's actions, given whether it is available and the id of its reason's text. */
  children: (available: boolean, reasonId: string) => ReactNode;
};

/** One path: its name, what it gives, whether it is available (and why not), its actions. */
function PathItem({ path, children }: PathItemProps) {
  const headingId = useId();
  const reasonId = useId();
  return (
    <li
      className={path.available ? "connect-path" : "connect-path connect-path-off"}
      data-testid={`path-${path.kind}`}
      data-available={path.available ? "true" : "false"}
      aria-labelledby={headingId}
    >
      <div className="connect-path-head">
        <h3 id={headingId} className="connect-path-title">
          {pathTitle(path.kind)}
        </h3>
        <span className={`badge tone-${path.available ? "green" : "grey"}`}>
          {path.available ? "available" : "not available"}
        </span>
      </div>
      <p className="muted connect-path-summary">{pathSummary(path.kind)}</p>
      {path.available ? null : (
        <p id={reasonId} className="connect-path-reason" data-testid={`path-reason-${path.kind}`}>
          {pathAvailability(path)}
        </p>
      )}
      {children(path.available, reasonId)}
    </li>
  );
}

type OutcomeViewProps = {
  kind: PathKind;
  outcome: Outcome | undefined;
  member: string;
  /** What to offer when the viewer was refused because someone views the console. */
  busyAction?: ReactNode;
};

function OutcomeView({ kind, outcome, member, busyAction }: OutcomeViewProps) {
  if (outcome === undefined) return null;
  switch (outcome.kind) {
    case "done":
      return (
        <p className="connect-result" role="status" data-testid={`path-result-${kind}`}>
          {outcome.text}
        </p>
      );
    case "failed":
      return (
        <ActionError source={outcome.source} error={outcome.error} testId={`path-error-${kind}`} />
      );
    case "busy":
      return (
        <div className="connect-busy" role="alert" data-testid="viewer-busy">
          <p>
            <strong>{busyConsoleText(member)}.</strong> Taking over disconnects them.
          </p>
          {busyAction}
        </div>
      );
    case "ssh":
      return (
        <div className="connect-result" data-testid={`path-result-${kind}`}>
          <CopyCommand
            command={outcome.opened.commandLine}
            label="the ssh command"
            testId="ssh-command"
            copyTestId="copy-ssh-command"
          />
          <p role="status" data-testid="ssh-terminal">
            {describeSshOpened(outcome.opened)}
          </p>
        </div>
      );
  }
}

type SshFormProps = {
  defaultUser: string;
  available: boolean;
  /** Some action of the dialog runs. */
  busy: boolean;
  /** Open SSH runs. */
  running: boolean;
  describedBy: string | undefined;
  onSubmit: (user: string) => void;
};

/**
 * The user to log in as (the identity's name by default) and "Open SSH". The login is judged by
 * the core (validate_guest_login, the rule Open SSH and the CLI's ssh apply): on Open SSH, and
 * after a refusal as you type, its refusal shows under the field.
 */
function SshForm({ defaultUser, available, busy, running, describedBy, onSubmit }: SshFormProps) {
  const inputRef = useRef<HTMLInputElement>(null);
  const inputId = useId();
  const problemId = useId();
  const [user, setUser] = useState(defaultUser);
  // Whether refusals show (after the first refused Open SSH), and the latest one (null: accepted).
  const [shown, setShown] = useState(false);
  const [refusal, setRefusal] = useState<ErrorView | null>(null);
  const checking = useRef(false);
  const showProblem = shown && refusal !== null;

  useEffect(() => {
    if (!shown) return;
    let stale = false;
    void validateGuestLogin(user).then((checked) => {
      if (!stale) setRefusal(checked.ok ? null : checked.error);
    });
    return () => {
      stale = true;
    };
  }, [user, shown]);

  return (
    <form
      className="connect-actions ssh-form"
      aria-label="SSH"
      noValidate
      onSubmit={(event) => {
        event.preventDefault();
        if (!available || busy || checking.current) return;
        checking.current = true;
        void validateGuestLogin(user).then((checked) => {
          checking.current = false;
          if (checked.ok) {
            setRefusal(null);
            onSubmit(user);
            return;
          }
          setRefusal(checked.error);
          setShown(true);
          inputRef.current?.focus();
        });
      }}
    >
      <label htmlFor={inputId}>User</label>
      <input
        ref={inputRef}
        id={inputId}
        type="text"
        className="ssh-user"
        data-testid="ssh-user"
        value={user}
        disabled={!available}
        readOnly={running}
        aria-invalid={showProblem || undefined}
        aria-describedby={
          [showProblem ? problemId : null, describedBy ?? null]
            .filter((id) => id !== null)
            .join(" ") || undefined
        }
        spellCheck={false}
        autoCapitalize="off"
        autoCorrect="off"
        autoComplete="off"
        onChange={(e) => {
          setUser(e.target.value);
        }}
      />
      <button
        type="submit"
        className="btn btn-primary"
        data-testid="open-ssh"
        disabled={!available || busy}
        aria-busy={running || undefined}
        aria-describedby={describedBy}
        title="Forward the guest's port 22 and open ssh in a terminal"
      >
        {running ? <Working /> : "Open SSH"}
      </button>
      {showProblem ? (
        <p id={problemId} className="form-invalid ssh-problem">
          {refusal.message}
          {refusal.suggestion ? <> Fix: {refusal.suggestion}</> : null}
        </p>
      ) : null}
    </form>
  );
}
