import {
  useCallback,
  useEffect,
  useEffectEvent,
  useId,
  useLayoutEffect,
  useRef,
  useState,
} from "react";
import type { UserInteraction } from "@devolutions/iron-remote-desktop";
import {
  acceptRdpCertificate,
  forgetRdpLogin,
  openRdpInApp,
  rememberRdpLogin,
  savedRdpLogin,
  stopSession,
} from "../api";
import type { ErrorView, RdpLogin, RdpOpened, SessionView } from "../bindings";
import {
  describeRdpFailure,
  desktopSizeFor,
  fitBox,
  ironFacts,
  isLoginRefused,
  sessionSaysLoginRefused,
  type IronFacts,
} from "../lib/rdp";
import {
  COPY_GESTURE_MS,
  installPageClipboard,
  isCopyGesture,
  syncRdpClipboard,
  type RdpClipboardSync,
} from "../lib/clipboard";
import { formatScreenSize } from "../lib/console";
import { findSession } from "../lib/sessions";
import { ActionError } from "./ActionNotice";
import type { IronModule } from "../rdpFrame";
import { RemoteHeading, useDesktopTitle, useFullscreen, type RemoteState } from "./RemoteView";

/** The member whose desktop the RDP view shows. */
export type RdpTarget = { namespace: string; member: string };

/** How long the window must stay one size before the guest is asked for it (ms). */
const RESIZE_SETTLE_MS = 400;
/**
 * The web component's "fit" scale (its `ScreenScale.Fit`, an enum it does not export): the
 * picture as large as the view allows with the guest's aspect kept, centred.
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- the enum is declared, not exported
const SCALE_FIT = 1 as Parameters<UserInteraction["setScale"]>[0];

/** Where the view stands before the screen is shown. */
type Step =
  | { kind: "opening" }
  | { kind: "failed"; error: ErrorView }
  | { kind: "trust"; opened: RdpOpened }
  /** `opened` is null after a refused login: the next session starts on Connect. */
  | { kind: "login"; opened: RdpOpened | null; refused: string | null }
  | { kind: "screen"; opened: RdpOpened; login: RdpLogin | null };

/** What the web client reports. */
type ScreenStatus =
  | { kind: "connecting" }
  | { kind: "connected"; width: number; height: number }
  | { kind: "ended"; reason: string }
  | { kind: "failed"; facts: IronFacts };

type RdpScreenProps = {
  opened: RdpOpened;
  login: RdpLogin | null;
  uiRef: React.RefObject<UserInteraction | null>;
  onStatus: (status: ScreenStatus) => void;
};

/**
 * IronRDP's web component on one proxy session, in a frame of its own (src/rdpFrame.ts: its
 * WebAssembly goes with the frame): connects on mount (a tick later, so that StrictMode's
 * mount-unmount-mount connects once), asks the guest for the stage's size when the window
 * settles on a new one, and shuts the session down and removes the frame on unmount.
 */
