import type { Permissions } from "../bindings";
import { deniedActions } from "../lib/claims";

/**
 * The pool actions the identity may not take in a namespace, in one plain line next to the
 * disabled buttons (a disabled button shows no tooltip); the cluster's reason for each, which
 * names RBAC rules, is one click away.
 */
export function DeniedNote({ permissions }: { permissions: Permissions | null }) {
  const denied = permissions === null ? [] : deniedActions(permissions);
  if (denied.length === 0) {
    return null;
  }
  const actions = denied.map((d) => d.action);
  return (
    <details className="denied-note" data-testid="denied-note">
      <summary>
        {actions.join(", ")} {actions.length === 1 ? "is" : "are"} not yours to use here (why?)
      </summary>
      <ul aria-label="Actions you may not take">
        {denied.map((d) => (
          <li key={d.action}>
            <strong>{d.action}</strong> is off: {d.reason}
          </li>
        ))}
      </ul>
    </details>
  );
}
