/**
 * The only module that talks to the Rust side, through the typed commands and events generated
 * from it (./bindings, written by src-tauri's `export_bindings`: a renamed command fails the
 * typecheck). Commands never reject to callers: each resolves to a Result whose error is an
 * ErrorView, whatever shape the rejection had.
 */
import { Channel, isTauri } from "@tauri-apps/api/core";
import type { UnlistenFn } from "@tauri-apps/api/event";
import {
  commands,
  events,
  type AppInfo,
  type BrokerBadge,
  type CapacityPlan,
  type CapacitySnapshot,
  type ClaimProgress,
  type Claimed,
  type ClusterInfo,
  type ConsoleEndpoint,
  type Contexts,
  type CreateProgress,
  type CredentialState,
  type ErrorView,
  type GoldenCandidate,
  type Kept,
  type KubeconfigChanged,
  type History,
  type HistoryOf,
  type MemberPaths,
  type NewPool,
  type NewPoolCheck,
  type NamespaceEntitlements,
  type Permissions,
  type PoolCreated,
  type PoolEntitlements,
  type PoolDeleted,
  type PolicyCheck,
  type PoolPolicy,
  type PoolSettings,
  type PoolsUpdate,
  type RdpFileSaved,
  type RdpLogin,
  type RdpOpened,
  type Released,
  type Scope,
  type SessionView,
  type SshOpened,
  type UsbList,
  type WhoInput,
} from "./bindings";
import { toErrorView } from "./lib/errors";

export type Result<T> = { ok: true; value: T } | { ok: false; error: ErrorView };

/** Runs one generated command (ui/src/bindings), turning its rejection into an ErrorView. */
async function call<T>(command: () => Promise<T>): Promise<Result<T>> {
  try {
    const value = await command();
    return { ok: true, value };
  } catch (reason: unknown) {
    return { ok: false, error: toErrorView(reason) };
  }
}

/** Whether the page runs in the app's window (else, e.g. a browser on the Vite dev server,
 * no command can reach the backend). */
export function backendAvailable(): boolean {
  return isTauri();
}

/** Version, log file and kubeconfig paths of the running app. */
export function appInfo(): Promise<Result<AppInfo>> {
  return call(() => commands.appInfo());
}

/** The kubeconfig's contexts and its current-context. */
export function listContexts(): Promise<Result<Contexts>> {
  return call(() => commands.listContexts());
}

/** Where a cluster connection streams to, each handler called in the order the backend sent. */
export type ClusterStreams = {
  /** The live pools view: a full list now, then the pools that changed (`applyPoolsUpdate`). */
  pools: (update: PoolsUpdate) => void;
  /** Where the connection's credentials stand, now and on every change (an exec plugin's
   * credentials renewed, or the plugin failing). */
  credentials: (state: CredentialState) => void;
};

/**
 * Connects to a kubeconfig context (null: current-context) and (re)starts the live feed for
 * the scope (null: the context's start namespace, `ContextInfo.startNamespace`), replacing any
 * previous connection, whose streams then fall silent. The streams are Tauri channels of this
 * connection alone, and may speak before the call resolves.
 */
export function connectCluster(
  context: string | null,
  scope: Scope | null,
  streams: ClusterStreams,
): Promise<Result<ClusterInfo>> {
  const pools = new Channel<PoolsUpdate>(streams.pools);
  const credentials = new Channel<CredentialState>(streams.credentials);
  return call(() => commands.connectCluster(context, scope, pools, credentials));
}

/**
 * The connected cluster's broker as the header shows it: the badge beside the guard's, its
 * detail and, without a broker, the notice of what that means (the core's words, the CLI's
 * too). Each later change arrives through onBrokerStatus.
 */
export function brokerStatus(): Promise<Result<BrokerBadge>> {
  return call(() => commands.brokerStatus());
}

/**
 * An administrator hands a free member of `pool` to `user` (the user's identity as the cluster
 * knows it, e.g. "alice" or "alice@example.com").
 */
export function assignMember(
  namespace: string,
  pool: string,
  user: string,
): Promise<Result<Claimed>> {
  return call(() => commands.assignMember(namespace, pool, user));
}

/** "Get a desktop": claims a member of `pool` for the identity the cluster reports. */
export function claimDesktop(namespace: string, pool: string): Promise<Result<Claimed>> {
  return call(() => commands.claimDesktop(namespace, pool));
}

/**
 * Releases `member` as the current identity, stopping its VM. Refused when someone else holds
 * its active Lease, unless `force` (an administrator's "Force release", recorded as an Event).
 */
export function unassignMember(
  namespace: string,
  member: string,
  force: boolean,
): Promise<Result<Released>> {
  return call(() => commands.unassignMember(namespace, member, force));
}

