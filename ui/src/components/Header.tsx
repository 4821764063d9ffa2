import { useId, useRef, useState, type KeyboardEvent } from "react";
import type {
  BrokerBadge as BrokerBadgeView,
  ContextInfo,
  GuardStatus,
  Identity,
} from "../bindings";
import type { FeedIndicator } from "../lib/feed";
import { brokerTone } from "../lib/presentation";
import { heldChoice, stepsClosedSelect, type HeldStep } from "../lib/selectSteps";
import { sessionsButtonLabel, sessionsButtonText, type SessionCounts } from "../lib/sessions";
import {
  applyTheme,
  parseTheme,
  storedTheme,
  systemPrefersDark,
  type ThemeChoice,
} from "../lib/theme";
import { usbButtonLabel, usbButtonText } from "../lib/usb";

type HeaderProps = {
  contexts: ContextInfo[];
  contextsLoading: boolean;
  selectedContext: string | null;
  onContextChange: (name: string) => void;
  namespaceDraft: string;
  onNamespaceDraftChange: (value: string) => void;
  /** force: apply even if unchanged (Enter); otherwise only when changed (blur). */
  onNamespaceCommit: (force: boolean) => void;
  onNamespaceRevert: () => void;
  allNamespaces: boolean;
  onAllNamespacesChange: (checked: boolean) => void;
  identity: Identity | null;
  /** Whether the cluster enforces the claim rules itself; null when unknown. */
  guard: GuardStatus | null;
  /**
   * The cluster's broker (who grants each holder their desktop's access); "checking" before the
   * backend has said (a placeholder keeps its place); null when not connected or unknown.
   */
  broker: BrokerBadgeView | "checking" | null;
  feed: FeedIndicator;
  /** Active and ended sessions, for the Sessions button. */
  sessionCounts: SessionCounts;
  onOpenSessions: () => void;
  /** Local USB devices plugged in; null until the list is known. */
  usbCount: number | null;
  /** How many of them are attached to a desktop. */
  usbAttached: number;
  onOpenUsb: () => void;
  /** Opens the Capacity view; null when not connected to a cluster. */
  onOpenCapacity: (() => void) | null;
};

const CURRENT_CONTEXT_VALUE = "";

/**
 * A `<select>` whose choice is taken at once when picked from its list, but only on Enter (or
 * when the focus leaves it) when stepped through with the keys: WebKitGTK fires `change` at every
 * arrow on a closed `<select>`, and each would switch the context. Escape goes back. A held
 * step lapses when the choice shown changes meanwhile or `choices` no longer offers it.
 */
function useChoiceCommittedOnEnter(
  current: string,
  choices: readonly string[],
  commit: (value: string) => void,
) {
  const [pending, setPending] = useState<HeldStep | null>(null);
  // A key is down that steps the closed list: the `change` it makes is a step, not a pick.
  const stepping = useRef(false);
  const held = heldChoice(pending, current, choices);
  const take = (value: string) => {
    setPending(null);
    if (value !== current) commit(value);
  };
  return {
    value: held ?? current,
    onKeyDown: (event: KeyboardEvent<HTMLSelectElement>) => {
      if (stepsClosedSelect(event)) {
        stepping.current = true;
      } else if (event.key === "Enter" && held !== null) {
        event.preventDefault();
        take(held);
      } else if (event.key === "Escape" && held !== null) {
        event.preventDefault();
        setPending(null);
      }
    },
    onKeyUp: () => {
      stepping.current = false;
    },
    onBlur: () => {
      stepping.current = false;
      if (held !== null) take(held);
    },
    onChange: (value: string) => {
      const step = stepping.current;
      stepping.current = false;
      if (step) {
        setPending({ from: current, value });
      } else {
        take(value);
      }
    },
  };
}

