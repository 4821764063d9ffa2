import { useState } from "react";
import type { Scope } from "../bindings";
import { poolCreateCommand } from "../lib/presentation";

type CopyState = "idle" | "copied" | "failed";

export function EmptyState({ scope }: { scope: Scope }) {
  const [copy, setCopy] = useState<CopyState>("idle");
  const command = poolCreateCommand(scope);
  const where =
    scope.kind === "namespace" ? (
      <>
        in namespace <span className="mono">{scope.namespace}</span>
      </>
    ) : (
      "in any namespace"
    );

  const onCopy = () => {
    navigator.clipboard.writeText(command).then(
      () => {
        setCopy("copied");
      },
      () => {
        setCopy("failed");
      },
    );
  };

  return (
    <div className="empty-state" data-testid="empty-state">
      <h2 className="empty-title">No pools {where}</h2>
      <p className="muted">
        A pool is a set of VirtualMachines labelled{" "}
        <span className="mono">corral.dev/vdi-pool</span>. Create one from a golden VM with New
        pool… above, or with the CLI:
      </p>
      <div className="command">
        <code>{command}</code>
        <button type="button" className="btn btn-small" onClick={onCopy}>
          {copy === "copied" ? "Copied" : "Copy"}
        </button>
      </div>
      {copy === "failed" ? (
        <p className="muted">Could not copy; select the command and copy it by hand.</p>
      ) : null}
      <p className="muted">It appears here as soon as it is created.</p>
    </div>
  );
}