/** What the current identity may do in `namespace`, as the cluster (and its guard) says. */
export function permissions(namespace: string): Promise<Result<Permissions>> {
  return call(() => commands.permissions(namespace));
}

/** The VMs of `namespace` that are not pool members, with their power and clone problems. */
export function goldenCandidates(namespace: string): Promise<Result<GoldenCandidate[]>> {
  return call(() => commands.goldenCandidates(namespace));
}

/**
 * Checks a "New pool" request locally (the CLI's rules, no cluster call): resolves to the member
 * names it would create and every problem, each with its field.
 */
export function validateNewPool(request: NewPool): Promise<Result<NewPoolCheck>> {
  return call(() => commands.validateNewPool(request));
}

/**
 * Creates a pool by cloning its golden VM; reports each step as a `pool-create-progress` event
 * (see onCreateProgress) while it runs. A partly failed create says which members exist.
 */
export function createPool(request: NewPool): Promise<Result<PoolCreated>> {
  return call(() => commands.createPool(request));
}

/**
 * Deletes a pool: its members, their Leases and leftover clone objects. Refused while members
 * are assigned, unless `force`.
 */
export function deletePool(
  namespace: string,
  name: string,
  force: boolean,
): Promise<Result<PoolDeleted>> {
  return call(() => commands.deletePool(namespace, name, force));
}

/** `pool`'s policy: its settings, or none when it is unmanaged (no DesktopPool). */
export function poolPolicy(namespace: string, pool: string): Promise<Result<PoolPolicy>> {
  return call(() => commands.poolPolicy(namespace, pool));
}

/**
 * Judges the settings dialog's values without writing: the first value the rules refuse (the
 * broker's, read in the backend), and the members a smaller size would remove.
 */
export function checkPoolSettings(
  namespace: string,
  pool: string,
  golden: string,
  settings: PoolSettings,
): Promise<Result<PolicyCheck>> {
  return call(() => commands.checkPoolSettings(namespace, pool, golden, settings));
}

/** Writes the settings dialog's values to `pool`'s DesktopPool (resize, then the rest). */
export function savePoolSettings(
  namespace: string,
  pool: string,
  settings: PoolSettings,
): Promise<Result<PoolPolicy>> {
  return call(() => commands.savePoolSettings(namespace, pool, settings));
}

/** Makes the unmanaged `pool` managed: a DesktopPool of its current size and defaults. */
export function adoptPool(namespace: string, pool: string): Promise<Result<PoolPolicy>> {
  return call(() => commands.adoptPool(namespace, pool));
}

/**
 * Keep on a reclaim notice: renews your claim of `member` and records the time, postponing a
 * disconnect or idle reclaim (never past the pool's maxSession).
 */
export function keepDesktop(namespace: string, member: string): Promise<Result<Kept>> {
  return call(() => commands.keepDesktop(namespace, member));
}

/**
 * Which pools of `namespaces` you may claim from (RBAC's `claim` on `desktoppools`, your groups
 * included); a namespace RBAC cannot answer for counts as every pool.
 */
export function entitledPools(namespaces: string[]): Promise<Result<NamespaceEntitlements[]>> {
  return call(() => commands.entitledPools(namespaces));
}

/** Who may claim from `pool` (every RBAC grant of the right, by reach), for its settings. */
export function poolEntitlements(
  namespace: string,
  pool: string,
): Promise<Result<PoolEntitlements>> {
  return call(() => commands.poolEntitlements(namespace, pool));
}

/**
 * Entitles `who` to claim from `pool`, or (`remove`) takes back the grant this product wrote for
 * them; the sentences say what was done.
 */
export function entitlePool(
  namespace: string,
  pool: string,
  who: WhoInput,
  remove: boolean,
): Promise<Result<string[]>> {
  return call(() => commands.entitlePool(namespace, pool, who, remove));
}

/**
 * A member's or a pool's history (its audit Events, oldest first) and the sentence on how long
 * it lasts.
 */
export function history(namespace: string, of: HistoryOf): Promise<Result<History>> {
  return call(() => commands.history(namespace, of));
}

/**
 * Which paths reach `member` (VNC, RDP, SSH, in that order), each available or with the reason
 * it is not (not running, paused, no permission for the subresource, port closed).
 */
export function memberPaths(namespace: string, member: string): Promise<Result<MemberPaths>> {
  return call(() => commands.memberPaths(namespace, member));
}

/**
 * Opens `member`'s console for the in-app viewer: resolves to a websocket on 127.0.0.1 (with a
 * per-session secret path) that relays the VMI's raw RFB bytes, for noVNC. Each call starts a
 * new session. Without `takeOver`, someone else viewing the console fails it with kind "busy";
 * with `takeOver`, the other viewer is disconnected.
 */
