import { useId, useRef } from "react";
import type { ClusterCapacity } from "../bindings";
import { useClusterCapacity } from "../useCapacity";
import { ActionError } from "./ActionNotice";
import { ResourceName } from "./CapacityPreview";
import { Modal } from "./Modal";
import { Working } from "./Working";

type CapacityViewProps = {
  /** Changes when the cluster connection does (another cluster or identity): the watches start again. */
  cluster: unknown;
  onClose: () => void;
};

/**
 * The cluster's GPUs and host devices, live from watches: per node and resource, what the
 * node can hand out (allocatable), what is held and by which VMs (and pools), and what is
 * free. Every sentence is the view's own (written by the backend as the CLI prints it).
 */
export function CapacityView({ cluster, onClose }: CapacityViewProps) {
  const introId = useId();
  const closeRef = useRef<HTMLButtonElement>(null);
  const state = useClusterCapacity(cluster);

  let body;
  if (state.kind === "failed") {
    body = (
      <ActionError
        source="Watching the cluster's devices"
        error={state.error}
        testId="capacity-error"
      />
    );
  } else if (state.kind === "waiting" || state.snapshot.view === null) {
    const status = state.kind === "waiting" ? null : state.snapshot.status;
    body =
      status?.kind === "failing" ? (
        <ActionError
          source="Reading the cluster's devices"
          error={status.error}
          testId="capacity-error"
        />
      ) : (
        <p className="muted" aria-busy="true">
          <Working label="Reading the nodes and the desktops that run on them…" />
        </p>
      );
  } else {
    body = (
      <>
        {state.snapshot.status.kind === "failing" ? (
          <ActionError
            source="The Capacity view is not live (showing the last reading)"
            error={state.snapshot.status.error}
            testId="capacity-error"
          />
        ) : null}
        <CapacityTables view={state.snapshot.view} />
      </>
    );
  }

  return (
    <Modal
      title="GPU and host-device capacity"
      onClose={onClose}
      describedBy={introId}
      initialFocusRef={closeRef}
      testId="capacity-view"
      className="modal-sessions"
    >
      <p id={introId} className="modal-text muted">
        What each node can hand out (allocatable), what running desktops hold, and what is free.
        Live: it follows the nodes and the running desktops as they change.
      </p>
      {body}
      <div className="modal-actions">
        <button
          ref={closeRef}
          type="button"
          className="btn"
          data-testid="capacity-close"
          onClick={onClose}
        >
          Close
        </button>
      </div>
    </Modal>
  );
}

function CapacityTables({ view }: { view: ClusterCapacity }) {
  const empty = view.empty;
  return (
    <>
      {empty !== null ? (
        <p className="muted sessions-empty" data-testid="capacity-empty">
          {empty}
        </p>
      ) : (
        <>
          <ul className="capacity-totals" data-testid="capacity-totals">
            {view.totals.map((t) => (
              <li key={t.resource}>
                <ResourceName resource={t.resource} classLabel={t.classLabel} />: {t.text}
              </li>
            ))}
          </ul>
          <div className="table-wrap sessions-wrap">
            <table className="members capacity-table" data-testid="cluster-capacity-table">
              <caption className="sr-only">Devices per node and who holds them</caption>
              <thead>
                <tr>
                  <th scope="col">Node</th>
                  <th scope="col">Resource</th>
                  <th scope="col" className="num">
                    Allocatable
                  </th>
                  <th scope="col" className="num">
                    Held
                  </th>
                  <th scope="col" className="num">
                    Free
                  </th>
                  <th scope="col">Held by</th>
                </tr>
              </thead>
              <tbody>
                {view.nodes
                  .filter((n) => n.resources.length > 0)
                  .flatMap((node) => {
                    const condition = node.condition;
                    return node.resources.map((r, i) => (
                      <tr
                        key={`${node.node}/${r.resource}`}
                        data-testid="cluster-capacity-row"
                        data-node={node.node}
                        data-resource={r.resource}
                      >
                        {i === 0 ? (
                          <th scope="row" rowSpan={node.resources.length} className="mono">
                            {node.node}
                            {condition === null ? null : (
                              <span className="capacity-excluded">{condition}</span>
                            )}
                          </th>
                        ) : null}
                        <td>
                          <ResourceName resource={r.resource} classLabel={r.classLabel} />
                        </td>
                        <td className="num">
                          {r.allocatable}
                          {r.capacity !== null && r.capacity !== r.allocatable ? (
                            <span className="muted" title="Devices present (status.capacity)">
                              {" "}
                              of {r.capacity}
                            </span>
                          ) : null}
                        </td>
                        <td className="num" data-testid="cluster-capacity-held">
                          {r.held}
                        </td>
                        <td className="num" data-testid="cluster-capacity-free">
                          {r.free}
                        </td>
                        <td data-testid="cluster-capacity-holders">{r.holdersText}</td>
                      </tr>
                    ));
                  })}
              </tbody>
            </table>
          </div>
        </>
      )}
      {view.withoutDevices !== null && empty === null ? (
        <p className="form-hint">{view.withoutDevices}</p>
      ) : null}
      {view.notes.map((note) => (
        <p key={note} className="form-hint" data-testid="capacity-note">
          {note}
        </p>
      ))}
    </>
  );
}
