/**
 * The clipboard in the app's window: text on the OS clipboard, read and written by the backend
 * (WebKitGTK refuses a page's clipboard read that no paste started), and kept in step with an
 * RDP session's clipboard both ways.
 */
import type { ErrorView } from "../bindings";

/** What the page's `navigator.clipboard` offers for text. */
export type TextClipboard = {
  readText(): Promise<string>;
  writeText(text: string): Promise<void>;
};

type Outcome<T> = { ok: true; value: T } | { ok: false; error: ErrorView };

/**
 * A `navigator.clipboard` for text on top of the backend's commands: reading an empty clipboard
 * gives "", a refusal rejects with the backend's message (as the browser's would).
 */
export function backendClipboard(
  read: () => Promise<Outcome<string | null>>,
  write: (text: string) => Promise<Outcome<null>>,
): TextClipboard {
  return {
    async readText() {
      const result = await read();
      if (!result.ok) throw new Error(result.error.message);
      return result.value ?? "";
    },
    async writeText(text: string) {
      const result = await write(text);
      if (!result.ok) throw new Error(result.error.message);
    },
  };
}

/**
 * Makes `clipboard` the page's `navigator.clipboard` (or that of `page`, the RDP frame's). It
 * offers text only, so IronRDP's web component takes its text mode, in which the app decides
 * when text moves ({@link syncRdpClipboard}).
 */
export function installPageClipboard(clipboard: TextClipboard, page: Navigator = navigator): void {
  Object.defineProperty(page, "clipboard", { value: clipboard, configurable: true });
}

/** What {@link syncRdpClipboard} needs of IronRDP's `UserInteraction` in its text mode. */
export type RdpClipboardPeer = {
  /** Reads the page's clipboard (`readText`) and announces it to the guest. */
  sendClipboardData(): Promise<void>;
  /** Writes the guest's last copied text to the page's clipboard (`writeText`). */
  saveRemoteClipboardData(): Promise<void>;
  onClipboardRemoteUpdateCallback(callback: () => void): void;
};

/** How often the local clipboard is looked at during an RDP session (milliseconds). */
export const CLIPBOARD_POLL_MS = 500;

/** How long after a copy gesture in the view the guest's copy is taken (milliseconds). */
export const COPY_GESTURE_MS = 10_000;

/** When text may move: asked by {@link syncRdpClipboard} before each step. */
export type ClipboardGate = {
  /** Whether the session's view has the keyboard focus in a focused window now. */
  focused(): boolean;
  /** Whether the user made a copy gesture in the view within {@link COPY_GESTURE_MS}. */
  copying(): boolean;
};

/** A running clipboard sync: stop it, and tell it of the view's focus and copy gestures. */
export type RdpClipboardSync = {
  stop(): void;
  /** The view got the focus: the local clipboard is offered now. */
  viewFocused(): void;
  /** The user made a copy gesture in the view: the guest's held copy, if any, is taken. */
  copyGesture(): void;
};

/**
 * Keeps the local clipboard and an RDP session's in step, text only, and only when the user
 * means it (what the guest or an earlier holder left running there must not read or write
 * this computer's clipboard behind the user's back):
 * - what is copied locally is announced to the guest only while the view has the focus
 *   (`gate.focused`): at once when it gets it, then within {@link CLIPBOARD_POLL_MS};
 * - what the guest copies is put on the local clipboard only after a copy gesture in the view
 *   (`gate.copying`, within {@link COPY_GESTURE_MS}); otherwise it is held until the next one
 *   ({@link RdpClipboardSync.copyGesture}).
 *
 * Text that came from one side is not sent back to it. Steps run one at a time.
 */
export function syncRdpClipboard(
  peer: RdpClipboardPeer,
  clipboard: TextClipboard,
  gate: ClipboardGate,
): RdpClipboardSync {
  let stopped = false;
  /** The text both sides have: the last sent or received. */
  let known: string | null = null;
  /** The guest copied text that has not been taken yet. */
  let held = false;
  let queue = Promise.resolve();
  const step = (work: () => Promise<void>) => {
    queue = queue.then(() => (stopped ? undefined : work())).catch(() => undefined);
  };
  const offerLocal = () => {
    if (!gate.focused()) return;
    step(async () => {
      const text = await clipboard.readText();
      if (text === "" || text === known) return;
      known = text;
      await peer.sendClipboardData();
    });
  };
  const takeRemote = () => {
    held = false;
    step(async () => {
      await peer.saveRemoteClipboardData();
      known = await clipboard.readText();
    });
  };
  peer.onClipboardRemoteUpdateCallback(() => {
    if (gate.copying()) takeRemote();
    else held = true;
  });
  offerLocal();
  const timer = setInterval(offerLocal, CLIPBOARD_POLL_MS);
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
    },
    viewFocused: offerLocal,
    copyGesture() {
      if (held) takeRemote();
    },
  };
}

/** Whether `event` is a copy gesture: Ctrl+C, Ctrl+Shift+C or Ctrl+Insert. */
export function isCopyGesture(event: Pick<KeyboardEvent, "ctrlKey" | "key">): boolean {
  return event.ctrlKey && (event.key === "c" || event.key === "C" || event.key === "Insert");
}