export function Header(props: HeaderProps) {
  const {
    contexts,
    contextsLoading,
    selectedContext,
    onContextChange,
    namespaceDraft,
    onNamespaceDraftChange,
    onNamespaceCommit,
    onNamespaceRevert,
    allNamespaces,
    onAllNamespacesChange,
    identity,
    guard,
    broker,
    feed,
    sessionCounts,
    onOpenSessions,
    usbCount,
    usbAttached,
    onOpenUsb,
    onOpenCapacity,
  } = props;
  const contextId = useId();
  const namespaceId = useId();
  const groupsId = useId();

  const selected = contexts.find((c) => c.name === selectedContext);
  const hasSelection = selected !== undefined;
  const contextChoice = useChoiceCommittedOnEnter(
    selected ? selected.name : CURRENT_CONTEXT_VALUE,
    contexts.map((c) => c.name),
    (value) => {
      if (value !== CURRENT_CONTEXT_VALUE) onContextChange(value);
    },
  );

  const onNamespaceKeyDown = (event: KeyboardEvent<HTMLInputElement>) => {
    if (event.key === "Enter") {
      event.preventDefault();
      onNamespaceCommit(true);
    } else if (event.key === "Escape") {
      event.preventDefault();
      onNamespaceRevert();
    }
  };

  const groupsText =
    identity && identity.groups.length > 0
      ? `Groups: ${identity.groups.join(", ")}`
      : "Groups: none reported";

  return (
    <header className="app-header">
      <div className="brand">
        <svg className="brand-mark" viewBox="0 0 24 24" aria-hidden="true" focusable="false">
          <rect x="2" y="4" width="20" height="13" rx="2" />
          <path d="M8 21h8M12 17v4" />
        </svg>
        <span className="brand-name">Corral VDI Console</span>
      </div>

      <div className="controls" role="group" aria-label="Cluster and namespace">
        <div className="field">
          <label htmlFor={contextId}>Context</label>
          <select
            id={contextId}
            data-testid="context-select"
            value={contextChoice.value}
            disabled={contextsLoading || contexts.length === 0}
            onKeyDown={contextChoice.onKeyDown}
            onKeyUp={contextChoice.onKeyUp}
            onBlur={contextChoice.onBlur}
            onChange={(e) => {
              contextChoice.onChange(e.target.value);
            }}
            title={selected ? `Cluster: ${selected.cluster}` : undefined}
          >
            {!hasSelection ? (
              <option value={CURRENT_CONTEXT_VALUE} disabled={contexts.length > 0}>
                {contextsLoading
                  ? "Loading contexts…"
                  : contexts.length > 0
                    ? "Choose a context…"
                    : "No contexts"}
              </option>
            ) : null}
            {contexts.map((c) => (
              <option key={c.name} value={c.name} title={`Cluster: ${c.cluster}`}>
                {c.name}
              </option>
            ))}
          </select>
          {selected ? (
            <span className="field-hint" title="Cluster of this context">
              {selected.cluster}
            </span>
          ) : null}
        </div>

        <div className="field">
          <label htmlFor={namespaceId}>Namespace</label>
          <input
            id={namespaceId}
            data-testid="namespace-input"
            type="text"
            className="namespace-input"
            value={namespaceDraft}
            disabled={allNamespaces}
            spellCheck={false}
            autoCapitalize="off"
            autoCorrect="off"
            autoComplete="off"
            title="Press Enter to apply, Escape to undo"
            onChange={(e) => {
              onNamespaceDraftChange(e.target.value);
            }}
            onKeyDown={onNamespaceKeyDown}
            onBlur={() => {
              onNamespaceCommit(false);
            }}
          />
          <label className="checkbox">
            <input
              type="checkbox"
              data-testid="all-namespaces"
              checked={allNamespaces}
              onChange={(e) => {
                onAllNamespacesChange(e.target.checked);
              }}
            />
            All namespaces
          </label>
        </div>
      </div>

      <div className="header-status">
        <div
          className={`feed-status feed-${feed.tone}`}
          data-testid="feed-status"
          role="status"
          aria-live="polite"
          title={feed.detail}
        >
          {feed.text}
        </div>
        {identity ? (
          <>
            <span
              className="identity-badge"
              data-testid="identity-badge"
              title={groupsText}
              tabIndex={0}
              aria-describedby={groupsId}
            >
              you are {identity.username}
            </span>
            <span id={groupsId} className="sr-only">
              {groupsText}
            </span>
          </>
        ) : (
          <span className="identity-badge identity-unknown" title="Not signed in to a cluster yet">
            identity unknown
          </span>
        )}
        {guard ? <GuardBadge guard={guard} /> : null}
        {broker === "checking" ? (
          <span className="badge tone-grey broker-badge" data-testid="broker-badge-checking">
            checking broker…
          </span>
        ) : broker ? (
          <BrokerBadge broker={broker} />
        ) : null}
        <button
          type="button"
          className={
            sessionCounts.active > 0
              ? "btn btn-small sessions-button has-active"
              : "btn btn-small sessions-button"
          }
          data-testid="sessions-button"
          aria-label={sessionsButtonLabel(sessionCounts)}
          title="Consoles, viewers and forwards the app started"
          onClick={onOpenSessions}
        >
          {sessionsButtonText(sessionCounts)}
        </button>
        <button
          type="button"
          className={
            usbAttached > 0 ? "btn btn-small usb-button has-attached" : "btn btn-small usb-button"
          }
          data-testid="usb-button"
          aria-label={usbButtonLabel(usbCount, usbAttached)}
          title="USB devices plugged into this machine, to redirect into your desktop"
          onClick={onOpenUsb}
        >
          {usbButtonText(usbCount)}
        </button>
        <button
          type="button"
          className="btn btn-small"
          data-testid="capacity-button"
          title={
            onOpenCapacity === null
              ? "Connect to a cluster to see its GPUs and host devices"
              : "GPUs and host devices: allocatable, held and free per node"
          }
          disabled={onOpenCapacity === null}
          onClick={onOpenCapacity ?? undefined}
        >
          Capacity
        </button>
        <ThemeSwitch />
      </div>
    </header>
  );
}

