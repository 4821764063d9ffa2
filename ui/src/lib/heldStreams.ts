import type { ClusterStreams as Streams } from "../api";

/** Streams that hold what they receive until `attach` names where it goes. */
export type HeldStreams = {
  /** Pass these to the backend. */
  streams: Streams;
  /** Delivers what was held to `target`, in the order received, then everything as it comes. */
  attach: (target: Streams) => void;
};

/**
 * Streams for a cluster connection made before anything can show it (the page's first render): what
 * arrives in the meantime is kept, both streams in one order, and handed over on `attach`.
 */
export function heldStreams(): HeldStreams {
  const held: ((target: Streams) => void)[] = [];
  let target: Streams | null = null;
  const deliver = (send: (to: Streams) => void) => {
    if (target === null) held.push(send);
    else send(target);
  };
  return {
    streams: {
      pools: (update) => {
        deliver((to) => {
          to.pools(update);
        });
      },
      credentials: (state) => {
        deliver((to) => {
          to.credentials(state);
        });
      },
    },
    attach: (to) => {
      target = to;
      for (const send of held.splice(0)) send(to);
    },
  };
}
