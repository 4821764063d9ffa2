import { useCallback, useEffect, useState } from "react";
import { adoptPool, checkPoolSettings, poolPolicy, savePoolSettings } from "./api";
import type { ErrorView, PolicyCheck, PoolPolicy, PoolSettings } from "./bindings";

export type PolicyState =
  | { kind: "loading" }
  | { kind: "loaded"; policy: PoolPolicy }
  | { kind: "failed"; error: ErrorView };

/** What Save or Adopt is doing: nothing, running, or the refusal of the last try. */
export type WriteState =
  { kind: "idle" } | { kind: "running" } | { kind: "failed"; error: ErrorView };

/** How long typing must pause before the values are judged. */
const CHECK_DEBOUNCE_MS = 150;

/**
 * The settings dialog's cluster side: `namespace`/`pool`'s policy, read once (and again after
 * an adopt); `save` and `adopt`, each resolving to whether it was done.
 */
export function usePoolPolicy(namespace: string, pool: string) {
  const [state, setState] = useState<PolicyState>({ kind: "loading" });
  const [write, setWrite] = useState<WriteState>({ kind: "idle" });
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    let stale = false;
    void poolPolicy(namespace, pool).then((result) => {
      if (stale) return;
      setState(
        result.ok
          ? { kind: "loaded", policy: result.value }
          : { kind: "failed", error: result.error },
      );
    });
    return () => {
      stale = true;
    };
  }, [namespace, pool, attempt]);

  const retry = useCallback(() => {
    setState({ kind: "loading" });
    setAttempt((n) => n + 1);
  }, []);

  const save = useCallback(
    async (settings: PoolSettings): Promise<boolean> => {
      setWrite({ kind: "running" });
      const result = await savePoolSettings(namespace, pool, settings);
      if (!result.ok) {
        setWrite({ kind: "failed", error: result.error });
        return false;
      }
      setWrite({ kind: "idle" });
      setState({ kind: "loaded", policy: result.value });
      return true;
    },
    [namespace, pool],
  );

  const adopt = useCallback(async (): Promise<boolean> => {
    setWrite({ kind: "running" });
    const result = await adoptPool(namespace, pool);
    if (!result.ok) {
      setWrite({ kind: "failed", error: result.error });
      return false;
    }
    setWrite({ kind: "idle" });
    setState({ kind: "loaded", policy: result.value });
    return true;
  }, [namespace, pool]);

  return { state, write, retry, save, adopt };
}

/**
 * The backend's judgement of `settings` (null: nothing to judge, the fields' shape is wrong),
 * debounced; the last answer stays while a newer one is asked for. `revision` asks again for
 * the same values (the pool's members changed, so a shrink removes others).
 */
export function usePolicyCheck(
  namespace: string,
  pool: string,
  golden: string | null,
  settings: PoolSettings | null,
  revision: unknown,
): PolicyCheck | null {
  const key = settings === null || golden === null ? null : JSON.stringify([golden, settings]);
  const [answer, setAnswer] = useState<{ key: string; check: PolicyCheck } | null>(null);

  useEffect(() => {
    if (key === null) return;
    const [g, input] = JSON.parse(key) as [string, PoolSettings];
    let stale = false;
    const timer = setTimeout(() => {
      void checkPoolSettings(namespace, pool, g, input).then((result) => {
        if (!stale && result.ok) setAnswer({ key, check: result.value });
      });
    }, CHECK_DEBOUNCE_MS);
    return () => {
      stale = true;
      clearTimeout(timer);
    };
  }, [namespace, pool, key, revision]);

  return key === null ? null : (answer?.check ?? null);
}
