import { useEffect, useState } from "react";
import { permissions as fetchPermissions } from "./api";
import type { Permissions } from "./bindings/Permissions";
import type { ClusterInfo } from "./bindings/ClusterInfo";

/**
 * What the session's identity may do in each of `namespaces`, asked of the cluster once per
 * session and namespace (SelfSubjectAccessReviews and the guard's rules, in the backend).
 * A namespace is missing from the map until its answer arrives; a failed question leaves it
 * missing, so its actions stay offered and the server judges them.
 */
export function usePermissions(
  session: ClusterInfo | null,
  namespaces: readonly string[],
): ReadonlyMap<string, Permissions> {
  const [answers, setAnswers] = useState<{
    session: ClusterInfo | null;
    byNamespace: ReadonlyMap<string, Permissions>;
  }>({ session: null, byNamespace: new Map() });
  const key = namespaces.join("\n");

  useEffect(() => {
    if (session === null) return;
    let stale = false;
    const wanted = key === "" ? [] : key.split("\n");
    for (const ns of wanted) {
      void fetchPermissions(ns).then((result) => {
        if (stale || !result.ok) return;
        setAnswers((prev) => {
          const base = prev.session === session ? prev.byNamespace : new Map();
          const next = new Map(base);
          next.set(ns, result.value);
          return { session, byNamespace: next };
        });
      });
    }
    return () => {
      stale = true;
    };
  }, [session, key]);

  return answers.session === session ? answers.byNamespace : new Map();
}
