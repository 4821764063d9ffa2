/**
 * The document RDP in the app runs in: a frame of the RDP view (`rdp-frame.html`). IronRDP's web
 * component and its WebAssembly (a 6 MB module, and the session's memory, which a WebAssembly
 * memory never gives back while its page lives) belong to this frame's realm, so that closing
 * the view, which removes the frame, lets WebKit free them. The view takes the started module
 * from `window.corralIron` and puts the web component into this document.
 */
import "./rdpFrame.css";
import "@devolutions/iron-remote-desktop";
import * as rdp from "@devolutions/iron-remote-desktop-rdp";

/** What the frame offers the view: the RDP module, its WebAssembly started. */
export type IronModule = typeof rdp;

declare global {
  interface Window {
    /** In the RDP frame: the RDP module, once its WebAssembly has started. */
    corralIron?: Promise<IronModule>;
  }
}

window.corralIron = rdp.init("WARN").then(() => rdp);
