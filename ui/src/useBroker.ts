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
    void onBrokerStatus((badge) => {
      if (live) setShown({ cluster, badge });
    }).then((subscribed) => {
      if (!subscribed.ok) return;
      if (live) unlisten = subscribed.value;
      else subscribed.value();
    });
    void brokerStatus().then((read) => {
      if (!live || !read.ok) return;
      // An event that arrived meanwhile is newer than this read.
      setShown((current) =>
        current !== null && current.cluster === cluster ? current : { cluster, badge: read.value },
      );
    });
    return () => {
      live = false;
      unlisten?.();
    };
  }, [cluster]);
  return shown !== null && shown.cluster === cluster ? shown.badge : null;
}
