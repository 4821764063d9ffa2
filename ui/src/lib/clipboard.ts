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
 * Makes `clipboard` the page's `navigator.clipboard`. It offers text only, so IronRDP's web
 * component takes its text mode, in which the app decides when text moves
 * ({@link syncRdpClipboard}).
 */
export function installPageClipboard(clipboard: TextClipboard): void {
  Object.defineProperty(navigator, "clipboard", { value: clipboard, configurable: true });
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

/**
 * Keeps the local clipboard and an RDP session's in step, text only: what the guest copies is
 * put on the local clipboard at once; what is copied locally is announced to the guest within
 * {@link CLIPBOARD_POLL_MS} (and at once on start). Text that came from one side is not sent
 * back to it. Steps run one at a time. Returns the function that stops it.
 */
export function syncRdpClipboard(peer: RdpClipboardPeer, clipboard: TextClipboard): () => void {
  let stopped = false;
  /** The text both sides have: the last sent or received. */
  let known: string | null = null;
  let queue = Promise.resolve();
  const step = (work: () => Promise<void>) => {
    queue = queue.then(() => (stopped ? undefined : work())).catch(() => undefined);
  };
  const offerLocal = () => {
    step(async () => {
      const text = await clipboard.readText();
      if (text === "" || text === known) return;
      known = text;
      await peer.sendClipboardData();
    });
  };
  peer.onClipboardRemoteUpdateCallback(() => {
    step(async () => {
      await peer.saveRemoteClipboardData();
      known = await clipboard.readText();
    });
  });
  offerLocal();
  const timer = setInterval(offerLocal, CLIPBOARD_POLL_MS);
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
