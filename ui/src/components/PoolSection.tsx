import { useId } from "react";
import type { PoolView } from "../bindings/PoolView";
import { formatCounts, poolTestId } from "../lib/presentation";
import { MemberRow } from "./MemberRow";

type PoolSectionProps = {
  pool: PoolView;
  clockOffsetMs: number;
};

export function PoolSection({ pool, clockOffsetMs }: PoolSectionProps) {
  const headingId = useId();
  const { counts } = pool;
  const exhausted = counts.total > 0 && counts.free === 0;
  return (
    <section
      className="pool"
      data-testid={poolTestId(pool.namespace, pool.name)}
      aria-labelledby={headingId}
    >
      <div className="pool-head">
        <h2 id={headingId} className="pool-name">
          {pool.name}
        </h2>
        <span className="pool-ns mono">ns/{pool.namespace}</span>
        <span
          className={exhausted ? "pool-counts pool-exhausted" : "pool-counts"}
          title={exhausted ? "No member is free to claim" : undefined}
        >
          {formatCounts(counts)}
        </span>
      </div>
      <div className="table-wrap">
        <table className="members">
          <caption className="sr-only">
            Members of pool {pool.name} in namespace {pool.namespace}
          </caption>
          <colgroup>
            <col className="col-member" />
            <col className="col-state" />
            <col className="col-holder" />
            <col className="col-claimed" />
            <col className="col-lease" />
            <col className="col-power" />
          </colgroup>
          <thead>
            <tr>
              <th scope="col">Member</th>
              <th scope="col">State</th>
              <th scope="col">Holder</th>
              <th scope="col">Claimed at</th>
              <th scope="col">Lease expires</th>
              <th scope="col">Power</th>
            </tr>
          </thead>
          <tbody>
            {pool.members.length === 0 ? (
              <tr>
                <td colSpan={6} className="muted no-members">
                  This pool has no members.
                </td>
              </tr>
            ) : (
              pool.members.map((m) => (
                <MemberRow
                  key={`${m.namespace}/${m.name}`}
                  member={m}
                  clockOffsetMs={clockOffsetMs}
                />
              ))
            )}
          </tbody>
        </table>
      </div>
    </section>
  );
}
