import type { LeaseView, MemberView } from "../bindings";
import { powerTone, stateTone } from "../lib/presentation";
import { useNow } from "../lib/clock";
import { formatAgo, formatDateTimeWithZone, parseIso } from "../lib/time";
import { Countdown } from "./Countdown";

/** Cells shared by the pools tables and My desktops. */

const RENEW_IN_FUTURE =
  "The lease's renewTime is ahead of the API server's clock, so its expiry cannot be trusted. " +
  "The holder's clock is probably wrong.";

export function Missing({ title }: { title: string }) {
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
  const at = (iso: string | null) => formatDateTimeWithZone(iso) ?? iso ?? "unknown";
  const lines = [
    `Ends: ${at(lease.expiresAt)}`,
    `Holder: ${lease.holder ?? "none"}`,
    ...(lease.assignedBy === null ? [] : [`Assigned by: ${lease.assignedBy}`]),
    `Acquired: ${at(lease.acquiredAt)}`,
    `Renewed: ${at(lease.renewedAt)}`,
    `Duration: ${lease.durationSeconds === null ? "unknown" : `${lease.durationSeconds}s`}`,
    `Transitions: ${lease.transitions}`,
    `Active: ${lease.active ? "yes" : "no"}`,
  ];
  return lines.join("\n");
}

/** The LEASE ENDS cell. A member being removed shows no end: its Lease, if any, is the
 * broker's hold while it removes it, not anyone's claim. */
export function LeaseCell({
  lease,
  removing,
  clockOffsetMs,
}: {
  lease: LeaseView | null;
  removing: boolean;
  clockOffsetMs: number;
}) {
  if (removing) {
    return <Missing title="Nobody's claim: the broker holds this member while it removes it" />;
  }
  if (lease === null) {
    return <Missing title="No ownership Lease" />;
  }
  if (lease.problem !== null) {
    const why = `This Lease cannot be read: ${lease.problem}. Only its holder (${lease.holder ?? "none"}) or an administrator can release the member.`;
    return (
      <span className="lease-cell lease-problem" title={why}>
        cannot be read
        <WarningIcon label={why} />
      </span>
    );
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

/** When the member was claimed: relative ("12m ago", following the API server's clock),
 * exact with the zone on hover. */
export function ClaimedAtCell({
  claimedAt,
  clockOffsetMs,
}: {
  claimedAt: string | null;
  clockOffsetMs: number;
}) {
  if (claimedAt === null || claimedAt === "") {
    return <Missing title="Not claimed" />;
  }
  const ms = parseIso(claimedAt);
  if (ms === null) {
    // Shown as written when the annotation is not a valid time.
    return <span title="Not a valid RFC 3339 time">{claimedAt}</span>;
  }
  return <ClaimedAgo claimedAt={claimedAt} ms={ms} clockOffsetMs={clockOffsetMs} />;
}

/** A valid claimed-at time, relative and kept current by the shared clock (only rows with
 * one subscribe to it). */
function ClaimedAgo({
  claimedAt,
  ms,
  clockOffsetMs,
}: {
  claimedAt: string;
  ms: number;
  clockOffsetMs: number;
}) {
  const now = useNow();
  return (
    <time
      dateTime={claimedAt}
      title={formatDateTimeWithZone(claimedAt) ?? claimedAt}
      className="tabular"
    >
      {formatAgo(ms, now + clockOffsetMs)}
    </time>
  );
}

/**
 * Who holds a member; for a conflict, the Lease's holder and whom the label names; in a
 * dedicated pool, its owner too when someone else (or nobody) holds it.
 */
export function HolderCell({ member }: { member: MemberView }) {
  const owner = member.owner;
  if (owner !== null && member.holder !== owner) {
    const text = member.holder ? `${member.holder} · owner: ${owner}` : `owner: ${owner}`;
    return (
      <span
        className="mono truncate muted"
        data-testid={`owner-${member.name}`}
        title={`The dedicated desktop of ${owner}: only ${owner} claims it; an administrator moves it (pool owner)`}
      >
        {text}
      </span>
    );
  }
  if (!member.holder) {
    return <Missing title="No holder" />;
  }
  if (member.state === "conflict" && member.labelHolder !== null) {
    const text = `${member.holder} · label: ${member.labelHolder}`;
    return (
      <span
        className="mono truncate holder-conflict"
        title={`Lease held by ${member.holder}; the assigned-to label names ${member.labelHolder}`}
      >
        {text}
      </span>
    );
  }
  return (
    <span
      className="mono truncate"
      title={owner !== null ? `${member.holder}, whose dedicated desktop it is` : member.holder}
    >
      {member.holder}
    </span>
  );
}

/** A member's claim state, with what the backend says beyond its label beside it (why its
 * Lease cannot be read, why the broker cannot finish granting it, "removed when released"). */
export function StateBadge({ member }: { member: MemberView }) {
  const note = member.stateNote;
  const stateTitle = `${member.state}${member.claimable ? " · claimable" : " · not claimable"}${
    note ? ` · ${note}` : ""
  }`;
  return (
    <>
      <span className={`badge tone-${stateTone(member.state)}`} title={stateTitle}>
        {member.stateLabel}
      </span>
      {note ? (
        <span
          className="state-reason truncate"
          data-testid={`state-note-${member.name}`}
          title={note}
        >
          {note}
        </span>
      ) : null}
    </>
  );
}

export function PowerBadge({ power }: { power: string }) {
  return (
    <span
      className={`badge badge-power tone-${powerTone(power)}`}
      title="VirtualMachine status.printableStatus"
    >
      {power === "" ? "—" : power}
    </span>
  );
}
