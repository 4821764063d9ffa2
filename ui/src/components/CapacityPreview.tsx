import type { CapacityPlan } from "../bindings";
import type { PreviewState } from "../useCapacity";
import { ActionError } from "./ActionNotice";
import { Working } from "./Working";

type CapacityPreviewProps = {
  state: PreviewState;
  id: string;
};

/**
 * The New pool dialog's live capacity preview: per node, free devices against what the pool
 * needs, and how many members fit. A check, not a reservation. Every sentence is the plan's own
 * (its `words`, written by the backend as the CLI prints them).
 */
export function CapacityPreview({ state, id }: CapacityPreviewProps) {
  if (state.kind === "idle") return null;
  // Input the backend calls invalid (a size out of range) is already said under the fields.
  if (state.kind === "failed" && state.error.kind === "invalid") return null;
  if (state.kind === "failed") {
    return (
      <div id={id} className="capacity-preview" data-testid="capacity-preview">
        <ActionError
          source="Checking GPU and host-device capacity"
          error={state.error}
          testId="capacity-error"
        />
      </div>
    );
  }
  const plan = state.kind === "ready" ? state.plan : state.last;
  if (plan === null) {
    return (
      <div id={id} className="capacity-preview" data-testid="capacity-preview" aria-busy="true">
        <p className="muted">
          <Working label="Checking GPU and host-device capacity…" />
        </p>
      </div>
    );
  }
  if (plan.needs.length === 0) {
    return (
      <p id={id} className="form-hint" data-testid="capacity-preview" data-admitted="true">
        {plan.words.verdict}
      </p>
    );
  }
  return (
    <div
      id={id}
      className="capacity-preview"
      data-testid="capacity-preview"
      data-admitted={plan.admitted ? "true" : "false"}
      aria-busy={state.kind === "checking" || undefined}
    >
      <p className="capacity-needs">{plan.words.needs}</p>
      <PlanTable plan={plan} />
      <p
        className={plan.admitted ? "form-preview" : "form-invalid"}
        data-testid="capacity-verdict"
        role="status"
      >
        {plan.words.verdict}
      </p>
      {plan.notes.map((note) => (
        <p key={note} className="form-hint" data-testid="capacity-note">
          {note}
        </p>
      ))}
      <p className="form-hint">{plan.words.caveat}</p>
    </div>
  );
}

/** A device resource's name and how KubeVirt hands it out: "nvidia.com/A10 (PCI passthrough)". */
export function ResourceName({ resource, classLabel }: { resource: string; classLabel: string }) {
  return (
    <>
      <span className="mono">{resource}</span> <span className="muted">({classLabel})</span>
    </>
  );
}

function PlanTable({ plan }: { plan: CapacityPlan }) {
  // With one resource, its name is in the line above: the table keeps to the numbers.
  const many = plan.needs.length > 1;
  return (
    <div className="table-wrap capacity-wrap">
      <table className="members capacity-table" data-testid="capacity-table">
        <caption className="sr-only">Free devices per node against what the pool needs</caption>
        <thead>
          <tr>
            <th scope="col">Node</th>
            {many ? <th scope="col">Resource</th> : null}
            <th scope="col" className="num">
              Allocatable
            </th>
            <th scope="col" className="num">
              Held
            </th>
            <th scope="col" className="num">
              Free
            </th>
            <th scope="col" className="num">
              Needed
            </th>
            <th scope="col" className="num">
              Members here
            </th>
          </tr>
        </thead>
        <tbody>
          {plan.nodes.flatMap((node) =>
            node.rows.map((row, i) => (
              <tr
                key={`${node.node}/${row.resource}`}
                data-testid="capacity-row"
                data-node={node.node}
                className={node.excluded === null ? undefined : "row-excluded"}
              >
                {i === 0 ? (
                  <th scope="row" rowSpan={node.rows.length} className="mono">
                    {node.node}
                    {node.excluded === null ? null : (
                      <span className="capacity-excluded">{node.excluded}</span>
                    )}
                  </th>
                ) : null}
                {many ? (
                  <td>
                    <ResourceName resource={row.resource} classLabel={row.classLabel} />
                  </td>
                ) : null}
                <td className="num">{row.allocatable}</td>
                <td className="num">{row.held}</td>
                <td className="num" data-testid="capacity-free">
                  {row.free}
                </td>
                <td className="num">{row.needed}</td>
                {i === 0 ? (
                  <td className="num" rowSpan={node.rows.length} data-testid="capacity-planned">
                    {node.planned}
                  </td>
                ) : null}
              </tr>
            )),
          )}
        </tbody>
      </table>
    </div>
  );
}
