import {
  useEffect,
  useEffectEvent,
  useId,
  useLayoutEffect,
  useRef,
  type ReactNode,
  type RefObject,
} from "react";
import { createPortal } from "react-dom";

/** Where focus goes when a dialog closes and its opener is gone or disabled. */
export const FOCUS_FALLBACK_ID = "app-main";

const FOCUSABLE = [
  "a[href]",
  "button:not([disabled])",
  "input:not([disabled])",
  "select:not([disabled])",
  "textarea:not([disabled])",
  '[tabindex]:not([tabindex="-1"])',
].join(",");

function focusables(root: HTMLElement): HTMLElement[] {
  return Array.from(root.querySelectorAll<HTMLElement>(FOCUSABLE));
}

function usable(element: HTMLElement | null): element is HTMLElement {
  return (
    element !== null &&
    element.isConnected &&
    !(element instanceof HTMLButtonElement && element.disabled) &&
    element.closest("[inert]") === null
  );
}

type ModalProps = {
  title: string;
  /** "alertdialog" for confirmations. */
  role?: "dialog" | "alertdialog";
  /** Esc, and the dialog's own Cancel/Close buttons. */
  onClose: () => void;
  /** What to focus on opening; else the first focusable element. */
  initialFocusRef?: RefObject<HTMLElement | null>;
  /** id of the element describing the dialog. */
  describedBy?: string;
  testId?: string;
  /** For dialogs with tables (pool create progress). */
  wide?: boolean;
  /** Extra class names for the dialog box (a size of its own). */
  className?: string;
  children: ReactNode;
};

/**
 * A modal dialog over the whole window: rendered into <body> while the app behind it is
 * inert (the caller sets that), Tab cycles within it, Esc closes it, and focus returns to the
 * element that opened it.
 */
export function Modal({
  title,
  role = "dialog",
  onClose,
  initialFocusRef,
  describedBy,
  testId,
  wide = false,
  className,
  children,
}: ModalProps) {
  const dialogRef = useRef<HTMLDivElement>(null);
  const titleId = useId();

  /** Bumped on every open, so that a restore scheduled by an earlier close is dropped. */
  const openCountRef = useRef(0);
  /** Read once: when StrictMode re-runs the effect, focus is already inside the dialog. */
  const openerRef = useRef<HTMLElement | null>(null);

  // A layout effect: the opener must be read before the app behind turns inert and the browser
  // moves focus away from it.
  useLayoutEffect(() => {
    openCountRef.current += 1;
    const openCount = openCountRef.current;
    if (openerRef.current === null && document.activeElement instanceof HTMLElement) {
      openerRef.current = document.activeElement;
    }
    const opener = openerRef.current;
    const dialog = dialogRef.current;
    const target = initialFocusRef?.current ?? (dialog ? (focusables(dialog)[0] ?? dialog) : null);
    target?.focus();
    return () => {
      // After the commit, once the app behind is no longer inert.
      queueMicrotask(() => {
        if (openCountRef.current !== openCount) return;
        if (usable(opener)) {
          opener.focus();
        } else {
          document.getElementById(FOCUS_FALLBACK_ID)?.focus();
        }
      });
    };
  }, [initialFocusRef]);

  // On the document rather than the dialog, so that keys still work when the focused control
  // was just disabled (focus then falls back to <body>).
  const onKeyDown = useEffectEvent((event: KeyboardEvent) => {
    const dialog = dialogRef.current;
    if (dialog === null) return;
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      onClose();
      return;
    }
    if (event.key !== "Tab") return;
    const items = focusables(dialog);
    if (items.length === 0) {
      event.preventDefault();
      dialog.focus();
      return;
    }
    const first = items[0];
    const last = items[items.length - 1];
    const active = document.activeElement;
    const inside = active instanceof Node && dialog.contains(active);
    if (!inside || active === dialog) {
      event.preventDefault();
      (event.shiftKey ? last : first).focus();
    } else if (event.shiftKey && active === first) {
      event.preventDefault();
      last.focus();
    } else if (!event.shiftKey && active === last) {
      event.preventDefault();
      first.focus();
    }
  });

  useEffect(() => {
    const listener = (event: KeyboardEvent) => {
      onKeyDown(event);
    };
    document.addEventListener("keydown", listener);
    return () => {
      document.removeEventListener("keydown", listener);
    };
  }, []);

  return createPortal(
    <div className="modal-backdrop">
      <div
        ref={dialogRef}
        className={["modal", wide ? "modal-wide" : null, className ?? null]
          .filter((c) => c !== null)
          .join(" ")}
        role={role}
        aria-modal="true"
        aria-labelledby={titleId}
        aria-describedby={describedBy}
        tabIndex={-1}
        data-testid={testId}
      >
        <h2 id={titleId} className="modal-title">
          {title}
        </h2>
        {children}
      </div>
    </div>,
    document.body,
  );
}