function RdpScreen({ opened, login, uiRef, onStatus }: RdpScreenProps) {
  const hostRef = useRef<HTMLDivElement>(null);
  const report = useEffectEvent(onStatus);

  useEffect(() => {
    const host = hostRef.current;
    if (host === null) return;
    let disposed = false;
    /** Whether the screen went while a call awaited (read through a call: it changes then). */
    const gone = () => disposed;
    let element: HTMLElement | null = null;
    let resizeTimer: ReturnType<typeof setTimeout> | undefined;
    let clipboard: RdpClipboardSync | null = null;
    let sizes: MutationObserver | null = null;
    const frame = document.createElement("iframe");
    frame.className = "rdp-frame";
    frame.title = "Remote desktop (RDP)";
    frame.src = "rdp-frame.html";
    // The clipboard moves only while the frame has the focus in a focused window (the page has
    // it while a frame of it does), and the guest's copy only after a copy gesture in it
    // (lib/clipboard's syncRdpClipboard).
    let copiedAt = -Infinity;
    const gate = {
      focused: () => document.hasFocus() && document.activeElement === frame,
      copying: () => Date.now() - copiedAt <= COPY_GESTURE_MS,
    };
    const onViewFocus = () => clipboard?.viewFocused();
    const onKey = (event: KeyboardEvent) => {
      if (!isCopyGesture(event)) return;
      copiedAt = Date.now();
      clipboard?.copyGesture();
    };
    const observer = new ResizeObserver(() => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        const size = desktopSizeFor(host.clientWidth, host.clientHeight);
        const ui = uiRef.current;
        if (ui === null) return;
        ui.resize(size.width, size.height);
        // The component sizes the canvas's box to the size asked for at once; a guest that keeps
        // its own size (no display control) would be stretched to it. Fit again: letterboxed,
        // the guest's aspect kept; a guest that follows is fitted again at its new size.
        ui.setScale(SCALE_FIT);
        fitToStage();
      }, RESIZE_SETTLE_MS);
    });
    const canvasOf = () => element?.shadowRoot?.querySelector("canvas") ?? null;
    const canvasSize = () => {
      const canvas = canvasOf();
      return { width: canvas?.width ?? 0, height: canvas?.height ?? 0 };
    };
    /**
     * The component fits the picture to the window below the view's top, not to the stage, so
     * its box would run under the hint line: the box (the canvas's parent, which the canvas
     * fills and the component sizes) sized again to the stage, aspect kept, still centred.
     */
    const fitToStage = () => {
      const canvas = canvasOf();
      const frame = canvas?.parentElement;
      if (!canvas || !frame) return;
      const box = fitBox(canvas.width, canvas.height, host.clientWidth, host.clientHeight);
      if (box.width === 0) return;
      for (const [side, value] of [
        ["width", box.width],
        ["height", box.height],
      ] as const) {
        const px = `${String(value)}px`;
        frame.style.setProperty(side, px);
        frame.style.setProperty(`min-${side}`, px);
        frame.style.setProperty(`max-${side}`, px);
      }
    };

    const start = async (ui: UserInteraction, rdp: IronModule) => {
      const { endpoint } = opened;
      const size = desktopSizeFor(host.clientWidth, host.clientHeight);
      let builder = ui
        .configBuilder()
        .withDestination(endpoint.destination)
        .withProxyAddress(endpoint.url)
        .withAuthToken(endpoint.token)
        .withServerDomain("")
        .withUsername(login?.username ?? "")
        .withPassword(login?.password ?? "")
        .withDesktopSize(size)
        .withExtension(rdp.displayControl(true));
      if (!endpoint.probe.nla) builder = builder.withExtension(rdp.enableCredssp(false));
      try {
        const info = await ui.connect(builder.build());
        if (gone()) return;
        uiRef.current = ui;
        ui.setVisibility(true);
        report({ kind: "connected", ...info.initialDesktopSize });
        observer.observe(host);
        clipboard = syncRdpClipboard(ui, navigator.clipboard, gate);
        const end = await info.run();
        if (!gone()) report({ kind: "ended", reason: end.reason() });
      } catch (reason: unknown) {
        if (!gone()) report({ kind: "failed", facts: ironFacts(reason) });
      } finally {
        clipboard?.stop();
        clipboard = null;
        // Not a newer screen's (Reconnect).
        if (uiRef.current === ui) uiRef.current = null;
      }
    };

    /** In the frame, once its module is started: the web component, then the session. */
    const mount = (frameWindow: Window, rdp: IronModule) => {
      const doc = frameWindow.document;
      // The frame's clipboard is the window's (the OS's, through the backend), before the
      // web component looks at it.
      installPageClipboard(navigator.clipboard, frameWindow.navigator);
      const el = doc.createElement("iron-remote-desktop");
      Object.assign(el, { module: rdp.Backend });
      el.setAttribute("scale", "fit");
      el.setAttribute("flexcenter", "true");
      el.setAttribute("verbose", "false");
      // The guest's size follows the window: report the canvas's whenever it changes.
      sizes = new MutationObserver(() => {
        const now = canvasSize();
        if (disposed || uiRef.current === null) return;
        report({ kind: "connected", ...now });
        fitToStage();
      });
      el.addEventListener("ready", (event) => {
        const canvas = el.shadowRoot?.querySelector("canvas");
        if (canvas)
          sizes?.observe(canvas, { attributes: true, attributeFilter: ["width", "height"] });
        const detail = (event as CustomEvent<{ irgUserInteraction: UserInteraction }>).detail;
        // A task later: the component sets up its clipboard just after `ready`, and a
        // session started before that has no clipboard channel.
        setTimeout(() => {
          if (!disposed) void start(detail.irgUserInteraction, rdp);
        }, 0);
      });
      // The frame's own focus (a click into the picture, or the window back with it focused)
      // and its keys (capture: the web component may keep its keys to itself).
      frameWindow.addEventListener("focus", onViewFocus);
      frameWindow.addEventListener("keydown", onKey, true);
      element = el;
      doc.body.appendChild(el);
    };

    const timer = setTimeout(() => {
      report({ kind: "connecting" });
      // Once: the frame is never navigated again, and a second load would start a second client.
      frame.addEventListener(
        "load",
        () => {
          const frameWindow = frame.contentWindow;
          const loaded = frameWindow?.corralIron;
          if (disposed) return;
          if (!frameWindow || !loaded) {
            report({ kind: "failed", facts: ironFacts(new Error("the RDP frame did not load")) });
            return;
          }
          void loaded.then(
            (rdp) => {
              if (!disposed) mount(frameWindow, rdp);
            },
            (reason: unknown) => {
              if (!disposed) report({ kind: "failed", facts: ironFacts(reason) });
            },
          );
        },
        { once: true },
      );
      host.appendChild(frame);
    }, 0);

    return () => {
      disposed = true;
      clearTimeout(timer);
      clearTimeout(resizeTimer);
      observer.disconnect();
      sizes?.disconnect();
      clipboard?.stop();
      uiRef.current?.shutdown();
      uiRef.current = null;
      element?.remove();
      // With the frame go the web component's realm and its WebAssembly.
      frame.remove();
    };
  }, [opened, login, uiRef]);

  return (
    <div
      ref={hostRef}
      className="console-screen rdp-screen"
      data-testid="rdp-screen"
      aria-label="Remote desktop (RDP)"
      role="application"
    />
  );
}

