import { memo } from "react";
import type { Allowed, MemberView, Permissions } from "../bindings";
import { releaseButton } from "../lib/claims";
import { ROW_HEIGHT, memberRowHeight } from "../lib/poolRows";
import { ClaimedAtCell, HolderCell, LeaseCell, PowerBadge, StateBadge } from "./MemberCells";
import { Working } from "./Working";

type MemberRowProps = {
  member: MemberView;
  /** Where the row starts in its table's body (pixels); its height is `memberRowHeight`. */
  top: number;
  /** Its `aria-rowindex` in the whole table (the column header is 1). */
  rowIndex: number;
  /** The pool's last member (no line below it: the pool's border is there). */
  last: boolean;
  clockOffsetMs: number;
  /** Opens the release confirmation for this member (`force`: someone else's active claim). */
  onUnassign: (member: MemberView, force: boolean) => void;
  /** Opens the Connect dialog for this member. */
  onConnect: (member: MemberView) => void;
  /** Opens this member's history. */
  onHistory: (member: MemberView) => void;
  /** A release of this member is running. */
  releasing: boolean;
  /** What you may do in the member's namespace; null until known. */
  permissions: Permissions | null;
};

/** A member's row, memoized: scrolling mounts and unmounts rows, it does not re-render them. */
export const MemberRow = memo(function MemberRow({
  member,
  top,
  rowIndex,
  last,
  clockOffsetMs,
  onUnassign,
  onConnect,
  onHistory,
  releasing,
  permissions,
}: MemberRowProps) {
  const offer = releaseButton(member, permissions);
  const tall = memberRowHeight(member) > ROW_HEIGHT.member;
  return (
    <div
      role="row"
      aria-rowindex={rowIndex}
      className={`member-row${tall ? " member-row-tall" : ""}${last ? " member-row-last" : ""}`}
      style={{ top }}
      data-testid={`member-${member.name}`}
    >
      <div role="rowheader" className="cell-member">
        <MemberName member={member} onHistory={onHistory} history={permissions?.history ?? null} />
      </div>
      <div role="cell">
        <StateBadge member={member} />
      </div>
      <div role="cell" className="cell-holder">
        <HolderCell member={member} />
      </div>
      <div role="cell">
        <ClaimedAtCell claimedAt={member.claimedAt} clockOffsetMs={clockOffsetMs} />
      </div>
      <div role="cell">
        <LeaseCell
          lease={member.lease}
          removing={member.state === "removing"}
          clockOffsetMs={clockOffsetMs}
        />
      </div>
      <div role="cell">
        <PowerBadge power={member.power} />
      </div>
      <div role="cell" className="cell-actions">
        <ConnectButton member={member} onConnect={onConnect} />
        {offer.kind === "none" ? null : (
          <button
            type="button"
            className={offer.kind === "force" ? "btn btn-small btn-quiet-danger" : "btn btn-small"}
            data-testid={`unassign-${member.name}`}
            disabled={releasing || !offer.enabled}
            aria-busy={releasing || undefined}
            aria-label={
              releasing
                ? undefined
                : offer.kind === "force"
                  ? `Force release ${member.name}`
                  : `Release ${member.name}`
            }
            title={
              offer.reason ??
              (offer.kind === "force"
                ? `Take ${member.name} back from ${member.holder ?? "its holder"} now: ${member.onRelease.words}`
                : `Release ${member.name} from ${member.holder ?? "its holder"}: ${member.onRelease.words}`)
            }
            data-reason={offer.reason ?? undefined}
            onClick={() => {
              onUnassign(member, offer.kind === "force");
            }}
          >
            {releasing ? <Working /> : offer.kind === "force" ? "Force release…" : "Release…"}
          </button>
        )}
      </div>
    </div>
  );
});

/**
 * "Connect…" as the backend offers it to you (`member.offers.connect`): nothing on a member
 * that does not run; disabled, with the reason, where you may not connect (with a broker, on
 * someone else's desktop); else it opens the Connect dialog.
 */
export function ConnectButton({
  member,
  onConnect,
}: {
  member: MemberView;
  onConnect: (member: MemberView) => void;
}) {
  const offer = member.offers?.connect ?? null;
  if (offer === null) return null;
  return (
    <button
      type="button"
      className="btn btn-small"
      data-testid={`connect-${member.name}`}
      aria-label={`Connect to ${member.name}…`}
      title={offer.reason ?? `Open ${member.name}'s console, RDP or SSH`}
      data-reason={offer.reason ?? undefined}
      disabled={!offer.allowed}
      onClick={() => {
        onConnect(member);
      }}
    >
      Connect…
    </button>
  );
}

/**
 * A member's name, which opens its history (claims, releases, reclaims: its audit Events); plain
 * text, with the reason on hover, for someone who may not read the history there.
 */
export function MemberName({
  member,
  onHistory,
  history,
}: {
  member: MemberView;
  onHistory: (member: MemberView) => void;
  /** Whether you may read the history in the member's namespace; null until known. */
  history: Allowed | null;
}) {
  if (history !== null && !history.allowed) {
    return (
      <span className="mono member-name" title={history.reason ?? undefined}>
        {member.name}
      </span>
    );
  }
  return (
    <button
      type="button"
      className="link-button mono member-name"
      data-testid={`history-${member.name}`}
      aria-label={`History of ${member.name}`}
      title={`${member.namespace}/${member.name}: show its history`}
      onClick={() => {
        onHistory(member);
      }}
    >
      {member.name}
    </button>
  );
}
