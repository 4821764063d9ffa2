import {
  backendAvailable,
  listContexts,
  connectCluster,
  type Result,
  type ClusterStreams,
} from "./api";
import type { ClusterInfo, Contexts } from "./bindings";
import { heldStreams } from "./lib/heldStreams";
import { markOnce } from "./lib/timing";

/**
 * A cluster connection being made, seen from the page: given where its streams go, the backend's answer.
 * What the streams sent before the call is delivered first.
 */
export type Opening = (streams: ClusterStreams) => Promise<Result<ClusterInfo>>;

/** What the page asked for as its script started. */
export type EarlyStart = {
  /** The connection to the current context in its start namespace. */
  open: Opening;
  /** The contexts, for the picker. */
  contexts: Promise<Result<Contexts>>;
};

let early: EarlyStart | null = null;

/**
 * Makes the cluster connection the window starts with — the kubeconfig's current context in its start
 * namespace — as the page's script starts, before the first render: the backend then sends the
 * first pools while React renders the page around them, instead of after (at 10,000 VMs the
 * first render and the first list each take a few hundred milliseconds on a small machine).
 * The contexts, for the picker, are asked for at the same time. Does nothing outside the
 * app's window.
 */
export function openEarlyCluster(): void {
  if (!backendAvailable() || early !== null) return;
  markOnce("cluster-requested");
  const held = heldStreams();
  const result = connectCluster(null, null, held.streams);
  early = {
    open: (streams) => {
      held.attach(streams);
      return result;
    },
    contexts: listContexts(),
  };
}

/** What [`openEarlyCluster`] asked for, once: later calls get null. */
export function takeEarlyStart(): EarlyStart | null {
  const taken = early;
  early = null;
  return taken;
}
