import { useCallback, useEffect, useRef, useState } from "react";
import { onUsbDevices, stopSession, usbDevices, usbRedirect } from "./api";
import type { ErrorView, SessionView, UsbDevice, UsbList } from "./bindings";
import { describeRedirected, usbDescription, type RedirectTarget } from "./lib/usb";

/** The confirmation before attaching a device to a desktop. */
export type UsbConfirm = {
  device: UsbDevice;
  target: RedirectTarget;
  /** Attach was pressed and usb_redirect has not answered yet. */
  running: boolean;
  /** Why the last Attach failed. */
  error: ErrorView | null;
};

/** The outcome of the last attach or detach, shown in the USB devices view. */
export type UsbNotice =
  | { id: number; kind: "success"; text: string }
  | { id: number; kind: "error"; source: string; error: ErrorView };

/**
 * The local USB devices, live (the `usb-devices` event's list, after one usb_devices for the
 * list before the window listened), and the redirections the USB devices view starts and
 * stops. Kept by the app, so that an attach that answers after its dialog closed still says
 * how it went. Attaching and detaching refetch nothing: the sessions-changed event brings the
 * new session list.
 */
export function useUsb() {
  const [list, setList] = useState<UsbList | null>(null);
  const [listError, setListError] = useState<{ source: string; error: ErrorView } | null>(null);
  const [confirm, setConfirm] = useState<UsbConfirm | null>(null);
  /** Devices (by bus-address) whose attach is running. */
  const [attaching, setAttaching] = useState<ReadonlySet<string>>(() => new Set());
  /** Sessions whose Detach is running. */
  const [detaching, setDetaching] = useState<ReadonlySet<number>>(() => new Set());
  const [notice, setNotice] = useState<UsbNotice | null>(null);

  // Bookkeeping read only in callbacks, never while rendering.
  const attachingRef = useRef(new Set<string>());
  const detachingRef = useRef(new Set<number>());
  const noticeIdRef = useRef(0);
  const attemptRef = useRef(0);
  /** The attempt the confirmation shows; null once it closed (its outcome is then a notice). */
  const shownAttemptRef = useRef<number | null>(null);

  useEffect(() => {
    const flags = { disposed: false, heard: false };
    // Read through a function, so that changes made by callbacks are not narrowed away.
    const superseded = () => flags.disposed || flags.heard;
    let unlisten: (() => void) | null = null;
    void (async () => {
      const subscription = await onUsbDevices((next) => {
        if (flags.disposed) return;
        flags.heard = true;
        setList(next);
        setListError(null);
      });
      if (flags.disposed) {
        if (subscription.ok) subscription.value();
        return;
      }
      if (!subscription.ok) {
        setListError({ source: "Listening for USB devices", error: subscription.error });
        return;
      }
      unlisten = subscription.value;
      const listed = await usbDevices();
      if (superseded()) return;
      if (listed.ok) {
        setList(listed.value);
      } else {
        setListError({ source: "Listing USB devices", error: listed.error });
      }
    })();
    return () => {
      flags.disposed = true;
      unlisten?.();
    };
  }, []);

  const showNotice = useCallback(
    (
      next: { kind: "success"; text: string } | { kind: "error"; source: string; error: ErrorView },
    ) => {
      noticeIdRef.current += 1;
      setNotice({ id: noticeIdRef.current, ...next });
    },
    [],
  );

  /** Opens the confirmation for attaching `device` to `target`. */
  const choose = useCallback((device: UsbDevice, target: RedirectTarget) => {
    shownAttemptRef.current = null;
    setConfirm({ device, target, running: false, error: null });
  }, []);

  /** Closes the confirmation; an attach still running then reports as a notice. */
  const cancel = useCallback(() => {
    shownAttemptRef.current = null;
    setConfirm(null);
  }, []);

  /**
   * Attaches `device` to `target` (usb_redirect with `argument`, the device's id or
   * bus-address). Success closes the confirmation; a refusal stays in it.
   */
  const attach = useCallback(
    (device: UsbDevice, target: RedirectTarget, argument: string) => {
      const key = device.busAddress;
      if (attachingRef.current.has(key)) return;
      attachingRef.current.add(key);
      setAttaching(new Set(attachingRef.current));
      attemptRef.current += 1;
      const attempt = attemptRef.current;
      shownAttemptRef.current = attempt;
      setConfirm({ device, target, running: true, error: null });
      setNotice(null);
      void usbRedirect(target.namespace, target.member, argument).then((result) => {
        attachingRef.current.delete(key);
        setAttaching(new Set(attachingRef.current));
        const shown = shownAttemptRef.current === attempt;
        if (result.ok) {
          if (shown) {
            shownAttemptRef.current = null;
            setConfirm(null);
          }
          showNotice({ kind: "success", text: describeRedirected(device, result.value) });
        } else if (shown) {
          setConfirm({ device, target, running: false, error: result.error });
        } else {
          showNotice({
            kind: "error",
            source: `Attach ${usbDescription(device)} to ${target.member}`,
            error: result.error,
          });
        }
      });
    },
    [showNotice],
  );

  /** Detaches a device: stops its redirection session. */
  const detach = useCallback(
    (device: UsbDevice, session: SessionView) => {
      const id = session.id;
      if (detachingRef.current.has(id)) return;
      detachingRef.current.add(id);
      setDetaching(new Set(detachingRef.current));
      setNotice(null);
      void stopSession(id).then((result) => {
        detachingRef.current.delete(id);
        setDetaching(new Set(detachingRef.current));
        const what = `${usbDescription(device)} from ${session.member}`;
        if (result.ok) {
          showNotice({
            kind: "success",
            text: result.value
              ? `Detached ${what}: it is back on this machine.`
              : `The redirection of ${usbDescription(device)} to ${session.member} had already ended.`,
          });
        } else {
          showNotice({ kind: "error", source: `Detach ${what}`, error: result.error });
        }
      });
    },
    [showNotice],
  );

  const dismissNotice = useCallback(() => {
    setNotice(null);
  }, []);

  return {
    list,
    listError,
    confirm,
    attaching,
    detaching,
    notice,
    choose,
    cancel,
    attach,
    detach,
    dismissNotice,
  };
}

/** What useUsb gives the USB devices view. */
export type UsbState = ReturnType<typeof useUsb>;
