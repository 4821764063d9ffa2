import type {
  ClusterInfo,
  HistoryOf,
  Identity,
  MemberView,
  Permissions,
  PoolsSnapshot,
} from "./bindings";
import { AssignDialog } from "./components/AssignDialog";
import { CapacityView } from "./components/CapacityView";
import { ConnectDialog } from "./components/ConnectDialog";
import { DeletePoolDialog } from "./components/DeletePoolDialog";
import { HistoryDialog } from "./components/HistoryDialog";
import { NewPoolDialog } from "./components/NewPoolDialog";
import { PoolSettingsDialog } from "./components/PoolSettingsDialog";
import { ReleaseDialog } from "./components/ReleaseDialog";
import { SessionsView } from "./components/SessionsView";
import { UsageDialog } from "./components/UsageDialog";
import { UsbView } from "./components/UsbView";
import { claimStepFor } from "./lib/claims";
import type { DialogKind } from "./lib/dialogs";
import { manageAllowed } from "./lib/policy";
import { dialogActionKey, type useClaimActions } from "./useClaimActions";
import type { RdpTarget } from "./components/RdpView";
import type { ConsoleTarget } from "./useConsole";
import type { useSessions } from "./useSessions";
import type { UsbState } from "./useUsb";

export type DialogsProps = {
  /** The dialog to show ([`shownDialog`]). */
  which: DialogKind;
  actions: ReturnType<typeof useClaimActions>;
  sessions: ReturnType<typeof useSessions>;
  usb: UsbState;
  /** The latest pools snapshot, if any arrived. */
  snapshot: PoolsSnapshot | null;
  /** The connection on screen; null while none is (or the kubeconfig cannot be read). */
  cluster: ClusterInfo | null;
  /** Whether the backend answers and a connection is on screen. */
  connected: boolean;
  identity: Identity | null;
  username: string | null;
  /** The member whose Connect dialog is open. */
  connectMember: MemberView | null;
  onOpenConsole: (target: ConsoleTarget) => void;
  /** Opens RDP in the app for a member (from the connect dialog). */
  onOpenRdp: (target: RdpTarget) => void;
  onCloseConnect: () => void;
  onCloseSessions: () => void;
  onCloseUsb: () => void;
  onCloseCapacity: () => void;
  /** What you may do in a namespace; null until known. */
  permissionsFor: (namespace: string) => Permissions | null;
  /** Whether the cluster has a broker (it does the cluster's half of claims; pools are managed). */
  brokered: boolean;
};

