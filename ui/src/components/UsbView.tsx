import { useId, useRef, useState, type ReactNode, type RefObject } from "react";
import type { Identity, PoolView, Scope, SessionView, UsbDevice, UsbList } from "../bindings";
import { describeScope } from "../lib/presentation";
import {
  asSentence,
  attachedSession,
  describeAttached,
  describeClasses,
  describeSpeed,
  findTarget,
  markWarning,
  noTargetText,
  redirectArgument,
  redirectTargets,
  splitCode,
  usbDescription,
  usbEmptyText,
  usbMarkDetail,
  usbMarkLabel,
  usbSourceText,
  usbTestId,
  type RedirectTarget,
  type RedirectTargets,
} from "../lib/usb";
import type { UsbConfirm, UsbState } from "../useUsb";
import { ActionError, ActionNotice } from "./ActionNotice";
import { Missing, PowerBadge } from "./MemberCells";
import { Modal } from "./Modal";
import { Working } from "./Working";

type UsbViewProps = {
  usb: UsbState;
  /** The live session list: USB redirections are sessions of kind "usb". */
  sessions: readonly SessionView[];
  /** The pools on screen; null when not connected to a cluster. */
  pools: readonly PoolView[] | null;
  /** Who the cluster says you are; null when it could not say. */
  identity: Identity | null;
  /** The namespaces the pools cover; null when not connected. */
  scope: Scope | null;
  onClose: () => void;
};

/**
 * "USB devices": the devices plugged into this machine, live, with what they are (classes,
 * smartcard and security-key marks) and whether you may open them; each can be redirected into
 * one of your running desktops after a confirmation that says what that means, and detached.
 * A redirection is a session: Sessions lists it too, and it ends when the app exits.
 */
export function UsbView({ usb, sessions, pools, identity, scope, onClose }: UsbViewProps) {
  const introId = useId();
  const noticeId = useId();
  const listFocusRef = useRef<HTMLButtonElement>(null);
  const cancelRef = useRef<HTMLButtonElement>(null);
  /** The device whose "Redirect to…" list is open (by bus-address). */
  const [expanded, setExpanded] = useState<string | null>(null);
  /** The device whose action gets focus when the confirmation closes. */
  const [returnTo, setReturnTo] = useState<string | null>(null);

  const username = identity?.username ?? null;
  const targets = redirectTargets(pools ?? [], username);
  const targetsBlocker =
    pools === null || scope === null
      ? "Not connected to a cluster: your desktops are not known."
      : username === null
        ? "Your identity is unknown (the cluster did not say who you are), so your desktops cannot be found."
        : null;
  const scopeText = scope === null ? null : describeScope(scope);

  const { list, confirm } = usb;

  if (confirm !== null) {
    return (
      <Modal
        title={`Attach ${usbDescription(confirm.device)}?`}
        role="alertdialog"
        onClose={usb.cancel}
        initialFocusRef={cancelRef}
        describedBy={noticeId}
        testId="usb-confirm"
        wide
      >
        <ConfirmBody
          confirm={confirm}
          list={list}
          sessions={sessions}
          targets={targets}
          noticeId={noticeId}
          cancelRef={cancelRef}
          onCancel={usb.cancel}
          onAttach={(device, argument) => {
            usb.attach(device, confirm.target, argument);
          }}
        />
      </Modal>
    );
  }

  const devices = list?.devices ?? [];
  const focusKey =
    returnTo !== null && devices.some((d) => d.busAddress === returnTo) ? returnTo : null;

  let body: ReactNode;
  if (list === null) {
    body = usb.listError ? null : (
      <p className="muted usb-empty" role="status" data-testid="usb-loading">
        <Working label="Listing the USB devices…" />
      </p>
    );
  } else if (list.devices.length === 0) {
    body = (
      <p
        className={
          list.problem !== null && list.problem.trim() !== ""
            ? "usb-empty usb-problem"
            : "muted usb-empty"
        }
        data-testid="usb-empty"
      >
        {usbEmptyText(list)}
      </p>
    );
  } else {
    body = (
      <>
        {list.problem !== null && list.problem.trim() !== "" ? (
          <p className="usb-problem" data-testid="usb-problem">
            The list may be incomplete: {list.problem}
          </p>
        ) : null}
        <ul className="usb-devices" aria-label="USB devices">
          {list.devices.map((device) => {
            const key = device.busAddress;
            return (
              <DeviceItem
                key={key}
                device={device}
                attached={attachedSession(device, sessions)}
                attaching={usb.attaching.has(key)}
                detaching={usb.detaching}
                expanded={expanded === key}
                targets={targets}
                targetsBlocker={targetsBlocker}
                scopeText={scopeText}
                focusRef={focusKey === key ? listFocusRef : undefined}
                onToggle={() => {
                  setExpanded((open) => (open === key ? null : key));
                }}
                onChoose={(target) => {
                  setReturnTo(key);
                  setExpanded(null);
                  usb.choose(device, target);
                }}
                onDetach={(session) => {
                  setReturnTo(key);
                  usb.detach(device, session);
                }}
              />
            );
          })}
        </ul>
      </>
    );
  }

  return (
    <Modal
      title="USB devices"
      onClose={onClose}
      describedBy={introId}
      initialFocusRef={listFocusRef}
      testId="usb-view"
      className="modal-usb"
    >
      <p id={introId} className="modal-text muted">
        The USB devices plugged into this machine. Redirecting one hands it to one of your running
        desktops until you detach it; Sessions lists it too.
        {list !== null ? (
          <>
            {" "}
            <small className="usb-source" data-testid="usb-source" data-source={list.source}>
              List: {usbSourceText(list.source)}.
            </small>
          </>
        ) : null}
      </p>
      {usb.listError ? (
        <ActionError
          source={usb.listError.source}
          error={usb.listError.error}
          testId="usb-list-error"
        />
      ) : null}
      {usb.notice ? (
        <div className="usb-outcome" data-testid="usb-outcome">
          <ActionNotice notice={usb.notice} onDismiss={usb.dismissNotice} />
        </div>
      ) : null}
      {body}
      <div className="modal-actions">
        <button
          ref={focusKey === null ? listFocusRef : undefined}
          type="button"
          className="btn"
          data-testid="usb-close"
          onClick={onClose}
        >
          Close
        </button>
      </div>
    </Modal>
  );
}