type RdpViewProps = {
  target: RdpTarget;
  /** The login's user name to start with (as SSH's: the identity's name before any "@"). */
  defaultUser: string;
  /** The session list, for what the backend recorded about this view's session. */
  sessions: readonly SessionView[];
  onClose: () => void;
};

/**
 * RDP in the app: a full-window view with IronRDP's web client on the member's RDP server,
 * through the backend's proxy session. Before the screen: the guest's certificate when it is
 * new or changed, and a login when the guest wants NLA (remembered in the OS keyring only when
 * the user ticks it).
 */
export function RdpView({ target, defaultUser, sessions, onClose }: RdpViewProps) {
  const { namespace, member } = target;
  const [shownStep, setStep] = useState<Step>({ kind: "opening" });
  const [status, setStatus] = useState<ScreenStatus>({ kind: "connecting" });
  const [notice, setNotice] = useState<string | null>(null);
  const [lastUser, setLastUser] = useState(defaultUser);
  const viewRef = useRef<HTMLDivElement>(null);
  const uiRef = useRef<UserInteraction | null>(null);
  const sessionRef = useRef<number | null>(null);
  const requestRef = useRef(0);
  /** The login used in this view, for Reconnect (never stored by the page). */
  const loginRef = useRef<RdpLogin | null>(null);
  const titleId = useId();

  const stopCurrent = useCallback(() => {
    const id = sessionRef.current;
    sessionRef.current = null;
    return id === null ? Promise.resolve() : stopSession(id);
  }, []);

  /** After the certificate is accepted: the login, then the screen. */
  const proceed = useCallback(
    async (opened: RdpOpened, request: number) => {
      if (!opened.endpoint.probe.nla) {
        setStep({ kind: "screen", opened, login: null });
        return;
      }
      let login = loginRef.current;
      if (login === null) {
        const saved = await savedRdpLogin(namespace, member);
        if (request !== requestRef.current) return;
        login = saved.ok ? saved.value : null;
      }
      setStep(
        login === null
          ? { kind: "login", opened, refused: null }
          : { kind: "screen", opened, login },
      );
    },
    [namespace, member],
  );

  const open = useCallback(() => {
    requestRef.current += 1;
    const request = requestRef.current;
    setStep({ kind: "opening" });
    setStatus({ kind: "connecting" });
    void (async () => {
      await stopCurrent();
      const result = await openRdpInApp(namespace, member);
      if (request !== requestRef.current) {
        if (result.ok) void stopSession(result.value.endpoint.id);
        return;
      }
      if (!result.ok) {
        setStep({ kind: "failed", error: result.error });
        return;
      }
      const opened = result.value;
      sessionRef.current = opened.endpoint.id;
      if (opened.trust.kind !== "known") {
        setStep({ kind: "trust", opened });
      } else {
        await proceed(opened, request);
      }
    })();
  }, [namespace, member, proceed, stopCurrent]);

  // Open once when the view appears (a tick later: StrictMode mounts twice).
  useEffect(() => {
    const timer = setTimeout(() => {
      open();
    }, 0);
    return () => {
      clearTimeout(timer);
      requestRef.current += 1;
      void stopCurrent();
    };
  }, [open, stopCurrent]);

  useLayoutEffect(() => {
    viewRef.current?.focus();
  }, []);

  useDesktopTitle(member, namespace, "RDP");
  const { fullscreen, error: fullscreenError, toggle: toggleFullscreen } = useFullscreen(viewRef);

  const sessionId =
    shownStep.kind === "opening" || shownStep.kind === "failed"
      ? null
      : (shownStep.opened?.endpoint.id ?? null);
  const session = findSession(sessions, sessionId);
  // A guest that hangs up during CredSSP (no error of its own) refused the login too: the
  // proxy session's end says so, and the login is asked for again.
  const hungUp =
    shownStep.kind === "screen" && status.kind === "failed"
      ? sessionSaysLoginRefused(session)
      : null;
  const step: Step = hungUp === null ? shownStep : { kind: "login", opened: null, refused: hungUp };
  const backendReason = session?.lastError ?? null;

  /** The guest refused the login: forget it (and a remembered one) and ask again. */
  const askAgain = useCallback(
    (why: string) => {
      loginRef.current = null;
      void forgetRdpLogin(namespace, member);
      void stopCurrent();
      setStep({ kind: "login", opened: null, refused: why });
    },
    [namespace, member, stopCurrent],
  );

  const onScreenStatus = (next: ScreenStatus) => {
    setStatus(next);
    if (next.kind === "failed" && isLoginRefused(next.facts)) {
      askAgain(describeRdpFailure(member, next.facts, null));
    }
  };

  const submitLogin = (opened: RdpOpened | null, login: RdpLogin, remember: boolean) => {
    loginRef.current = login;
    setLastUser(login.username);
    setNotice(null);
    void (
      remember ? rememberRdpLogin(namespace, member, login) : forgetRdpLogin(namespace, member)
    ).then((saved) => {
      if (!saved.ok && remember) setNotice(`Not remembered: ${saved.error.message}.`);
    });
    if (opened === null) {
      open();
    } else {
      setStep({ kind: "screen", opened, login });
    }
  };

  const connected = step.kind === "screen" && status.kind === "connected";
  let statusText: string;
  let state: RemoteState = "connecting";
  if (step.kind === "opening") statusText = `Asking ${member}'s RDP server for TLS and NLA…`;
  else if (step.kind === "failed") {
    statusText = step.error.message;
    state = "disconnected";
  } else if (step.kind === "trust") statusText = "Check the guest's certificate.";
  else if (step.kind === "login")
    statusText = `${member} wants a login (Network Level Authentication).`;
  else if (status.kind === "connecting") statusText = `Connecting to ${member}…`;
  else if (status.kind === "connected") {
    statusText = `Connected · ${formatScreenSize(status.width, status.height)}${step.login ? ` · as ${step.login.username}` : ""} · TLS ${step.opened.endpoint.probe.fingerprint.slice(0, 11)}…`;
    state = "connected";
  } else if (status.kind === "ended") {
    statusText = `Disconnected: ${backendReason ?? status.reason}.`;
    state = "disconnected";
  } else {
    statusText = describeRdpFailure(member, status.facts, backendReason);
    state = "disconnected";
  }

  return (
    <div
      ref={viewRef}
      className={`console-view console-${state}`}
      data-testid="rdp-view"
      role="region"
      aria-labelledby={titleId}
      tabIndex={-1}
    >
      <div className="console-bar">
        <RemoteHeading
          titleId={titleId}
          what="RDP"
          member={member}
          namespace={namespace}
          state={state}
          statusText={statusText}
          statusTestId="rdp-status"
        />
        <div className="console-tools" role="group" aria-label="RDP controls">
          <button
            type="button"
            className="btn btn-small"
            data-testid="rdp-fullscreen"
            aria-pressed={fullscreen}
            onClick={toggleFullscreen}
          >
            Full screen
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="rdp-ctrl-alt-del"
            disabled={!connected}
            title="Send Ctrl+Alt+Del to the desktop"
            onClick={() => uiRef.current?.ctrlAltDel()}
          >
            Ctrl+Alt+Del
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="rdp-windows-key"
            disabled={!connected}
            title="Send the Windows key to the desktop"
            onClick={() => uiRef.current?.metaKey()}
          >
            Windows key
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="rdp-reconnect"
            disabled={step.kind === "opening"}
            title="Connect again, in a new session"
            onClick={() => {
              open();
            }}
          >
            Reconnect
          </button>
          <button
            type="button"
            className="btn btn-small btn-quiet-danger"
            data-testid="rdp-close"
            onClick={onClose}
          >
            Close
          </button>
        </div>
      </div>
      {fullscreenError !== null ? (
        <p className="console-tool-error" role="alert">
          {fullscreenError}
        </p>
      ) : null}
      {notice !== null ? (
        <p className="console-tool-error" role="alert">
          {notice}
        </p>
      ) : null}
      <div className="console-stage">
        {step.kind === "screen" ? (
          <RdpScreen
            key={step.opened.endpoint.id}
            opened={step.opened}
            login={step.login}
            uiRef={uiRef}
            onStatus={onScreenStatus}
          />
        ) : (
          <div className="console-screen" data-testid="rdp-screen" />
        )}
        {step.kind === "failed" ? (
          <div className="console-notice" data-testid="rdp-failed">
            <ActionError source={`RDP to ${member}`} error={step.error} testId="rdp-error" />
            <div className="console-notice-actions">
              <button
                type="button"
                className="btn"
                onClick={() => {
                  open();
                }}
              >
                Try again
              </button>
            </div>
          </div>
        ) : null}
        {step.kind === "trust" ? (
          <TrustPrompt
            opened={step.opened}
            member={member}
            onAccept={() => {
              const { opened } = step;
              const request = requestRef.current;
              void acceptRdpCertificate(
                namespace,
                member,
                opened.endpoint.vmUid,
                opened.endpoint.probe.fingerprint,
              ).then((saved) => {
                if (!saved.ok) setNotice(`The certificate was not saved: ${saved.error.message}.`);
                void proceed(opened, request);
              });
            }}
            onCancel={onClose}
          />
        ) : null}
        {step.kind === "login" ? (
          <LoginForm
            member={member}
            refused={step.refused}
            initialUser={lastUser}
            onSubmit={(login, remember) => {
              submitLogin(step.opened, login, remember);
            }}
            onCancel={onClose}
          />
        ) : null}
        {step.kind === "screen" && (status.kind === "ended" || status.kind === "failed") ? (
          <div className="console-notice" data-testid="rdp-disconnected">
            <p className="console-notice-title" data-testid="rdp-error">
              {statusText}
            </p>
            <div className="console-notice-actions">
              <button
                type="button"
                className="btn btn-primary"
                onClick={() => {
                  open();
                }}
              >
                Reconnect
              </button>
            </div>
          </div>
        ) : null}
      </div>
      <p className="console-hint">
        Click the desktop to type into it. Where the guest's RDP server offers them (Windows does),
        copied text goes both ways and the desktop follows the window's size.
      </p>
    </div>
  );
}

