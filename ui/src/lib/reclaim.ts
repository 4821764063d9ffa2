/**
 * The words of a claim's coming reclaim, as the holder sees them. When and why are the
 * backend's (`MemberView.reclaimAt`, `reclaimWhy`, `notice`, `keepable`, from the same rule the
 * broker acts on); this only says them.
 */
import type { Kept, MemberView, ReclaimWhy } from "../bindings";
import { formatDateTimeWithZone } from "./time";

/** Why, in a few words: "no session open", "maximum session", "no one logged in". */
export function describeWhy(why: ReclaimWhy): string {
  switch (why) {
    case "disconnected":
      return "no session open";
    case "maxSession":
      return "maximum session";
    case "idle":
      return "no one logged in";
  }
}

/** The sentence under the countdown, saying what happens and why. */
export function explainWhy(why: ReclaimWhy): string {
  switch (why) {
    case "disconnected":
      return "No console, forward or RDP/SSH session of yours renews the claim: it is reclaimed when its grace runs out.";
    case "maxSession":
      return "The pool's maximum session ends the claim then; Keep cannot extend it.";
    case "idle":
      return "The desktop reports no logged-in user: it is reclaimed when the pool's idle timeout runs out.";
  }
}

/** Why Keep is unavailable for `member`'s notice, or null when it may be pressed. */
export function keepBlocker(member: MemberView): string | null {
  if (member.keepable) return null;
  return member.reclaimWhy === "maxSession"
    ? "The pool's maximum session cannot be extended: save your work."
    : "Keep cannot postpone this reclaim.";
}

/** One line about a Keep: "kept devpool-1; next reclaim 2026-… (maximum session)". */
export function formatKept(kept: Kept): string {
  const next = kept.nextReclaim;
  const member = kept.renewed.member;
  if (next === null) return `kept ${member}`;
  const at = formatDateTimeWithZone(next.at) ?? next.at;
  return `kept ${member}; next reclaim ${at} (${describeWhy(next.why)})`;
}