type DeviceItemProps = {
  device: UsbDevice;
  /** Its redirection, when it is attached to a desktop. */
  attached: SessionView | null;
  /** Its attach is running. */
  attaching: boolean;
  /** Sessions whose Detach is running. */
  detaching: ReadonlySet<number>;
  /** Its "Redirect to…" list is open. */
  expanded: boolean;
  targets: RedirectTargets;
  /** Why no desktop can be offered at all (not connected, identity unknown). */
  targetsBlocker: string | null;
  scopeText: string | null;
  /** Put on its action, to get focus back after the confirmation. */
  focusRef: RefObject<HTMLButtonElement | null> | undefined;
  onToggle: () => void;
  onChoose: (target: RedirectTarget) => void;
  onDetach: (session: SessionView) => void;
};

/** One device: what it is, whether you may open it, where it is attached, its actions. */
function DeviceItem({
  device,
  attached,
  attaching,
  detaching,
  expanded,
  targets,
  targetsBlocker,
  scopeText,
  focusRef,
  onToggle,
  onChoose,
  onDetach,
}: DeviceItemProps) {
  const headingId = useId();
  const accessId = useId();
  const panelId = useId();
  const tid = usbTestId(device.id);
  const description = usbDescription(device);
  const writable = device.access.writable;
  const stopping = attached !== null && detaching.has(attached.id);

  // One button, Detach while attached and Redirect to… otherwise: the same element either way,
  // so that focus stays on it when the device is attached or detached. Busy, it is
  // aria-disabled rather than disabled, so that focus is not lost while it works.
  const busy = attached !== null ? stopping : attaching;
  const redirectBlocked = attached === null && !writable;
  const button =
    attached !== null ? (
      <button
        ref={focusRef}
        type="button"
        className="btn btn-small btn-quiet-danger"
        data-testid={`usb-detach-${tid}`}
        aria-disabled={busy || undefined}
        aria-busy={busy || undefined}
        aria-label={busy ? undefined : `Detach ${description} from ${attached.member}`}
        title={`Stop the redirection: ${description} comes back to this machine`}
        onClick={() => {
          if (!busy) onDetach(attached);
        }}
      >
        {busy ? <Working label="Detaching…" /> : "Detach"}
      </button>
    ) : (
      <button
        ref={redirectBlocked ? undefined : focusRef}
        type="button"
        className="btn btn-small"
        data-testid={`usb-redirect-${tid}`}
        disabled={redirectBlocked}
        aria-disabled={busy || undefined}
        aria-busy={busy || undefined}
        aria-expanded={redirectBlocked || busy ? undefined : expanded}
        aria-controls={expanded && !busy ? panelId : undefined}
        aria-describedby={redirectBlocked ? accessId : undefined}
        aria-label={busy ? undefined : `Redirect to… (${description})`}
        title={
          redirectBlocked
            ? "You cannot open this device yet: see the fix below"
            : `Choose one of your running desktops to hand ${description} to`
        }
        onClick={() => {
          if (!busy) onToggle();
        }}
      >
        {busy ? <Working label="Attaching…" /> : "Redirect to…"}
      </button>
    );
  const where =
    attached !== null ? (
      <>
        <span
          className="badge tone-blue usb-attached"
          data-testid={`usb-attached-${tid}`}
          title={`Session #${attached.id}, in namespace ${attached.namespace}`}
        >
          {describeAttached(attached)}
        </span>
        <span className="muted usb-attached-ns">({attached.namespace})</span>
      </>
    ) : null;

  return (
    <li
      className={attached !== null ? "usb-device usb-device-attached" : "usb-device"}
      data-testid={`usb-device-${tid}`}
      data-bus-address={device.busAddress}
      aria-labelledby={headingId}
    >
      <div className="usb-head">
        <h3 id={headingId} className="usb-name">
          {description}
        </h3>
        {device.marks.length > 0 ? (
          <span className="usb-marks">
            {device.marks.map((mark) => (
              <span
                key={mark}
                className={`badge ${mark === "smartcard" ? "tone-blue" : "tone-amber"} usb-mark`}
                data-testid={`usb-mark-${mark}`}
                title={usbMarkDetail(mark)}
              >
                {usbMarkLabel(mark)}
              </span>
            ))}
          </span>
        ) : null}
        <div className="usb-actions">
          {where}
          {button}
        </div>
      </div>
      <dl className="usb-facts">
        <div>
          <dt>ID</dt>
          <dd className="mono" data-testid={`usb-id-${tid}`}>
            {device.id}
          </dd>
        </div>
        <div>
          <dt>Bus-address</dt>
          <dd className="mono">{device.busAddress}</dd>
        </div>
        <div>
          <dt>Serial</dt>
          <dd className="mono">{device.serial ?? <Missing title="No serial number" />}</dd>
        </div>
        <div>
          <dt>Speed</dt>
          <dd>{describeSpeed(device.speed)}</dd>
        </div>
        <div>
          <dt>Classes</dt>
          <dd data-testid={`usb-classes-${tid}`}>{describeClasses(device)}</dd>
        </div>
      </dl>
      {writable ? null : (
        <div id={accessId} className="usb-access" data-testid={`usb-access-${tid}`}>
          <p>
            <strong>
              You cannot open this device: its node{" "}
              <span className="mono">{device.access.node}</span> is not writable by you, so it
              cannot be redirected.
            </strong>
          </p>
          <p className="usb-fix">
            <span className="banner-label">To fix it:</span>{" "}
            {device.access.fix === null ? (
              "ask the administrator of this machine for access to the node."
            ) : (
              <FixText text={device.access.fix} />
            )}
          </p>
        </div>
      )}
      {expanded && attached === null && writable && !attaching ? (
        <TargetList
          panelId={panelId}
          tid={tid}
          description={description}
          targets={targets}
          blocker={targetsBlocker}
          scopeText={scopeText}
          onChoose={onChoose}
        />
      ) : null}
    </li>
  );
}

