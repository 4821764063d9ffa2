import { useId, useMemo, useState } from "react";
import type { PoolView } from "../bindings";
import { describeReclaims, describeUsage, describeZone, formatHour, usageRows } from "../lib/usage";
import { Modal } from "./Modal";
import { UsageChart } from "./UsageChart";

type UsageDialogProps = {
  pool: string;
  /** The pool as the live view shows it now (null: no longer there): its usage follows. */
  view: PoolView | null;
  onClose: () => void;
};

/**
 * A managed pool's hourly usage over the seven days the broker keeps: the most members claimed
 * at once (bars) and the fewest free (a line) in each hour, in local time; and the same as a
 * table, for screen readers and keyboards, with the claims reclaimed each hour and why.
 */
export function UsageDialog({ pool, view, onClose }: UsageDialogProps) {
  const [asTable, setAsTable] = useState(false);
  const summaryId = useId();
  const tableId = useId();
  const usage = view?.usage;
  const rows = useMemo(() => (usage === undefined ? [] : usageRows(usage)), [usage]);
  const zone = rows.length === 0 ? "" : describeZone(rows[rows.length - 1].start.getTime());

  return (
    <Modal
      title={`Usage of pool ${pool}`}
      onClose={onClose}
      describedBy={summaryId}
      testId="usage-dialog"
      wide
    >
      {usage === undefined ? (
        <p id={summaryId} className="muted my-empty">
          The pool is no longer in the live view.
        </p>
      ) : rows.length === 0 ? (
        <p id={summaryId} className="muted my-empty" data-testid="usage-empty">
          No usage recorded yet: the broker records each hour while it runs.
        </p>
      ) : (
        <>
          <p id={summaryId} className="modal-text" data-testid="usage-summary">
            {describeUsage(rows)}. Each hour the broker recorded in the last seven days, in {zone}.
          </p>
          <ul className="usage-legend" aria-label="Legend">
            <li>
              <span className="usage-swatch usage-swatch-peak" aria-hidden="true" />
              Peak claimed: the most members claimed at once in the hour (bars)
            </li>
            <li>
              <span className="usage-swatch usage-swatch-free" aria-hidden="true" />
              Lowest free: the fewest members free at once in the hour (line)
            </li>
          </ul>
          <UsageChart buckets={usage} size="large" testId="usage-chart-large" />
          <div>
            <button
              type="button"
              className="btn btn-small"
              data-testid="usage-table-toggle"
              aria-expanded={asTable}
              aria-controls={asTable ? tableId : undefined}
              onClick={() => {
                setAsTable((shown) => !shown);
              }}
            >
              {asTable ? "Hide the table" : "Show as table"}
            </button>
          </div>
          {asTable ? (
            <div className="table-wrap usage-table-wrap" id={tableId}>
              <table className="members usage-table" data-testid="usage-table">
                <caption className="sr-only">
                  Usage of pool {pool} per hour, newest first, in {zone}
                </caption>
                <thead>
                  <tr>
                    <th scope="col">Hour</th>
                    <th scope="col">Peak claimed</th>
                    <th scope="col">Lowest free</th>
                    <th scope="col">Reclaims by why</th>
                  </tr>
                </thead>
                <tbody>
                  {[...rows].reverse().map((row) => (
                    <tr key={row.hour} data-hour={row.hour}>
                      <th scope="row" className="tabular">
                        <time dateTime={row.hour}>{formatHour(row.start.getTime())}</time>
                      </th>
                      <td className="tabular">{row.peak}</td>
                      <td className="tabular">{row.free}</td>
                      <td className="usage-reclaims">{describeReclaims(row.reclaims)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : null}
        </>
      )}
      <div className="modal-actions">
        <button type="button" className="btn" onClick={onClose}>
          Close
        </button>
      </div>
    </Modal>
  );
}
