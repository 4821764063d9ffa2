import { useEffect, useState } from "react";
import { permissions as fetchPermissions } from "./api";
import type { ClusterInfo, Permissions } from "./bindings";

/**
 * What the connection's identity may do in each of `namespaces`, asked of the cluster once per
 * connection and namespace (SelfSubjectAccessReviews and the guard's rules, in the backend).
 * A namespace is missing from the map until its answer arrives; a failed question leaves it
 * missing, so its actions stay offered and the server judges them.
 */
export function usePermissions(
  cluster: ClusterInfo | null,
  namespaces: readonly string[],
): ReadonlyMap<string, Permissions> {
  const [answers, setAnswers] = useState<{
    cluster: ClusterInfo | null;
    byNamespace: ReadonlyMap<string, Permissions>;
  }>({ cluster: null, byNamespace: new Map() });
  const key = namespaces.join("\n");

  useEffect(() => {
    if (cluster === null) return;
    let stale = false;
    const wanted = key === "" ? [] : key.split("\n");
    for (const ns of wanted) {
      void fetchPermissions(ns).then((result) => {
        if (stale || !result.ok) return;
        setAnswers((prev) => {
          const base = prev.cluster === cluster ? prev.byNamespace : new Map();
          const next = new Map(base);
          next.set(ns, result.value);
          return { cluster, byNamespace: next };
        });
      });
    }
    return () => {
      stale = true;
    };
  }, [cluster, key]);

  return answers.cluster === cluster ? answers.byNamespace : new Map();
}
