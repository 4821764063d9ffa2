/**
 * What the app says about its credentials: nothing while an exec plugin renews them, one
 * banner while it fails.
 */
import type { CredentialState, ErrorView } from "../bindings";
import { formatDateTimeWithZone } from "./time";

/** The credentials banner: the failure as an error, and when things happen next. */
export type CredentialBanner = { error: ErrorView; note: string };

/** The banner to show for `state`, or null when the credentials are fine. */
export function credentialBanner(state: CredentialState | null): CredentialBanner | null {
  if (state?.kind !== "failing") return null;
  const expires = formatDateTimeWithZone(state.expiresAt);
  const until =
    expires === null
      ? "The credentials in use have expired: requests are refused until the plugin works."
      : `The credentials in use stay valid until ${expires}.`;
  return {
    error: {
      kind: "unauthorized",
      message: `The kubeconfig's credential plugin failed: ${state.message}`,
      suggestion:
        "fix what the plugin says (sign in again, or run it in a terminal to see more); the app runs it again by itself",
      retryable: true,
    },
    note: `${until} Next try in ${state.retryInSeconds} s.`,
  };
}
