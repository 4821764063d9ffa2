import type { MemberView } from "../bindings/MemberView";
import { canUnassign } from "../lib/claims";
import { ClaimedAtCell, LeaseCell, Missing, PowerBadge, StateBadge } from "./MemberCells";
import { Working } from "./Working";

type MemberRowProps = {
  member: MemberView;
  clockOffsetMs: number;
  /** Opens the release confirmation for this member. */
  onUnassign: (member: MemberView) => void;
  /** A release of this member is running. */
  releasing: boolean;
  /** Why releasing is impossible right now (identity unknown), or null. */
  releaseBlocker: string | null;
};

export function MemberRow({
  member,
  clockOffsetMs,
  onUnassign,
  releasing,
  releaseBlocker,
}: MemberRowProps) {
  return (
    <tr data-testid={`member-${member.name}`}>
      <th scope="row" className="cell-member">
        <span className="mono" title={`${member.namespace}/${member.name}`}>
          {member.name}
        </span>
      </th>
      <td>
        <StateBadge member={member} />
      </td>
      <td className="cell-holder">
        {member.holder ? (
          <span className="mono truncate" title={member.holder}>
            {member.holder}
          </span>
        ) : (
          <Missing title="No holder" />
        )}
      </td>
      <td>
        <ClaimedAtCell claimedAt={member.claimedAt} />
      </td>
      <td>
        <LeaseCell lease={member.lease} clockOffsetMs={clockOffsetMs} />
      </td>
      <td>
        <PowerBadge power={member.power} />
      </td>
      <td className="cell-actions">
        {canUnassign(member) ? (
          <button
            type="button"
            className="btn btn-small"
            data-testid={`unassign-${member.name}`}
            disabled={releasing || releaseBlocker !== null}
            aria-busy={releasing || undefined}
            aria-label={releasing ? undefined : `Unassign ${member.name}`}
            title={
              releaseBlocker ??
              `Release ${member.name} from ${member.holder ?? "its holder"} and stop its VM`
            }
            onClick={() => {
              onUnassign(member);
            }}
          >
            {releasing ? <Working /> : "Unassign"}
          </button>
        ) : null}
      </td>
    </tr>
  );
}