/** Light, dark, or the system's choice; applied at once and remembered. */
function ThemeSwitch() {
  const [choice, setChoice] = useState<ThemeChoice>(() => storedTheme(window.localStorage));
  return (
    <select
      className="theme-select"
      data-testid="theme-select"
      aria-label="Theme"
      title="Theme: the system's, light or dark"
      value={choice}
      onChange={(e) => {
        const next = parseTheme(e.target.value);
        setChoice(next);
        applyTheme(next, document.documentElement, window.localStorage, systemPrefersDark());
      }}
    >
      <option value="system">System theme</option>
      <option value="light">Light</option>
      <option value="dark">Dark</option>
    </select>
  );
}

/**
 * Whether a broker grants each holder their own desktop's console, forwards, USB and power (the
 * core's words: "broker: <leader>", "broker: no leader", "no broker"), its detail in the title
 * and for screen readers.
 */
export function BrokerBadge({ broker }: { broker: BrokerBadgeView }) {
  const id = useId();
  return (
    <>
      <span
        className={`badge tone-${brokerTone(broker)} broker-badge`}
        data-testid="broker-badge"
        title={broker.detail}
        tabIndex={0}
        aria-describedby={id}
      >
        {broker.text}
      </span>
      <span id={id} className="sr-only">
        {broker.detail}
      </span>
    </>
  );
}

/** Whether the cluster's API server enforces the claim rules itself (the Corral VDI guard). */
function GuardBadge({ guard }: { guard: GuardStatus }) {
  const id = useId();
  const [label, tone] =
    guard.state === "installed"
      ? ["guard on", "green"]
      : guard.state === "outdated"
        ? ["guard outdated", "amber"]
        : guard.state === "partial"
          ? ["guard incomplete", "amber"]
          : guard.state === "absent"
            ? ["guard off", "amber"]
            : ["guard unknown", "grey"];
  return (
    <>
      <span
        className={`badge tone-${tone} guard-badge`}
        data-testid="guard-badge"
        title={guard.summary}
        tabIndex={0}
        aria-describedby={id}
      >
        {label}
      </span>
      <span id={id} className="sr-only">
        {guard.summary}
      </span>
    </>
  );
}
