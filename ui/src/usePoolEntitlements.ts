import { useCallback, useEffect, useState } from "react";
import { entitlePool, poolEntitlements } from "./api";
import type { ErrorView, PoolEntitlements, WhoInput } from "./bindings";

/** How often who may use the pool is read again while the dialog is open. */
const REREAD_MS = 15_000;

export type EntitlementsState =
  | { kind: "loading" }
  | { kind: "loaded"; read: PoolEntitlements }
  | { kind: "failed"; error: ErrorView };

/** What the last grant or revocation did: nothing yet, running, its sentences, or its refusal. */
export type ChangeState =
  | { kind: "idle" }
  | { kind: "running" }
  | { kind: "done"; said: string[] }
  | { kind: "failed"; error: ErrorView };

/**
 * Who may claim from `namespace`/`pool` (every RBAC grant of the right), read when the dialog
 * opens, after each change, when the window gets the focus back and every 15 s (RBAC is no
 * feed the app watches); `change` grants (or with `remove` takes back) and resolves to whether
 * it was done.
 */
export function usePoolEntitlements(namespace: string, pool: string) {
  const [state, setState] = useState<EntitlementsState>({ kind: "loading" });
  const [change, setChange] = useState<ChangeState>({ kind: "idle" });
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    let live = true;
    const read = () => {
      void poolEntitlements(namespace, pool).then((result) => {
        if (!live) return;
        setState(
          result.ok
            ? { kind: "loaded", read: result.value }
            : { kind: "failed", error: result.error },
        );
      });
    };
    read();
    window.addEventListener("focus", read);
    const timer = window.setInterval(read, REREAD_MS);
    return () => {
      live = false;
      window.removeEventListener("focus", read);
      window.clearInterval(timer);
    };
  }, [namespace, pool, attempt]);

  const apply = useCallback(
    async (who: WhoInput, remove: boolean): Promise<boolean> => {
      setChange({ kind: "running" });
      const result = await entitlePool(namespace, pool, who, remove);
      setAttempt((n) => n + 1);
      if (!result.ok) {
        setChange({ kind: "failed", error: result.error });
        return false;
      }
      setChange({ kind: "done", said: result.value });
      return true;
    },
    [namespace, pool],
  );

  return { state, change, apply };
}
