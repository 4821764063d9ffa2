import { useEffect, useState } from "react";
import { entitledPools } from "./api";
import type { PoolView } from "./bindings";
import type { Entitled } from "./lib/claims";

/** How often the entitlements are asked again while pools are shown. */
const REASK_MS = 15_000;

/**
 * Which pools of the namespaces in `pools` you may claim from (RBAC's `claim` on
 * `desktoppools`, read by the backend per namespace), for "Get a desktop" to offer only those.
 * Read again when the pools shown or `username` change, when the window gets the focus back,
 * and every 15 s (an administrator may have entitled you meanwhile). Null until the first
 * answer for `username`, and when it could not be read: then every pool is offered and the
 * cluster judges the claim.
 */
export function useEntitled(pools: readonly PoolView[], username: string | null): Entitled | null {
  const namespaces = [...new Set(pools.map((p) => p.namespace))].sort();
  // The identity, the namespaces and the pools in one key: asked again when one of them
  // changes (a new pool comes with its grants), not on every member's change.
  const names = pools.map((p) => `${p.namespace}/${p.name}`).sort();
  const key =
    username === null
      ? null
      : [username, String(namespaces.length), ...namespaces, ...names].join("\u0000");
  // The last answer with whom it was for: kept while the pools change (a namespace it does not
  // name counts as every pool until the next answer), never shown for another identity.
  const [read, setRead] = useState<{ user: string; entitled: Entitled } | null>(null);
  useEffect(() => {
    if (key === null) return;
    const parts = key.split("\u0000");
    const user = parts[0];
    const asked = parts.slice(2, 2 + Number(parts[1]));
    if (asked.length === 0) return;
    let live = true;
    const ask = () => {
      void entitledPools(asked).then((answer) => {
        if (live && answer.ok) setRead({ user, entitled: answer.value });
      });
    };
    ask();
    window.addEventListener("focus", ask);
    // Grants written after a pool appeared (pool create writes them last) or changed by an
    // administrator meanwhile: asked again now and then, one request per namespace.
    const timer = window.setInterval(ask, REASK_MS);
    return () => {
      live = false;
      window.removeEventListener("focus", ask);
      window.clearInterval(timer);
    };
  }, [key]);
  return read !== null && read.user === username ? read.entitled : null;
}
