import { useEffect, useState } from "react";
import { brokerStatus, onBrokerStatus } from "./api";
import type { BrokerBadge, ClusterInfo } from "./bindings";

/**
 * The connected cluster's broker badge: asked once each time a cluster connection is shown
 * (`cluster`, a new object per connection), then kept current by the backend's `broker-status`
 * events. "checking" while connected and the backend has not said yet (the header keeps the
 * badge's place), null while not connected or when the backend could not say.
 */
export function useBroker(cluster: ClusterInfo | null): BrokerBadge | "checking" | null {
  // The badge with the connection it was read for: one read for an earlier connection is
  // never shown for the next.
  const [shown, setShown] = useState<{ cluster: ClusterInfo; badge: BrokerBadge | null } | null>(
    null,
  );
  useEffect(() => {
    if (cluster === null) return;
    let live = true;
    let unlisten: (() => void) | null = null;
    // Read through a function, so that the cleanup's change is not narrowed away.
    const ended = () => !live;
    void (async () => {
      const subscribed = await onBrokerStatus((badge) => {
        if (live) setShown({ cluster, badge });
      });
      if (!subscribed.ok) {
        if (!ended()) setShown({ cluster, badge: null });
        return;
      }
      if (ended()) {
        subscribed.value();
        return;
      }
      unlisten = subscribed.value;
      // Read only once listening, so that no change falls between the read and the first
      // event; an event that arrived meanwhile is newer than this read.
      const read = await brokerStatus();
      if (ended()) return;
      const badge = read.ok ? read.value : null;
      setShown((current) =>
        current !== null && current.cluster === cluster && current.badge !== null
          ? current
          : { cluster, badge },
      );
    })();
    return () => {
      live = false;
      unlisten?.();
    };
  }, [cluster]);
  if (cluster === null) return null;
  return shown !== null && shown.cluster === cluster ? shown.badge : "checking";
}
