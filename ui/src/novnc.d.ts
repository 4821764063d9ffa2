/**
 * Types for the parts of noVNC (`@novnc/novnc` 1.7, which ships none) that the console uses,
 * after its docs/API.md. The package exports one module, core/rfb.js, whose default export is
 * the RFB client.
 */
declare module "@novnc/novnc" {
  export type RfbOptions = {
    /** Ask the server to keep other clients connected (the default). */
    shared?: boolean;
    credentials?: { username?: string; password?: string; target?: string };
    repeaterID?: string;
    /** WebSocket subprotocols to offer; none by default. */
    wsProtocols?: string[];
  };

  export type RfbEventMap = {
    connect: CustomEvent<Record<string, never>>;
    disconnect: CustomEvent<{ clean: boolean }>;
    credentialsrequired: CustomEvent<{ types: string[] }>;
    securityfailure: CustomEvent<{ status: number; reason?: string }>;
    desktopname: CustomEvent<{ name: string }>;
    clipboard: CustomEvent<{ text: string }>;
    bell: CustomEvent<Record<string, never>>;
    capabilities: CustomEvent<{ capabilities: { power: boolean } }>;
    clippingviewport: CustomEvent<boolean>;
  };

  /** One connection to a VNC server over a WebSocket carrying the RFB stream. */
  export default class RFB {
    /** Attaches to `target` (adding its own elements) and starts connecting at once. */
    constructor(target: HTMLElement, urlOrChannel: string | WebSocket, options?: RfbOptions);

    background: string;
    readonly capabilities: { power: boolean };
    readonly clippingViewport: boolean;
    clipViewport: boolean;
    compressionLevel: number;
    dragViewport: boolean;
    focusOnClick: boolean;
    qualityLevel: number;
    resizeSession: boolean;
    /** Scale the remote screen locally to fit its container. */
    scaleViewport: boolean;
    showDotCursor: boolean;
    viewOnly: boolean;

    addEventListener<K extends keyof RfbEventMap>(
      type: K,
      listener: (event: RfbEventMap[K]) => void,
    ): void;
    removeEventListener<K extends keyof RfbEventMap>(
      type: K,
      listener: (event: RfbEventMap[K]) => void,
    ): void;

    approveServer(): void;
    blur(): void;
    clipboardPasteFrom(text: string): void;
    disconnect(): void;
    focus(options?: FocusOptions): void;
    machineReboot(): void;
    machineReset(): void;
    machineShutdown(): void;
    sendCredentials(credentials: { username?: string; password?: string; target?: string }): void;
    sendCtrlAltDel(): void;
    /**
     * A key event: `keysym` (X11), `code` the physical key (KeyboardEvent.code) or null; both
     * press and release unless `down` says which.
     */
    sendKey(keysym: number, code: string | null, down?: boolean): void;
    toDataURL(type?: string, encoderOptions?: number): string;
  }
}
