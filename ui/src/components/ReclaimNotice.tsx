import type { MemberView } from "../bindings";
import { useNow } from "../lib/clock";
import { describeWhy, explainWhy, keepBlocker } from "../lib/reclaim";
import { formatCountdown, formatDateTimeWithZone, parseIso } from "../lib/time";
import { Working } from "./Working";

/**
 * When your claim of `member` is reclaimed, and why, counting down with the API server's clock
 * (the time and reason are the backend's). Shown in My desktops' row; nothing when no rule
 * applies.
 */
export function ReclaimCountdown({
  member,
  clockOffsetMs,
}: {
  member: MemberView;
  clockOffsetMs: number;
}) {
  const now = useNow();
  const at = parseIso(member.reclaimAt);
  if (at === null || member.reclaimWhy === null) return null;
  const { text, past } = formatCountdown(at, now + clockOffsetMs);
  return (
    <span
      className={`reclaim-countdown${member.notice ? " reclaim-soon" : ""}`}
      data-testid={`reclaim-${member.name}`}
      title={`Reclaimed at ${formatDateTimeWithZone(member.reclaimAt) ?? member.reclaimAt ?? ""}: ${explainWhy(member.reclaimWhy)}`}
    >
      <span className="tabular">{past ? "reclaiming" : `reclaimed ${text}`}</span>{" "}
      <span className="muted">{describeWhy(member.reclaimWhy)}</span>
    </span>
  );
}

/**
 * The notice before a reclaim (within five minutes, as the backend judges it): prominent,
 * with Keep, which renews the claim, disabled with the reason when it cannot postpone it (a
 * maximum session).
 */
export function ReclaimNotice({
  member,
  clockOffsetMs,
  keeping,
  onKeep,
}: {
  member: MemberView;
  clockOffsetMs: number;
  keeping: boolean;
  onKeep: (member: MemberView) => void;
}) {
  const now = useNow();
  const at = parseIso(member.reclaimAt);
  if (!member.notice || at === null || member.reclaimWhy === null) return null;
  const { text, past } = formatCountdown(at, now + clockOffsetMs);
  const blocker = keepBlocker(member);
  return (
    <div
      className="banner banner-warning reclaim-notice"
      role="alert"
      data-testid={`reclaim-notice-${member.name}`}
    >
      <span className="banner-icon" aria-hidden="true">
        !
      </span>
      <div className="banner-body">
        <p className="banner-message">
          <strong>
            {member.name} {past ? "is being reclaimed" : `will be reclaimed ${text}`}
          </strong>{" "}
          ({describeWhy(member.reclaimWhy)}).
        </p>
        <p className="banner-note">{blocker ?? explainWhy(member.reclaimWhy)}</p>
      </div>
      <button
        type="button"
        className="btn btn-primary reclaim-keep"
        data-testid={`keep-${member.name}`}
        disabled={blocker !== null || keeping}
        aria-busy={keeping || undefined}
        title={blocker ?? `Renew your claim of ${member.name} now`}
        onClick={() => {
          onKeep(member);
        }}
      >
        {keeping ? <Working /> : "Keep"}
      </button>
    </div>
  );
}
