import { useEffect, useState } from "react";
import { brokerStatus, onBrokerStatus } from "./api";
import type { BrokerBadge, ClusterInfo } from "./bindings";

/**
 * The connected cluster's broker badge: asked once each time a cluster connection is shown
 * (`cluster`, a new object per connection), then kept current by the backend's `broker-status`
 * events. Null while not connected, before the backend has said, or when it could not.
 */
export function useBroker(cluster: ClusterInfo | null): BrokerBadge | null {
  // The badge with the connection it was read for: one read for an earlier connection is
  // never shown for the next.
  const [shown, setShown] = useState<{ cluster: ClusterInfo; badge: BrokerBadge } | null>(null);
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
      if (!subscribed.ok) return;
      if (ended()) {
        subscribed.value();
        return;
      }
      unlisten = subscribed.value;
      // Read only once listening, so that no change falls between the read and the first
      // event; an event that arrived meanwhile is newer than this read.
      const read = await brokerStatus();
      if (ended() || !read.ok) return;
      setShown((current) =>
        current !== null && current.cluster === cluster ? current : { cluster, badge: read.value },
      );
    })();
    return () => {
      live = false;
      unlisten?.();
    };
  }, [cluster]);
  return shown !== null && shown.cluster === cluster ? shown.badge : null;
}
