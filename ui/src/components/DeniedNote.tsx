import type { Permissions } from "../bindings";
import { deniedActions } from "../lib/claims";

/**
 * The pool actions the identity may not take in a namespace, each with the cluster's reason,
 * in words next to the disabled buttons (a disabled button shows no tooltip).
 */
export function DeniedNote({ permissions }: { permissions: Permissions | null }) {
  const denied = permissions === null ? [] : deniedActions(permissions);
  if (denied.length === 0) {
    return null;
  }
  return (
    <ul className="denied-note" data-testid="denied-note" aria-label="Actions you may not take">
      {denied.map((d) => (
        <li key={d.action}>
          <strong>{d.action}</strong> is off: {d.reason}
        </li>
      ))}
    </ul>
  );
}
