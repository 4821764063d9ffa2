import { useEffect, useState } from "react";
import { capacityPreview, onCapacitySnapshot, unwatchCapacity, watchCapacity } from "./api";
import type { CapacityPlan, CapacitySnapshot, ErrorView } from "./bindings";

/** How long the golden VM and size must stay put before capacity is asked. */
const PREVIEW_DEBOUNCE_MS = 300;

export type PreviewState =
  | { kind: "idle" }
  | { kind: "checking"; last: CapacityPlan | null }
  | { kind: "ready"; plan: CapacityPlan }
  | { kind: "failed"; error: ErrorView };

export type PreviewInput = { namespace: string; golden: string; size: number };

/**
 * The New pool capacity preview: asked again when the golden VM or size changes, and when
 * `refresh` changes (a new pools snapshot: members started or stopped), debounced. `input`
 * null: nothing to preview.
 */
export function usePoolCapacity(input: PreviewInput | null, refresh: unknown): PreviewState {
  const key = input === null ? null : JSON.stringify(input);
  const [answer, setAnswer] = useState<{
    key: string;
    state: PreviewState;
  } | null>(null);

  useEffect(() => {
    if (key === null) return;
    const asked = JSON.parse(key) as PreviewInput;
    let stale = false;
    const timer = setTimeout(() => {
      void capacityPreview(asked.namespace, asked.golden, asked.size).then((result) => {
        if (stale) return;
        setAnswer({
          key,
          state: result.ok
            ? { kind: "ready", plan: result.value }
            : { kind: "failed", error: result.error },
        });
      });
    }, PREVIEW_DEBOUNCE_MS);
    return () => {
      stale = true;
      clearTimeout(timer);
    };
  }, [key, refresh]);

  if (key === null) return { kind: "idle" };
  if (answer === null || answer.key !== key) {
    return { kind: "checking", last: answer?.state.kind === "ready" ? answer.state.plan : null };
  }
  return answer.state;
}

export type ClusterCapacityState =
  | { kind: "waiting" }
  | { kind: "snapshot"; snapshot: CapacitySnapshot }
  | { kind: "failed"; error: ErrorView };

/**
 * The live Capacity view while the component is mounted: watches start on mount (and again
 * when `cluster` changes: another cluster or identity) and stop on unmount.
 */
export function useClusterCapacity(cluster: unknown): ClusterCapacityState {
  const [state, setState] = useState<{ cluster: unknown; value: ClusterCapacityState } | null>(
    null,
  );

  useEffect(() => {
    const flags = { disposed: false };
    // Read through a function, so that the cleanup's change is not narrowed away.
    const live = () => !flags.disposed;
    let unlisten: (() => void) | null = null;
    void (async () => {
      const subscription = await onCapacitySnapshot((snapshot) => {
        if (live()) setState({ cluster, value: { kind: "snapshot", snapshot } });
      });
      if (!subscription.ok) {
        if (live()) setState({ cluster, value: { kind: "failed", error: subscription.error } });
        return;
      }
      if (!live()) {
        subscription.value();
        return;
      }
      unlisten = subscription.value;
      const started = await watchCapacity();
      if (!started.ok && live()) {
        setState({ cluster, value: { kind: "failed", error: started.error } });
      }
    })();
    return () => {
      flags.disposed = true;
      unlisten?.();
      void unwatchCapacity();
    };
  }, [cluster]);

  return state === null || state.cluster !== cluster ? { kind: "waiting" } : state.value;
}
