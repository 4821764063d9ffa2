import type { LeaseView } from "../bindings/LeaseView";
import type { MemberView } from "../bindings/MemberView";
import { powerTone, stateTone } from "../lib/presentation";
import { formatLocalDateTime, parseIso } from "../lib/time";
import { Countdown } from "./Countdown";

const RENEW_IN_FUTURE =
  "The lease's renewTime is ahead of the API server's clock, so its expiry cannot be trusted. " +
  "The holder's clock is probably wrong.";

function Missing({ title }: { title: string }) {
  return (
    <span className="muted" title={title}>
      —
    </span>
  );
}

function WarningIcon({ label }: { label: string }) {
  return (
    <span className="warn-icon" role="img" aria-label={label} title={label}>
      <svg viewBox="0 0 16 16" aria-hidden="true" focusable="false">
        <path d="M8 1.5 15 14H1z" />
        <path className="warn-mark" d="M8 6v4M8 11.6v.8" />
      </svg>
    </span>
  );
}

function leaseDetails(lease: LeaseView): string {
  const lines = [
    `Expires: ${lease.expiresAt ?? "unknown"}`,
    `Holder: ${lease.holder ?? "none"}`,
    `Acquired: ${lease.acquiredAt ?? "unknown"}`,
    `Renewed: ${lease.renewedAt ?? "unknown"}`,
    `Duration: ${lease.durationSeconds === null ? "unknown" : `${lease.durationSeconds}s`}`,
    `Transitions: ${lease.transitions}`,
    `Active: ${lease.active ? "yes" : "no"}`,
  ];
  return lines.join("\n");
}

function LeaseCell({ lease, clockOffsetMs }: { lease: LeaseView | null; clockOffsetMs: number }) {
  if (lease === null) {
    return <Missing title="No ownership Lease" />;
  }
  const expiresMs = parseIso(lease.expiresAt);
  return (
    <span className="lease-cell">
      {expiresMs === null || lease.expiresAt === null ? (
        <Missing title={leaseDetails(lease)} />
      ) : (
        <time dateTime={lease.expiresAt} title={leaseDetails(lease)}>
          <Countdown targetMs={expiresMs} clockOffsetMs={clockOffsetMs} />
        </time>
      )}
      {lease.renewTimeInFuture ? <WarningIcon label={RENEW_IN_FUTURE} /> : null}
    </span>
  );
}

function ClaimedAtCell({ claimedAt }: { claimedAt: string | null }) {
  if (claimedAt === null || claimedAt === "") {
    return <Missing title="Not claimed" />;
  }
  const local = formatLocalDateTime(claimedAt);
  if (local === null) {
    // Shown as written when the annotation is not a valid time.
    return <span title="Not a valid RFC 3339 time">{claimedAt}</span>;
  }
  return (
    <time dateTime={claimedAt} title={claimedAt} className="tabular">
      {local}
    </time>
  );
}

type MemberRowProps = {
  member: MemberView;
  clockOffsetMs: number;
};

export function MemberRow({ member, clockOffsetMs }: MemberRowProps) {
  const stateTitle = `${member.state}${member.claimable ? " · claimable" : " · not claimable"}`;
  return (
    <tr data-testid={`member-${member.name}`}>
      <th scope="row" className="cell-member">
        <span className="mono" title={`${member.namespace}/${member.name}`}>
          {member.name}
        </span>
      </th>
      <td>
        <span className={`badge tone-${stateTone(member.state)}`} title={stateTitle}>
          {member.stateLabel}
        </span>
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
        <span
          className={`badge badge-power tone-${powerTone(member.power)}`}
          title="VirtualMachine status.printableStatus"
        >
          {member.power === "" ? "—" : member.power}
        </span>
      </td>
    </tr>
  );
}