/** The udev fix, its quoted commands as code. */
function FixText({ text }: { text: string }) {
  return (
    <>
      {splitCode(text).map((part, i) =>
        part.code ? <code key={i}>{part.text}</code> : <span key={i}>{part.text}</span>,
      )}
    </>
  );
}

type TargetListProps = {
  panelId: string;
  tid: string;
  description: string;
  targets: RedirectTargets;
  blocker: string | null;
  scopeText: string | null;
  onChoose: (target: RedirectTarget) => void;
};

/** "Redirect to…": your running desktops, and your others greyed with the reason. */
function TargetList({
  panelId,
  tid,
  description,
  targets,
  blocker,
  scopeText,
  onChoose,
}: TargetListProps) {
  const titleId = useId();
  const none = blocker ?? noTargetText(targets);
  return (
    <div
      id={panelId}
      className="usb-targets"
      role="group"
      aria-labelledby={titleId}
      data-testid={`usb-targets-${tid}`}
    >
      <p id={titleId} className="usb-targets-title">
        Redirect {description} to one of your desktops
        {scopeText !== null ? ` in ${scopeText}` : ""}:
      </p>
      {none !== null ? (
        <p className="usb-no-desktop" data-testid="usb-no-desktop">
          {none}
        </p>
      ) : null}
      {blocker === null && (targets.available.length > 0 || targets.unavailable.length > 0) ? (
        <ul className="usb-target-list">
          {targets.available.map((t) => (
            <li key={`${t.namespace}/${t.member}`}>
              <button
                type="button"
                className="btn usb-target"
                data-testid={`usb-target-${t.member}`}
                data-namespace={t.namespace}
                title={`Attach ${description} to ${t.member} (asks first)`}
                onClick={() => {
                  onChoose(t);
                }}
              >
                <span className="mono">{t.member}</span>
                <span className="muted">
                  {t.namespace} · pool {t.pool}
                </span>
                <PowerBadge power={t.power} />
              </button>
            </li>
          ))}
          {targets.unavailable.map((t) => (
            <li
              key={`${t.namespace}/${t.member}`}
              className="usb-target-off"
              data-testid={`usb-target-off-${t.member}`}
              data-namespace={t.namespace}
            >
              <span className="mono">{t.member}</span>{" "}
              <span className="muted">
                ({t.namespace} · pool {t.pool})
              </span>{" "}
              <PowerBadge power={t.power} /> <span className="usb-target-reason">{t.reason}</span>
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

type ConfirmBodyProps = {
  confirm: UsbConfirm;
  list: UsbList | null;
  sessions: readonly SessionView[];
  targets: RedirectTargets;
  noticeId: string;
  cancelRef: RefObject<HTMLButtonElement | null>;
  onCancel: () => void;
  /** Attach the device (as it is listed now) with its usb_redirect argument. */
  onAttach: (device: UsbDevice, argument: string) => void;
};

/**
 * Before attaching: the device, the desktop, and what attaching means (the backend's notice).
 * Checked again against the live lists: the device must still be plugged in and not attached,
 * the desktop still yours and running.
 */
function ConfirmBody({
  confirm,
  list,
  sessions,
  targets,
  noticeId,
  cancelRef,
  onCancel,
  onAttach,
}: ConfirmBodyProps) {
  const { target, running, error } = confirm;
  const devices = list?.devices ?? [];
  const current =
    devices.find((d) => d.busAddress === confirm.device.busAddress && d.id === confirm.device.id) ??
    null;
  const device = current ?? confirm.device;
  const description = usbDescription(device);
  const now = findTarget(targets, target.namespace, target.member);
  const attached = attachedSession(device, sessions);

  let blocker: string | null = null;
  if (current === null) {
    blocker = `${description} (${device.id}) is no longer plugged in: plug it in again.`;
  } else if (attached !== null) {
    blocker = `${description} is already ${describeAttached(attached)}: detach it first.`;
  } else if (!current.access.writable) {
    blocker = `You cannot open ${description}: see the fix in the list.`;
  } else if (now === null) {
    blocker = `${target.member} is no longer one of your desktops.`;
  } else if (now.reason !== null) {
    blocker = `${target.member} is ${now.reason}.`;
  }
  const warning = markWarning(device.marks);
  const notice = list?.notice ?? "";

  return (
    <>
      <dl className="usb-confirm-facts">
        <div>
          <dt>Device</dt>
          <dd data-testid="usb-confirm-device">
            <strong>{description}</strong>{" "}
            <span className="mono">
              {device.id} · {device.busAddress}
            </span>
          </dd>
        </div>
        <div>
          <dt>Desktop</dt>
          <dd data-testid="usb-confirm-desktop">
            <strong className="mono">{target.member}</strong>{" "}
            <span className="muted">
              in namespace <span className="mono">{target.namespace}</span>, pool{" "}
              <span className="mono">{target.pool}</span>
            </span>
          </dd>
        </div>
      </dl>
      <div id={noticeId} className="usb-notice" data-testid="usb-notice">
        <p className="banner-kicker">What attaching means</p>
        <p>{notice !== "" ? notice : "The device leaves this machine while it is attached."}</p>
        {warning !== null ? (
          <p className="usb-notice-mark" data-testid="usb-notice-mark">
            <strong>{warning}</strong>
          </p>
        ) : null}
      </div>
      {blocker !== null && !running ? (
        <p className="usb-blocker" role="status" data-testid="usb-confirm-blocked">
          {asSentence(blocker)}
        </p>
      ) : null}
      {error !== null ? (
        <ActionError
          source={`Attach ${description} to ${target.member}`}
          error={error}
          testId="usb-error"
        />
      ) : null}
      {running ? (
        <p className="muted usb-running" role="status">
          Waiting for usbredirect and the desktop (up to about 15 seconds). Cancel closes this; the
          outcome then shows in the list.
        </p>
      ) : null}
      <div className="modal-actions">
        <button
          ref={cancelRef}
          type="button"
          className="btn"
          data-testid="usb-cancel"
          onClick={onCancel}
        >
          Cancel
        </button>
        <button
          type="button"
          className="btn btn-primary"
          data-testid="usb-attach"
          disabled={!running && (blocker !== null || current === null)}
          aria-disabled={running || undefined}
          aria-busy={running || undefined}
          title={blocker ?? `Attach ${description} to ${target.member}`}
          onClick={() => {
            if (!running && current !== null) {
              onAttach(current, redirectArgument(current, devices));
            }
          }}
        >
          {running ? <Working label="Attaching…" /> : "Attach"}
        </button>
      </div>
    </>
  );
}