export function openConsole(
  namespace: string,
  member: string,
  takeOver: boolean,
): Promise<Result<ConsoleEndpoint>> {
  return call(() => commands.openConsole(namespace, member, takeOver));
}

/**
 * Starts RDP in the app for `member`: the backend asks the guest's RDP server for TLS and NLA
 * through a forward to port 3389, then listens on 127.0.0.1 for IronRDP's web client (a proxy
 * session taking one connection, with a one-time token). Resolves to the endpoint, whether the
 * guest wants a login (NLA), and whether its certificate is known, new or changed.
 */
export function openRdpInApp(namespace: string, member: string): Promise<Result<RdpOpened>> {
  return call(() => commands.openRdpInApp(namespace, member));
}

/**
 * Records that the user accepted `fingerprint` as `member`'s RDP certificate, on its
 * VirtualMachine `vmUid` (the session's): a member made again is asked about again.
 */
export function acceptRdpCertificate(
  namespace: string,
  member: string,
  vmUid: string | null,
  fingerprint: string,
): Promise<Result<null>> {
  return call(() => commands.acceptRdpCertificate(namespace, member, vmUid, fingerprint));
}

/** The login remembered in the OS keyring for `member`, or null. */
export function savedRdpLogin(namespace: string, member: string): Promise<Result<RdpLogin | null>> {
  return call(() => commands.savedRdpLogin(namespace, member));
}

/** Remembers `login` for `member` in the OS keyring (fails when there is none). */
export function rememberRdpLogin(
  namespace: string,
  member: string,
  login: RdpLogin,
): Promise<Result<null>> {
  return call(() => commands.rememberRdpLogin(namespace, member, login));
}

/** Forgets the login remembered for `member`. */
export function forgetRdpLogin(namespace: string, member: string): Promise<Result<null>> {
  return call(() => commands.forgetRdpLogin(namespace, member));
}

/** The text on the OS clipboard (null: none), read by the backend. */
export function clipboardText(): Promise<Result<string | null>> {
  return call(() => commands.clipboardText());
}

/** Puts `text` on the OS clipboard, through the backend. */
export function setClipboardText(text: string): Promise<Result<null>> {
  return call(() => commands.setClipboardText(text));
}

/**
 * Opens `member`'s console in the platform's viewer (remote-viewer, else TigerVNC) through a
 * forward on 127.0.0.1. Someone else viewing fails it with kind "busy" unless `takeOver`.
 */
export function openViewer(
  namespace: string,
  member: string,
  takeOver: boolean,
): Promise<Result<SessionView>> {
  return call(() => commands.openViewer(namespace, member, takeOver));
}

/**
 * Opens RDP to `member` with FreeRDP through a forward to the guest's port 3389. A missing
 * client fails with a suggestion naming the packages that provide it.
 */
export function openRdp(namespace: string, member: string): Promise<Result<SessionView>> {
  return call(() => commands.openRdp(namespace, member));
}

/**
 * Starts a forward to `member`'s port 3389 and writes an `.rdp` file pointing at it (into the
 * downloads folder), for another RDP client. The forward lasts until its session is stopped.
 */
export function saveRdpFile(namespace: string, member: string): Promise<Result<RdpFileSaved>> {
  return call(() => commands.saveRdpFile(namespace, member));
}

/**
 * Checks `login` as a login on a desktop's guest for SSH (the core's rule, the one Open SSH and
 * the CLI's ssh apply); resolves when it is accepted, or to the refusal naming the value and
 * the fix. Contacts nothing.
 */
export function validateGuestLogin(login: string): Promise<Result<null>> {
  return call(() => commands.validateGuestLogin(login));
}

/**
 * Starts a forward to `member`'s port 22 for `user`; resolves to the `ssh` command line to copy
 * and whether a terminal was found and started with it.
 */
export function openSsh(
  namespace: string,
  member: string,
  user: string,
): Promise<Result<SshOpened>> {
  return call(() => commands.openSsh(namespace, member, user));
}

/** Every session (console, viewers, forwards, helpers), oldest first. */
export function listSessions(): Promise<Result<SessionView[]>> {
  return call(() => commands.listSessions());
}

/** Stops session `id` (its streams, listener and helper); resolves to whether it was running. */
export function stopSession(id: number): Promise<Result<boolean>> {
  return call(() => commands.stopSession(id));
}

/** Removes the ended sessions from the list. */
export function clearEndedSessions(): Promise<Result<void>> {
  return call(() => commands.clearEndedSessions());
}

