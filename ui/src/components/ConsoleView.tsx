import RFB from "@novnc/novnc";
import {
  useEffect,
  useEffectEvent,
  useId,
  useLayoutEffect,
  useRef,
  useState,
  type RefObject,
} from "react";
import type { SessionView } from "../bindings";
import { busyConsoleText } from "../lib/connect";
import {
  consoleStatusState,
  consoleStatusText,
  type ConsoleStatus,
  type DisconnectFacts,
} from "../lib/console";
import {
  KEY_COMBOS,
  TYPE_INTERVAL_MS,
  TYPE_MAX_CHARS,
  comboEvents,
  findCombo,
  strokeEvents,
  typingPlan,
  type KeyEvent,
} from "../lib/keys";
import { findSession } from "../lib/sessions";
import type { ConsoleState } from "../useConsole";
import { ActionError } from "./ActionNotice";
import { RemoteHeading, useDesktopTitle, useFullscreen } from "./RemoteView";

/** The screen's background around a desktop smaller than the window. */
const SCREEN_BACKGROUND = "#1e2329";

/** The key that gives the keyboard back to the console's controls: Shift+F12. */
function isReleaseKey(event: KeyboardEvent): boolean {
  return event.key === "F12" && event.shiftKey && !event.ctrlKey && !event.altKey;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function send(rfb: RFB, events: readonly KeyEvent[]) {
  for (const e of events) rfb.sendKey(e.keysym, e.code, e.down);
}

type ConsoleScreenProps = {
  /** The console's websocket (`ws://127.0.0.1:PORT/SECRET`). */
  url: string;
  scale: boolean;
  /** Set to the connection while it lasts, for the toolbar. */
  rfbRef: RefObject<RFB | null>;
  onStatus: (status: ConsoleStatus) => void;
};

/**
 * noVNC on one console endpoint: connects on mount (a tick later, so that StrictMode's
 * mount-unmount-mount opens one websocket, not two), reports its status, and disconnects on
 * unmount. Keyed by the session, so each (re)connection gets a fresh screen.
 */
function ConsoleScreen({ url, scale, rfbRef, onStatus }: ConsoleScreenProps) {
  const screenRef = useRef<HTMLDivElement>(null);
  const scaleRef = useRef(scale);
  const report = useEffectEvent(onStatus);

  useEffect(() => {
    scaleRef.current = scale;
    if (rfbRef.current !== null) rfbRef.current.scaleViewport = scale;
  }, [scale, rfbRef]);

  useEffect(() => {
    const target = screenRef.current;
    if (target === null) return;
    let rfb: RFB | null = null;
    let disposed = false;
    let observer: MutationObserver | null = null;
    let connected = false;
    let securityFailure: string | null = null;
    let desktopName: string | null = null;

    const reportConnected = () => {
      const canvas = target.querySelector("canvas");
      report({
        kind: "connected",
        width: canvas?.width ?? 0,
        height: canvas?.height ?? 0,
        desktopName,
      });
    };
    const reportDisconnected = (facts: DisconnectFacts) => {
      report({ kind: "disconnected", ...facts });
    };

    const timer = setTimeout(() => {
      report({ kind: "connecting" });
      let client: RFB;
      try {
        client = new RFB(target, url, { shared: true });
      } catch {
        reportDisconnected({ clean: false, wasConnected: false, securityFailure: null });
        return;
      }
      rfb = client;
      client.scaleViewport = scaleRef.current;
      client.background = SCREEN_BACKGROUND;
      client.addEventListener("connect", () => {
        if (disposed) return;
        connected = true;
        reportConnected();
        // The framebuffer's size is the canvas's: follow the desktop when it resizes.
        const canvas = target.querySelector("canvas");
        if (canvas !== null) {
          observer = new MutationObserver(() => {
            if (!disposed && connected) reportConnected();
          });
          observer.observe(canvas, { attributes: true, attributeFilter: ["width", "height"] });
        }
      });
      client.addEventListener("desktopname", (event) => {
        desktopName = event.detail.name || null;
        if (!disposed && connected) reportConnected();
      });
      client.addEventListener("securityfailure", (event) => {
        securityFailure = event.detail.reason ?? `security result ${event.detail.status}`;
      });
      client.addEventListener("credentialsrequired", () => {
        securityFailure = "it asks for a password, which a KubeVirt console never does";
        client.disconnect();
      });
      client.addEventListener("disconnect", (event) => {
        observer?.disconnect();
        if (rfbRef.current === client) rfbRef.current = null;
        if (disposed) return;
        reportDisconnected({ clean: event.detail.clean, wasConnected: connected, securityFailure });
        connected = false;
      });
      rfbRef.current = client;
    }, 0);

    return () => {
      disposed = true;
      clearTimeout(timer);
      observer?.disconnect();
      if (rfb !== null) {
        if (rfbRef.current === rfb) rfbRef.current = null;
        rfb.disconnect();
      }
    };
  }, [url, rfbRef]);

  return (
    <div
      ref={screenRef}
      className="console-screen"
      data-testid="console-screen"
      aria-label="Remote desktop"
      role="application"
    />
  );
}

type ConsoleViewProps = {
  state: ConsoleState;
  /** The session list, for what the backend knows about this console's session. */
  sessions: readonly SessionView[];
  onTakeOver: () => void;
  onReconnect: () => void;
  onClose: () => void;
};

/**
 * The in-app console: a full-window view over the app with noVNC on the member's console. Esc
 * goes to the desktop (it never closes the view); Shift+F12 gives the keyboard back to the
 * controls, and Close is an ordinary button.
 */
export function ConsoleView({
  state,
  sessions,
  onTakeOver,
  onReconnect,
  onClose,
}: ConsoleViewProps) {
  const { target, step } = state;
  const viewRef = useRef<HTMLDivElement>(null);
  const keyboardButtonRef = useRef<HTMLButtonElement>(null);
  const rfbRef = useRef<RFB | null>(null);
  const titleId = useId();
  const hintId = useId();
  const textId = useId();
  const comboId = useId();

  const [screenStatus, setScreenStatus] = useState<{ id: number; status: ConsoleStatus } | null>(
    null,
  );
  const [scale, setScale] = useState(true);
  const { fullscreen, error: fullscreenError, toggle: toggleFullscreen } = useFullscreen(viewRef);
  const [combo, setCombo] = useState(KEY_COMBOS[0].id);
  const [text, setText] = useState("");
  const [typing, setTyping] = useState<{ done: number; total: number } | null>(null);
  const [typed, setTyped] = useState<string | null>(null);
  const typingRef = useRef<{ cancelled: boolean } | null>(null);

  const endpointId = step.kind === "open" ? step.endpoint.id : null;
  const session = findSession(sessions, endpointId);
  let status: ConsoleStatus;
  switch (step.kind) {
    case "opening":
      status = { kind: "opening", takeOver: step.takeOver };
      break;
    case "busy":
      status = { kind: "busy" };
      break;
    case "failed":
      status = { kind: "failed", error: step.error };
      break;
    case "open":
      status =
        screenStatus !== null && screenStatus.id === step.endpoint.id
          ? screenStatus.status
          : { kind: "connecting" };
      break;
  }
  const connected = status.kind === "connected";
  const statusState = consoleStatusState(status);

  // Focus the view when it opens, so that a screen reader announces it and Tab starts here.
  useLayoutEffect(() => {
    viewRef.current?.focus();
  }, []);

  useDesktopTitle(target.member, target.namespace, "Console");

  // Shift+F12 takes the keyboard back from the desktop, before noVNC sees the key.
  useEffect(() => {
    const view = viewRef.current;
    if (view === null) return;
    const onKeyDown = (event: KeyboardEvent) => {
      if (!isReleaseKey(event)) return;
      event.preventDefault();
      event.stopPropagation();
      rfbRef.current?.blur();
      keyboardButtonRef.current?.focus();
    };
    view.addEventListener("keydown", onKeyDown, true);
    return () => {
      view.removeEventListener("keydown", onKeyDown, true);
    };
  }, []);

  // Typing stops when the view goes.
  useEffect(
    () => () => {
      if (typingRef.current !== null) typingRef.current.cancelled = true;
    },
    [],
  );

  const withRfb = (action: (rfb: RFB) => void) => {
    const rfb = rfbRef.current;
    if (rfb !== null) action(rfb);
  };

  const stopTyping = () => {
    if (typingRef.current !== null) typingRef.current.cancelled = true;
  };

  const typeText = async () => {
    if (typingRef.current !== null) return;
    const plan = typingPlan(text);
    const total = plan.strokes.length;
    if (total === 0) {
      setTyped(plan.skipped > 0 ? "Nothing to type: only control characters." : "Nothing to type.");
      return;
    }
    const run = { cancelled: false };
    typingRef.current = run;
    setTyped(null);
    setTyping({ done: 0, total });
    let done = 0;
    for (const stroke of plan.strokes) {
      const rfb = rfbRef.current;
      if (run.cancelled || rfb === null) break;
      send(rfb, strokeEvents(stroke));
      done += 1;
      setTyping({ done, total });
      await sleep(TYPE_INTERVAL_MS);
    }
    typingRef.current = null;
    setTyping(null);
    const skipped =
      plan.skipped > 0
        ? ` ${plan.skipped} control character${plan.skipped === 1 ? "" : "s"} skipped.`
        : "";
    setTyped(
      done === total
        ? `Typed ${total} character${total === 1 ? "" : "s"}.${skipped}`
        : `Stopped after ${done} of ${total} characters.${skipped}`,
    );
  };

  const chosenCombo = findCombo(combo);
  const statusText = consoleStatusText(status, target.member, session);

  return (
    <div
      ref={viewRef}
      className={`console-view console-${statusState}`}
      data-testid="console-view"
      role="region"
      aria-labelledby={titleId}
      aria-describedby={hintId}
      tabIndex={-1}
    >
      <div className="console-bar">
        <RemoteHeading
          titleId={titleId}
          what="Console"
          member={target.member}
          namespace={target.namespace}
          state={statusState}
          statusText={statusText}
          statusTestId="console-status"
        />
        <div className="console-tools" role="group" aria-label="Console controls">
          <button
            type="button"
            className="btn btn-small"
            data-testid="console-scale"
            aria-pressed={scale}
            title="Scale the desktop to fit the window"
            onClick={() => {
              setScale((s) => !s);
            }}
          >
            Scale to window
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="console-fullscreen"
            aria-pressed={fullscreen}
            title="Show the console on the whole screen (Esc in full screen leaves it)"
            onClick={toggleFullscreen}
          >
            Full screen
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="console-ctrl-alt-del"
            disabled={!connected}
            title="Send Ctrl+Alt+Del to the desktop"
            onClick={() => {
              withRfb((rfb) => {
                rfb.sendCtrlAltDel();
              });
            }}
          >
            Ctrl+Alt+Del
          </button>
          <span className="console-combo">
            <label htmlFor={comboId} className="sr-only">
              Key combination
            </label>
            <select
              id={comboId}
              data-testid="console-keys"
              value={combo}
              title="Key combination to send"
              onChange={(e) => {
                setCombo(e.target.value);
              }}
            >
              {KEY_COMBOS.map((c) => (
                <option key={c.id} value={c.id}>
                  {c.label}
                </option>
              ))}
            </select>
            <button
              type="button"
              className="btn btn-small"
              data-testid="console-send-keys"
              disabled={!connected || chosenCombo === null}
              aria-label={chosenCombo ? `Send ${chosenCombo.label}` : "Send keys"}
              onClick={() => {
                if (chosenCombo === null) return;
                withRfb((rfb) => {
                  send(rfb, comboEvents(chosenCombo));
                });
              }}
            >
              Send keys
            </button>
          </span>
          <button
            ref={keyboardButtonRef}
            type="button"
            className="btn btn-small"
            data-testid="console-keyboard"
            disabled={!connected}
            title="Send the keyboard to the desktop; Shift+F12 brings it back"
            onClick={() => {
              withRfb((rfb) => {
                rfb.focus();
              });
            }}
          >
            Keyboard to desktop
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="console-reconnect"
            disabled={step.kind === "opening"}
            title="Open the console again, in a new session"
            onClick={onReconnect}
          >
            Reconnect
          </button>
          <button
            type="button"
            className="btn btn-small btn-quiet-danger"
            data-testid="console-close"
            title="Stop this console's session and go back"
            onClick={onClose}
          >
            Close
          </button>
        </div>
      </div>
      <form
        className="console-type"
        aria-label="Type text into the desktop"
        onSubmit={(event) => {
          event.preventDefault();
          if (typing !== null) {
            stopTyping();
          } else {
            void typeText();
          }
        }}
      >
        <label htmlFor={textId}>Type text</label>
        <textarea
          id={textId}
          className="console-type-input"
          data-testid="type-text-input"
          rows={1}
          value={text}
          maxLength={TYPE_MAX_CHARS}
          spellCheck={false}
          autoCapitalize="off"
          autoCorrect="off"
          autoComplete="off"
          placeholder="Paste text here, then Type"
          readOnly={typing !== null}
          onChange={(e) => {
            setText(e.target.value);
          }}
        />
        <button
          type="submit"
          className="btn btn-small"
          data-testid="type-text"
          disabled={typing === null && (!connected || text === "")}
          title="Type the text into the desktop, key by key, as if on a US keyboard"
        >
          {typing !== null ? "Stop typing" : "Type"}
        </button>
        <span className="muted console-type-status" role="status" data-testid="type-status">
          {typing !== null ? `Typing ${typing.done} of ${typing.total}…` : (typed ?? "")}
        </span>
        {fullscreenError !== null ? (
          <span className="console-tool-error" role="alert">
            {fullscreenError}
          </span>
        ) : null}
      </form>
      <div className="console-stage">
        {step.kind === "open" ? (
          <ConsoleScreen
            key={step.endpoint.id}
            url={step.endpoint.url}
            scale={scale}
            rfbRef={rfbRef}
            onStatus={(next) => {
              setScreenStatus({ id: step.endpoint.id, status: next });
            }}
          />
        ) : (
          <div className="console-screen" data-testid="console-screen" />
        )}
        {step.kind === "busy" ? (
          <div className="console-notice" role="alert" data-testid="console-busy">
            <p className="console-notice-title">{busyConsoleText(target.member)}.</p>
            <p>
              The console shows one viewer at a time. Taking over disconnects them: their console
              closes.
            </p>
            <div className="console-notice-actions">
              <button
                type="button"
                className="btn btn-primary"
                data-testid="take-over"
                onClick={onTakeOver}
              >
                Take over
              </button>
              <button type="button" className="btn" onClick={onReconnect}>
                Try again
              </button>
            </div>
          </div>
        ) : null}
        {step.kind === "failed" ? (
          <div className="console-notice" data-testid="console-failed">
            <ActionError
              source={`Console of ${target.member}`}
              error={step.error}
              testId="console-error"
            />
            <div className="console-notice-actions">
              <button type="button" className="btn" onClick={onReconnect}>
                Try again
              </button>
            </div>
          </div>
        ) : null}
        {status.kind === "disconnected" ? (
          <div className="console-notice" data-testid="console-disconnected">
            <p className="console-notice-title">{statusText}</p>
            <div className="console-notice-actions">
              <button type="button" className="btn btn-primary" onClick={onReconnect}>
                Reconnect
              </button>
            </div>
          </div>
        ) : null}
      </div>
      <p id={hintId} className="console-hint">
        Click the desktop (or Keyboard to desktop) to type into it; Shift+F12 gives the keyboard
        back to these controls. Esc goes to the desktop.
      </p>
    </div>
  );
}