/** The guest's certificate, first seen or changed: trust it, or leave. */
function TrustPrompt({
  opened,
  member,
  onAccept,
  onCancel,
}: {
  opened: RdpOpened;
  member: string;
  onAccept: () => void;
  onCancel: () => void;
}) {
  const { trust } = opened;
  const fingerprint = opened.endpoint.probe.fingerprint;
  return (
    <div
      className="console-notice"
      role="alertdialog"
      aria-label="RDP certificate"
      data-testid="rdp-trust"
    >
      <p className="console-notice-title">
        {trust.kind === "changed"
          ? `The RDP certificate of ${member} has changed.`
          : trust.kind === "replaced"
            ? `${member} was made again since you trusted its RDP certificate: check it again.`
            : `First RDP connection to ${member}: check its certificate.`}
      </p>
      {trust.kind === "changed" ? (
        <p>
          Before:{" "}
          <span className="mono" data-testid="rdp-previous-fingerprint">
            {trust.previous}
          </span>
          . A re-created desktop has a new certificate; anything else may be someone in between.
        </p>
      ) : null}
      <p>
        SHA-256:{" "}
        <span className="mono" data-testid="rdp-fingerprint">
          {fingerprint}
        </span>
      </p>
      <p className="muted" data-testid="rdp-fingerprint-where">
        Compare it with the one the desktop shows for its own RDP certificate: on Windows, the
        certificate under Remote Desktop in the local computer's certificate store (certlm.msc);
        with xrdp,{" "}
        <span className="mono">
          openssl x509 -in /etc/xrdp/cert.pem -noout -fingerprint -sha256
        </span>
        . Ask the desktop's administrator if you cannot look yourself.
      </p>
      <div className="console-notice-actions">
        <button
          type="button"
          className="btn btn-primary"
          data-testid="rdp-trust-accept"
          onClick={onAccept}
        >
          Trust and connect
        </button>
        <button type="button" className="btn" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </div>
  );
}

