import { useCallback, useEffect, useRef, useState } from "react";
import type { UnlistenFn } from "@tauri-apps/api/event";
import {
  createPool,
  deletePool,
  goldenCandidates,
  onCreateProgress,
  validateNewPool,
  type Result,
} from "./api";
import type {
  ErrorView,
  GoldenCandidate,
  NewPool,
  NewPoolCheck,
  PoolCreated,
  PoolDeleted,
} from "./bindings";
import { applyCreateProgress, finishCreateRun, newCreateRun, type CreateRun } from "./lib/pools";

export type CandidatesState =
  | { kind: "loading" }
  | { kind: "loaded"; candidates: GoldenCandidate[] }
  | { kind: "failed"; error: ErrorView };

/** The golden VM candidates of `namespace`, loaded once (and again on retry). */
export function useGoldenCandidates(namespace: string) {
  const [state, setState] = useState<CandidatesState>({ kind: "loading" });
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    let stale = false;
    void goldenCandidates(namespace).then((result) => {
      if (stale) return;
      setState(
        result.ok
          ? { kind: "loaded", candidates: result.value }
          : { kind: "failed", error: result.error },
      );
    });
    return () => {
      stale = true;
    };
  }, [namespace, attempt]);

  const retry = useCallback(() => {
    setState({ kind: "loading" });
    setAttempt((n) => n + 1);
  }, []);

  return { state, retry };
}

/** How long typing must pause before the input is validated. */
const VALIDATE_DEBOUNCE_MS = 150;

export type Validation =
  /** Nothing to validate yet (no name or no golden VM). */
  | { kind: "incomplete" }
  /** The backend's answer for the current input: the members, and every problem. */
  | { kind: "judged"; check: NewPoolCheck }
  /** The backend could not judge it (no cluster open). */
  | { kind: "failed"; error: ErrorView }
  /** Waiting for the answer; `last` is the answer to an earlier input, shown meanwhile. */
  | { kind: "checking"; last: NewPoolCheck | null };

/**
 * Live validation of a New pool request by the backend (validate_new_pool, the CLI's rules),
 * debounced; `request` is null when there is nothing to validate yet.
 */
export function usePoolValidation(request: NewPool | null): Validation {
  // The input as a value, so that an equal request rebuilt on every render is not sent again.
  const key = request === null ? null : JSON.stringify(request);
  const [answer, setAnswer] = useState<{ key: string; result: Result<NewPoolCheck> } | null>(null);

  useEffect(() => {
    if (key === null) return;
    const input = JSON.parse(key) as NewPool;
    let stale = false;
    const timer = setTimeout(() => {
      void validateNewPool(input).then((result) => {
        if (!stale) setAnswer({ key, result });
      });
    }, VALIDATE_DEBOUNCE_MS);
    return () => {
      stale = true;
      clearTimeout(timer);
    };
  }, [key]);

  if (key === null) {
    return { kind: "incomplete" };
  }
  if (answer === null || answer.key !== key) {
    const last = answer?.result.ok === true ? answer.result.value : null;
    return { kind: "checking", last };
  }
  return answer.result.ok
    ? { kind: "judged", check: answer.result.value }
    : { kind: "failed", error: answer.result.error };
}

export type CreateState =
  | { kind: "idle" }
  | {
      kind: "running";
      request: NewPool;
      run: CreateRun;
      /** Local time the create was sent, for the elapsed time shown while it runs. */
      sentAtMs: number;
      /** Why live progress is unavailable (the create runs regardless). */
      progressError: ErrorView | null;
    }
  | { kind: "succeeded"; request: NewPool; run: CreateRun; created: PoolCreated }
  | {
      kind: "failed";
      request: NewPool;
      run: CreateRun;
      error: ErrorView;
      /** A clean-up (or clean-up and retry) is running. */
      cleaning: boolean;
      /** Why the last clean-up failed. */
      cleanUpError: ErrorView | null;
    }
  /** What a failed run made was removed. */
  | { kind: "cleanedUp"; request: NewPool; run: CreateRun; deleted: PoolDeleted };

/**
 * One pool create: sends it, folds its `pool-create-progress` reports into a CreateRun, and
 * keeps the outcome. Progress is listened to from just before the create is sent until the
 * component goes away, so that reports arriving after the answer still land.
 */
export function useCreatePool() {
  const [state, setState] = useState<CreateState>({ kind: "idle" });
  const sentRef = useRef(false);
  const unlistenRef = useRef<UnlistenFn | null>(null);
  const mountedRef = useRef(true);

  useEffect(() => {
    mountedRef.current = true;
    return () => {
      mountedRef.current = false;
      unlistenRef.current?.();
      unlistenRef.current = null;
    };
  }, []);

  const start = useCallback(async (request: NewPool, members: readonly string[]) => {
    if (sentRef.current) return;
    sentRef.current = true;
    const initial = newCreateRun(request.namespace, request.name, members);
    setState({
      kind: "running",
      request,
      run: initial,
      sentAtMs: Date.now(),
      progressError: null,
    });

    const subscription = await onCreateProgress((event) => {
      setState((s) => (s.kind === "idle" ? s : { ...s, run: applyCreateProgress(s.run, event) }));
    });
    if (subscription.ok) {
      if (mountedRef.current) {
        unlistenRef.current = subscription.value;
      } else {
        subscription.value();
      }
    } else {
      const progressError = subscription.error;
      setState((s) => (s.kind === "running" ? { ...s, progressError } : s));
    }

    const result = await createPool(request);
    setState((s) => {
      const run = s.kind === "idle" ? initial : s.run;
      return result.ok
        ? {
            kind: "succeeded",
            request,
            run: finishCreateRun(run, result.value),
            created: result.value,
          }
        : {
            kind: "failed",
            request,
            run,
            error: result.error,
            cleaning: false,
            cleanUpError: null,
          };
    });
  }, []);

  /**
   * After a failure: deletes the pool's members (what the run made; none is assigned yet), then,
   * given `retryTimeoutSeconds`, creates the pool again with that per-member timeout.
   */
  const cleanUp = useCallback(
    async (retryTimeoutSeconds: number | null) => {
      // Before its "started" report the run made nothing, and the pool may not be its own.
      if (state.kind !== "failed" || state.cleaning || state.run.started === null) return;
      const { request, run } = state;
      setState({ ...state, cleaning: true, cleanUpError: null });
      const deleted = await deletePool(request.namespace, request.name, false);
      if (!deleted.ok) {
        setState((s) =>
          s.kind === "failed" ? { ...s, cleaning: false, cleanUpError: deleted.error } : s,
        );
        return;
      }
      if (retryTimeoutSeconds === null) {
        setState({ kind: "cleanedUp", request, run, deleted: deleted.value });
        return;
      }
      sentRef.current = false;
      await start(
        { ...request, timeoutSeconds: retryTimeoutSeconds },
        run.members.map((m) => m.member),
      );
    },
    [state, start],
  );

  return { state, start, cleanUp };
}
