import type { FeedStatus } from "../bindings/FeedStatus";
import { errorTitle } from "./errors";
import { formatLocalDateTime } from "./time";

export type FeedIndicator = {
  /** Drives the dot colour. */
  tone: "live" | "syncing" | "failing" | "idle";
  /** The indicator's text: "live", "syncing…", … */
  text: string;
  /** Longer explanation for the tooltip. */
  detail: string;
};

export type FeedInput = {
  /** The app could not be connected (no backend, kubeconfig unreadable, open_session failed). */
  disconnected: boolean;
  /** Nothing to connect to until the user picks a context. */
  waitingForContext: boolean;
  /** The latest status of the live feed for the current session, if any arrived. */
  status: FeedStatus | null;
  /** API server time of the latest snapshot. */
  judgedAt: string | null;
};

/** What the small feed indicator in the header says. */
export function feedIndicator(input: FeedInput): FeedIndicator {
  if (input.disconnected) {
    return { tone: "failing", text: "offline", detail: "Not connected to a cluster" };
  }
  if (input.waitingForContext) {
    return { tone: "idle", text: "idle", detail: "Pick a kubeconfig context to connect" };
  }
  const status = input.status;
  if (status === null || status.kind === "syncing") {
    return {
      tone: "syncing",
      text: "syncing…",
      detail: "Waiting for the first full list from the cluster",
    };
  }
  if (status.kind === "live") {
    const at = formatLocalDateTime(input.judgedAt);
    return {
      tone: "live",
      text: "live",
      detail: at
        ? `In sync; changes appear as they happen. Last change judged at ${at} (API server time).`
        : "In sync; changes appear as they happen.",
    };
  }
  return {
    tone: "failing",
    text: status.error.retryable ? "reconnecting…" : "offline",
    detail: `${errorTitle(status.error.kind)}: ${status.error.message}`,
  };
}
