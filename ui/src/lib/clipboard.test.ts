import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  CLIPBOARD_POLL_MS,
  backendClipboard,
  isCopyGesture,
  syncRdpClipboard,
  type RdpClipboardPeer,
  type TextClipboard,
} from "./clipboard";

const refusal = {
  kind: "config",
  message: "the OS clipboard is not available: no display",
  suggestion: "",
} as never;

describe("backendClipboard", () => {
  it("reads none as empty text and rejects with the backend's message", async () => {
    const empty = backendClipboard(
      () => Promise.resolve({ ok: true, value: null }),
      () => Promise.resolve({ ok: true, value: null }),
    );
    await expect(empty.readText()).resolves.toBe("");
    const refused = backendClipboard(
      () => Promise.resolve({ ok: false, error: refusal }),
      () => Promise.resolve({ ok: false, error: refusal }),
    );
    await expect(refused.readText()).rejects.toThrow("no display");
    await expect(refused.writeText("x")).rejects.toThrow("no display");
  });

  it("passes the text written on", async () => {
    const write = vi.fn(() => Promise.resolve({ ok: true as const, value: null }));
    await backendClipboard(() => Promise.resolve({ ok: true, value: "a" }), write).writeText(
      "copied",
    );
    expect(write).toHaveBeenCalledWith("copied");
  });
});

/** A local clipboard, and a guest whose clipboard the peer moves text to and from. */
function fixture() {
  const local = { text: "" };
  const guest = { text: "", sent: 0 };
  const clipboard: TextClipboard = {
    readText: () => Promise.resolve(local.text),
    writeText: (text) => {
      local.text = text;
      return Promise.resolve();
    },
  };
  let remoteUpdate: () => void = () => undefined;
  const peer: RdpClipboardPeer = {
    sendClipboardData: () => {
      guest.text = local.text;
      guest.sent += 1;
      return Promise.resolve();
    },
    saveRemoteClipboardData: () => {
      local.text = guest.text;
      return Promise.resolve();
    },
    onClipboardRemoteUpdateCallback: (callback) => {
      remoteUpdate = callback;
    },
  };
  const guestCopies = (text: string) => {
    guest.text = text;
    remoteUpdate();
  };
  return { local, guest, clipboard, peer, guestCopies };
}

/** A gate that says yes to both until told otherwise. */
function gate() {
  const g = { focused: true, copying: true };
  return { g, gate: { focused: () => g.focused, copying: () => g.copying } };
}

describe("syncRdpClipboard", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("gives the guest the local text at start and each new local copy once", async () => {
    const f = fixture();
    f.local.text = "before";
    const sync = syncRdpClipboard(f.peer, f.clipboard, gate().gate);
    await vi.advanceTimersByTimeAsync(0);
    expect(f.guest).toEqual({ text: "before", sent: 1 });
    await vi.advanceTimersByTimeAsync(CLIPBOARD_POLL_MS * 3);
    expect(f.guest.sent).toBe(1);
    f.local.text = "after";
    await vi.advanceTimersByTimeAsync(CLIPBOARD_POLL_MS);
    expect(f.guest).toEqual({ text: "after", sent: 2 });
    sync.stop();
  });

  it("offers the local text only while the view has the focus", async () => {
    const f = fixture();
    const { g, gate: asked } = gate();
    g.focused = false;
    f.local.text = "a password copied elsewhere";
    const sync = syncRdpClipboard(f.peer, f.clipboard, asked);
    await vi.advanceTimersByTimeAsync(CLIPBOARD_POLL_MS * 4);
    expect(f.guest.sent).toBe(0);
    g.focused = true;
    sync.viewFocused();
    await vi.advanceTimersByTimeAsync(0);
    expect(f.guest).toEqual({ text: "a password copied elsewhere", sent: 1 });
    sync.stop();
  });

  it("puts the guest's copy on the local clipboard after a copy gesture, not before", async () => {
    const f = fixture();
    const { g, gate: asked } = gate();
    g.copying = false;
    f.local.text = "mine";
    const sync = syncRdpClipboard(f.peer, f.clipboard, asked);
    await vi.advanceTimersByTimeAsync(0);
    f.guestCopies("from the guest");
    await vi.advanceTimersByTimeAsync(CLIPBOARD_POLL_MS * 3);
    expect(f.local.text).toBe("mine");
    sync.copyGesture();
    await vi.advanceTimersByTimeAsync(0);
    expect(f.local.text).toBe("from the guest");
    // Within a gesture's window a copy is taken at once, and not sent back.
    g.copying = true;
    f.guestCopies("again");
    await vi.advanceTimersByTimeAsync(CLIPBOARD_POLL_MS * 3);
    expect(f.local.text).toBe("again");
    expect(f.guest.sent).toBe(1);
    sync.stop();
  });

  it("does nothing after stop, and a failing step does not end the others", async () => {
    const f = fixture();
    let fail = true;
    const flaky: TextClipboard = {
      ...f.clipboard,
      readText: () => (fail ? Promise.reject(new Error("busy")) : Promise.resolve(f.local.text)),
    };
    f.local.text = "first";
    const sync = syncRdpClipboard(f.peer, flaky, gate().gate);
    await vi.advanceTimersByTimeAsync(0);
    expect(f.guest.sent).toBe(0);
    fail = false;
    await vi.advanceTimersByTimeAsync(CLIPBOARD_POLL_MS);
    expect(f.guest.text).toBe("first");
    sync.stop();
    f.local.text = "later";
    await vi.advanceTimersByTimeAsync(CLIPBOARD_POLL_MS * 2);
    expect(f.guest.text).toBe("first");
  });
});

describe("isCopyGesture", () => {
  it("is Ctrl+C, Ctrl+Shift+C or Ctrl+Insert", () => {
    expect(isCopyGesture({ ctrlKey: true, key: "c" })).toBe(true);
    expect(isCopyGesture({ ctrlKey: true, key: "C" })).toBe(true);
    expect(isCopyGesture({ ctrlKey: true, key: "Insert" })).toBe(true);
    expect(isCopyGesture({ ctrlKey: false, key: "c" })).toBe(false);
    expect(isCopyGesture({ ctrlKey: true, key: "v" })).toBe(false);
  });
});