/** The dialog `which` names, with what it needs from the window's state. */
export function Dialogs(props: DialogsProps) {
  const { actions, sessions, snapshot, username } = props;
  switch (props.which) {
    case "claim": {
      const openDialog = actions.dialog;
      if (openDialog === null) return null;
      const busy = actions.running.has(dialogActionKey(openDialog.spec));
      const spec = openDialog.spec;
      switch (spec.kind) {
        case "assign":
          return (
            <AssignDialog
              key={dialogActionKey(spec)}
              namespace={spec.namespace}
              pool={spec.pool}
              busy={busy}
              step={claimStepFor(actions.claimProgress, spec.namespace, spec.pool)}
              error={openDialog.error}
              onSubmit={(user) => {
                actions.assign(spec.namespace, spec.pool, user);
              }}
              onClose={actions.closeDialog}
            />
          );
        case "release":
          return (
            <ReleaseDialog
              key={dialogActionKey(spec)}
              member={spec.member}
              holder={spec.holder}
              username={username}
              force={spec.force}
              onRelease={memberOf(snapshot, spec.namespace, spec.member)?.onRelease ?? null}
              busy={busy}
              error={openDialog.error}
              onConfirm={() => {
                actions.release(spec.namespace, spec.member, spec.force);
              }}
              onClose={actions.closeDialog}
            />
          );
        case "newPool":
          return (
            <NewPoolDialog
              key={dialogActionKey(spec)}
              namespace={spec.namespace}
              pools={snapshot?.pools ?? []}
              managed={props.brokered}
              onClose={actions.closeDialog}
            />
          );
        case "deletePool":
          return (
            <DeletePoolDialog
              key={dialogActionKey(spec)}
              namespace={spec.namespace}
              pool={spec.pool}
              view={poolView(snapshot, spec.namespace, spec.pool)}
              busy={busy}
              error={openDialog.error}
              onSubmit={(force) => {
                actions.deletePool(spec.namespace, spec.pool, force);
              }}
              onClose={actions.closeDialog}
            />
          );
        case "poolSettings":
          return (
            <PoolSettingsDialog
              key={dialogActionKey(spec)}
              namespace={spec.namespace}
              pool={spec.pool}
              view={poolView(snapshot, spec.namespace, spec.pool)}
              manage={manageAllowed(props.permissionsFor(spec.namespace))}
              onClose={(done) => {
                actions.closeDialog();
                if (done !== undefined) actions.announce(done);
              }}
            />
          );
        case "history":
          return (
            <HistoryDialog
              key={dialogActionKey(spec)}
              namespace={spec.namespace}
              of={spec.of}
              revision={historyRevision(snapshot, spec.namespace, spec.of)}
              onClose={actions.closeDialog}
            />
          );
        case "usage":
          return (
            <UsageDialog
              key={dialogActionKey(spec)}
              pool={spec.pool}
              view={poolView(snapshot, spec.namespace, spec.pool)}
              onClose={actions.closeDialog}
            />
          );
      }
      break;
    }
    case "connect": {
      const member = props.connectMember;
      if (member === null) return null;
      return (
        <ConnectDialog
          key={`${member.namespace}/${member.name}`}
          member={member}
          username={username}
          onOpenConsole={props.onOpenConsole}
          onOpenRdp={props.onOpenRdp}
          onClose={props.onCloseConnect}
        />
      );
    }
    case "sessions":
      return (
        <SessionsView
          sessions={sessions.sessions}
          stopping={sessions.stopping}
          clearing={sessions.clearing}
          error={sessions.error}
          onStop={sessions.stop}
          onClearEnded={sessions.clearEnded}
          onDismissError={sessions.dismissError}
          onClose={props.onCloseSessions}
        />
      );
    case "usb": {
      // Desktops come from the pools on screen, and only while connected.
      const shown = props.connected ? snapshot : null;
      return (
        <UsbView
          usb={props.usb}
          sessions={sessions.sessions}
          pools={shown === null ? null : shown.pools}
          identity={props.identity}
          scope={shown === null ? null : shown.scope}
          onClose={props.onCloseUsb}
        />
      );
    }
    case "capacity":
      if (props.cluster === null) return null;
      return <CapacityView cluster={props.cluster} onClose={props.onCloseCapacity} />;
  }
  return null;
}

/** Pool `pool` of `namespace` as the live view shows it now; null when it is not there. */
function poolView(snapshot: PoolsSnapshot | null, namespace: string, pool: string) {
  return snapshot?.pools.find((p) => p.namespace === namespace && p.name === pool) ?? null;
}

/** `member` of `namespace` as the live view shows it, or null. */
function memberOf(
  snapshot: PoolsSnapshot | null,
  namespace: string,
  member: string,
): MemberView | null {
  for (const pool of snapshot?.pools ?? []) {
    if (pool.namespace !== namespace) continue;
    const found = pool.members.find((m) => m.name === member);
    if (found !== undefined) return found;
  }
  return null;
}

/** What of `member` the live view shows that a new act changes (its state and holder). */
/** What changes when the history of `of` may have: its member's state and holder, or every
 * member's of its pool and their number. */
function historyRevision(snapshot: PoolsSnapshot | null, namespace: string, of: HistoryOf): string {
  const revision = (m: MemberView) => `${m.name}:${m.state}:${m.holder ?? ""}`;
  if (of.kind === "member") {
    const found = memberOf(snapshot, namespace, of.name);
    return found === null ? "" : revision(found);
  }
  const pool = poolView(snapshot, namespace, of.name);
  return pool === null ? "" : pool.members.map(revision).join(" ");
}