/** The login the guest wants (NLA). */
function LoginForm({
  member,
  refused,
  initialUser,
  onSubmit,
  onCancel,
}: {
  member: string;
  refused: string | null;
  /** The user name tried last in this view (kept after a refusal). */
  initialUser: string;
  onSubmit: (login: RdpLogin, remember: boolean) => void;
  onCancel: () => void;
}) {
  const [username, setUsername] = useState(initialUser);
  const [password, setPassword] = useState("");
  const [remember, setRemember] = useState(false);
  const userId = useId();
  const passwordId = useId();
  return (
    <form
      className="console-notice rdp-login"
      data-testid="rdp-login"
      aria-label={`Log in to ${member}`}
      onSubmit={(event) => {
        event.preventDefault();
        if (username.trim() === "" || password === "") return;
        onSubmit({ username: username.trim(), password }, remember);
      }}
    >
      <p className="console-notice-title">Log in to {member}</p>
      {refused !== null ? (
        <p className="form-error" role="alert" data-testid="rdp-login-refused">
          {refused}
        </p>
      ) : null}
      <label htmlFor={userId}>User name</label>
      <input
        id={userId}
        data-testid="rdp-username"
        autoComplete="off"
        autoFocus={initialUser === ""}
        value={username}
        onChange={(e) => {
          setUsername(e.target.value);
        }}
      />
      <label htmlFor={passwordId}>Password</label>
      <input
        id={passwordId}
        type="password"
        data-testid="rdp-password"
        autoFocus={initialUser !== ""}
        autoComplete="off"
        value={password}
        onChange={(e) => {
          setPassword(e.target.value);
        }}
      />
      <label className="checkbox">
        <input
          type="checkbox"
          data-testid="rdp-remember"
          checked={remember}
          onChange={(e) => {
            setRemember(e.target.checked);
          }}
        />{" "}
        Remember in the system keyring
      </label>
      <div className="console-notice-actions">
        <button
          type="submit"
          className="btn btn-primary"
          data-testid="rdp-login-submit"
          disabled={username.trim() === "" || password === ""}
        >
          Connect
        </button>
        <button type="button" className="btn" data-testid="rdp-login-cancel" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
