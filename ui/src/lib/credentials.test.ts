import { describe, expect, it } from "vitest";
import { credentialBanner } from "./credentials";

describe("the credentials banner", () => {
  it("is not shown while credentials last or are renewed", () => {
    expect(credentialBanner(null)).toBeNull();
    expect(credentialBanner({ kind: "lasting" })).toBeNull();
    expect(
      credentialBanner({ kind: "renewing", expiresAt: "2026-12-01T10:00:00Z", runs: 3 }),
    ).toBeNull();
  });

  it("says the plugin's words, until when the credentials hold, and the next try", () => {
    const banner = credentialBanner({
      kind: "failing",
      message: "corral-login exited with status 1: the refresh token was revoked",
      expiresAt: "2026-12-01T10:00:00Z",
      retryInSeconds: 20,
      runs: 5,
    });
    expect(banner?.error.message).toBe(
      "The kubeconfig's credential plugin failed: corral-login exited with status 1: the refresh token was revoked",
    );
    expect(banner?.note).toMatch(
      /^The credentials in use stay valid until .+\. Next try in 20 s\.$/,
    );
  });

  it("says when the credentials have already expired", () => {
    const banner = credentialBanner({
      kind: "failing",
      message: "x",
      expiresAt: null,
      retryInSeconds: 300,
      runs: 9,
    });
    expect(banner?.note).toBe(
      "The credentials in use have expired: requests are refused until the plugin works. Next try in 300 s.",
    );
  });
});