/**
 * The USB devices plugged into this machine now, each with its marks (smartcard, security key)
 * and whether this user may open it; `problem` says why the list is empty when it is not simply
 * "nothing plugged in". Later changes come as `usb-devices` events (see onUsbDevices).
 */
export function usbDevices(): Promise<Result<UsbList>> {
  return call(() => commands.usbDevices());
}

/**
 * Redirects the local USB `device` (its id "vvvv:pppp", or its bus-address "B-A") into `member`,
 * which must be a running desktop assigned to the identity the cluster reports. Resolves to the
 * new session (kind "usb"), which lasts until it is stopped (Detach), the device is unplugged or
 * the desktop stops. Refusals (someone else's desktop, not running, no clientPassthrough, device
 * missing or not writable, usbredirect missing) name the object and the fix.
 */
export function usbRedirect(
  namespace: string,
  member: string,
  device: string,
): Promise<Result<SessionView>> {
  return call(() => commands.usbRedirect(namespace, member, device));
}

/** Runs `listen`, turning its failure into an ErrorView. */
async function subscribe(start: () => Promise<UnlistenFn>): Promise<Result<UnlistenFn>> {
  try {
    return { ok: true, value: await start() };
  } catch (reason: unknown) {
    return { ok: false, error: toErrorView(reason) };
  }
}

/** Subscribes to changes of the kubeconfig files (written, replaced, removed); resolves to the
 * function that unsubscribes. */
export function onKubeconfigChanged(
  handler: (change: KubeconfigChanged) => void,
): Promise<Result<UnlistenFn>> {
  return subscribe(() =>
    events.kubeconfigChanged.listen((event) => {
      handler(event.payload);
    }),
  );
}

/** Subscribes to changes of the connected cluster's broker (its leader, its replicas, whether
 * it runs); resolves to the function that unsubscribes. */
export function onBrokerStatus(handler: (badge: BrokerBadge) => void): Promise<Result<UnlistenFn>> {
  return subscribe(() =>
    events.brokerStatus.listen((event) => {
      handler(event.payload);
    }),
  );
}

/** Subscribes to the steps of claims the cluster's broker finishes (Get a desktop, Assign…
 * waiting for its grant); resolves to the function that unsubscribes. */
export function onClaimProgress(
  handler: (progress: ClaimProgress) => void,
): Promise<Result<UnlistenFn>> {
  return subscribe(() =>
    events.claimProgress.listen((event) => {
      handler(event.payload);
    }),
  );
}

/** Subscribes to the progress of pool creates; resolves to the function that unsubscribes. */
export function onCreateProgress(
  handler: (progress: CreateProgress) => void,
): Promise<Result<UnlistenFn>> {
  return subscribe(() =>
    events.poolCreateProgress.listen((event) => {
      handler(event.payload);
    }),
  );
}

/**
 * Subscribes to the session list: the handler gets the whole list on every change (a session
 * started, ended, counted bytes, …). Resolves to the function that unsubscribes.
 */
export function onSessionsChanged(
  handler: (sessions: SessionView[]) => void,
): Promise<Result<UnlistenFn>> {
  return subscribe(() =>
    events.sessionsChanged.listen((event) => {
      handler(event.payload);
    }),
  );
}

/**
 * Subscribes to the local USB devices: the handler gets the whole list on every plug and unplug.
 * Resolves to the function that unsubscribes.
 */
export function onUsbDevices(handler: (list: UsbList) => void): Promise<Result<UnlistenFn>> {
  return subscribe(() =>
    events.usbDevices.listen((event) => {
      handler(event.payload);
    }),
  );
}

/**
 * Whether a pool of `size` cloned from `golden` in `namespace` fits the cluster's GPUs and host
 * devices now, node by node. Creates nothing; a golden VM without devices is admitted at once.
 */
export function capacityPreview(
  namespace: string,
  golden: string,
  size: number,
): Promise<Result<CapacityPlan>> {
  return call(() => commands.capacityPreview(namespace, golden, size));
}

/**
 * Starts the live Capacity view on the connected cluster: a `capacity-snapshot` event now
 * and on every change, until unwatchCapacity.
 */
export function watchCapacity(): Promise<Result<null>> {
  return call(() => commands.watchCapacity());
}

/** Stops the live Capacity view's watches. */
export function unwatchCapacity(): Promise<Result<null>> {
  return call(() => commands.unwatchCapacity());
}

/** Subscribes to the live Capacity view. Resolves to the function that unsubscribes. */
export function onCapacitySnapshot(
  handler: (snapshot: CapacitySnapshot) => void,
): Promise<Result<UnlistenFn>> {
  return subscribe(() =>
    events.capacitySnapshot.listen((event) => {
      handler(event.payload);
    }),
  );
}
