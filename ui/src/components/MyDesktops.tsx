import { useCallback, useId, useState } from "react";
import type {
  ClaimProgress,
  Identity,
  MemberView,
  Permissions,
  PoolView,
  Scope,
} from "../bindings";
import {
  actionKeys,
  chooseClaimPool,
  claimablePools,
  getDesktopBlocker,
  myDesktops,
  type MyDesktop,
  type PoolChoice,
} from "../lib/claims";
import { describeScope } from "../lib/presentation";
import { LeaseCell, PowerBadge, StateBadge } from "./MemberCells";
import { ConnectButton, MemberName } from "./MemberRow";
import { ReclaimCountdown, ReclaimNotice } from "./ReclaimNotice";
import { PoolPicker } from "./PoolPicker";
import { Working } from "./Working";
import { useEntitled } from "../useEntitled";

type MyDesktopsProps = {
  /** Who the cluster says you are; null when it could not say. */
  identity: Identity | null;
  pools: readonly PoolView[];
  scope: Scope;
  clockOffsetMs: number;
  /** Keys of the actions running now (see actionKeys). */
  running: ReadonlySet<string>;
  /** The step of a claim the cluster's broker is finishing, while one runs. */
  claimProgress: ClaimProgress | null;
  onClaim: (choice: PoolChoice) => void;
  onRelease: (member: MemberView, force: boolean) => void;
  /** Opens the Connect dialog for a member. */
  onConnect: (member: MemberView) => void;
  /** Keep on a reclaim notice: renews your claim of a member. */
  onKeep: (member: MemberView) => void;
  /** Opens a member's history. */
  onHistory: (member: MemberView) => void;
  /** What you may do in a namespace; null until known. */
  permissionsFor: (namespace: string) => Permissions | null;
  /** Why you may not claim here (RBAC), or null. */
  claimDenied: string | null;
  /** The first full list has not arrived: say so instead of "no desktop". */
  loading: boolean;
  /**
   * The feed fails and nothing was received (a refused cluster-wide list, an unreachable
   * cluster): nothing is known about your desktops, so say that instead of "no desktop".
   */
  unreadable: boolean;
};

/** What the pool box holds: nothing picked yet (the first pool on offer), a pool, or none. */
type Pick =
  | { kind: "default" }
  | { kind: "pool"; choice: PoolChoice }
  /** `query`: what was typed, which matched no pool ("" when the box was emptied). */
  | { kind: "none"; query: string };

/**
 * Why a usable pool box offers nothing to claim. (With nothing picked the first pool on offer
 * is, so a box with pools never lacks one by default.)
 */
function describeNoPick(pick: Exclude<Pick, { kind: "default" }>): string {
  switch (pick.kind) {
    case "pool":
      return `Pool ${pick.choice.pool} has no free member now: pick another pool.`;
    case "none":
      return pick.query.trim() === ""
        ? "Type a pool's name, or pick one from the list."
        : `No pool with a free member matches “${pick.query.trim()}”: type a pool's name and pick it from the list.`;
  }
}

/** What Get a desktop will do with `chosen`, given the desktops you hold. */
function claimSentence(chosen: PoolChoice, mine: readonly MyDesktop[]): string {
  const held = mine.find((d) => d.namespace === chosen.namespace && d.pool === chosen.pool);
  return held !== undefined
    ? `You hold ${held.member.name} in ${chosen.pool}: Get a desktop gives you that one again.`
    : `Get a desktop claims a free member of ${chosen.pool} for you and starts its VM.`;
}

/** The members you hold, and "Get a desktop". */
export function MyDesktops({
  identity,
  pools,
  scope,
  clockOffsetMs,
  running,
  claimProgress,
  onClaim,
  onRelease,
  onConnect,
  onKeep,
  onHistory,
  permissionsFor,
  claimDenied,
  loading,
  unreadable,
}: MyDesktopsProps) {
  const headingId = useId();
  const pickerId = useId();
  const lineId = useId();
  // What was picked in the pool box: nothing yet (the first pool on offer is shown), a pool,
  // or none (what was typed matched no pool, or nothing was typed).
  const [pick, setPick] = useState<Pick>({ kind: "default" });
  // While a pool's name is being typed: what Enter (or leaving the box) would take, so that
  // the note and the button follow the typing instead of the pick it is replacing.
  const [typing, setTyping] = useState<Pick | null>(null);
  const current = typing ?? pick;
  const onTyping = useCallback((preview: { choice: PoolChoice | null; query: string } | null) => {
    setTyping(
      preview === null
        ? null
        : preview.choice === null
          ? { kind: "none", query: preview.query }
          : { kind: "pool", choice: preview.choice },
    );
  }, []);

  const username = identity?.username ?? null;
  const mine = myDesktops(pools, username);
  const entitled = useEntitled(pools, username);
  const choices = claimablePools(pools, entitled);
  const withheld = claimablePools(pools).length - choices.length;
  const chosen =
    current.kind === "none"
      ? null
      : chooseClaimPool(choices, current.kind === "pool" ? current.choice.key : null);
  // The first pool shown by default stays picked: a pool created or freed later, sorted
  // before it, does not change the box under the user (set while rendering, React's way of
  // adjusting state to what was just shown).
  // Only once the pools you may claim from are known: a pool offered before that answer, and
  // not for you, would stay picked and read as full.
  if (current.kind === "default" && chosen !== null && entitled !== null) {
    setPick({ kind: "pool", choice: chosen });
  }
  // The pool picked has just lost its last free member to you: that is a success, not a
  // problem to warn about; the pool being full is said only to those still asking.
  const heldInPick =
    current.kind === "pool" && chosen === null
      ? (mine.find(
          (d) => d.namespace === current.choice.namespace && d.pool === current.choice.pool,
        ) ?? null)
      : null;
  const blocker = loading
    ? "Waiting for the pools to load."
    : unreadable
      ? "The pools could not be read, so none can be offered."
      : (claimDenied ??
        (heldInPick !== null && choices.length === 0
          ? null
          : getDesktopBlocker(username !== null, choices, scope, withheld)));
  // Why the pool box, usable, offers nothing to claim: a claim goes to the pool picked or to
  // none, never to another in its place.
  const pickNote =
    blocker !== null || chosen !== null || current.kind === "default" || heldInPick !== null
      ? null
      : describeNoPick(current);
  const claiming = running.has(actionKeys.claim);
  const disabled = blocker !== null || chosen === null || claiming;
  const why = blocker ?? pickNote;
  // The line under the head always holds one sentence (why Get a desktop cannot be used, or
  // what it will do), so that a note coming or going never moves the page.
  // While Get a desktop waits for the broker, the line says what it waits for.
  const step = claiming && claimProgress !== null ? claimProgress.message : null;
  const line =
    step ??
    why ??
    (chosen !== null
      ? claimSentence(chosen, mine)
      : heldInPick !== null
        ? `You hold ${heldInPick.member.name} of ${heldInPick.pool} (below). To get another desktop, pick a pool.`
        : "");

  return (
    <section
      className="my-desktops"
      data-testid="my-desktops"
      data-entitlements={entitled === null ? "unknown" : "known"}
      aria-labelledby={headingId}
    >
      <div className="my-head">
        <h2 id={headingId} className="my-title">
          My desktops
        </h2>
        <span className="muted my-who">
          {username !== null ? (
            <>
              as <span className="mono">{username}</span> in {describeScope(scope)}
            </>
          ) : (
            "identity unknown"
          )}
        </span>
        <form
          className="get-desktop"
          aria-label="Get a desktop"
          onSubmit={(event) => {
            event.preventDefault();
            if (!disabled) onClaim(chosen);
          }}
        >
          <label htmlFor={pickerId}>Pool</label>
          <PoolPicker
            id={pickerId}
            choices={choices}
            chosen={chosen}
            onChoose={(choice, query) => {
              setTyping(null);
              setPick(choice === null ? { kind: "none", query } : { kind: "pool", choice });
            }}
            onTyping={onTyping}
            // Not while claiming: a keyboard user's focus stays where it was.
            disabled={blocker !== null}
            describedBy={why !== null ? lineId : undefined}
            placeholder={
              loading
                ? "Loading pools…"
                : unreadable
                  ? "Pools could not be read"
                  : "No pool with a free member"
            }
          />
          <button
            type="submit"
            className="btn btn-primary"
            data-testid="get-desktop-submit"
            disabled={disabled}
            aria-busy={claiming || undefined}
            aria-describedby={line !== "" ? lineId : undefined}
            title={line !== "" ? line : undefined}
          >
            {claiming ? <Working /> : "Get a desktop"}
          </button>
        </form>
      </div>
      <p
        id={lineId}
        className={why !== null && step === null ? "my-line my-blocker" : "my-line muted"}
        data-testid={
          step !== null
            ? "claim-progress"
            : why !== null
              ? "get-desktop-blocked"
              : "get-desktop-line"
        }
        role={step !== null ? "status" : undefined}
        title={line}
      >
        {line}
      </p>
      {username === null ? (
        <p className="muted my-empty">Without your identity, your desktops cannot be listed.</p>
      ) : loading ? (
        <p className="muted my-empty" aria-busy="true">
          Loading your desktops…
        </p>
      ) : unreadable ? (
        <p className="muted my-empty" data-testid="my-desktops-unreadable">
          Your desktops cannot be listed until the pools can be read.
        </p>
      ) : mine.length === 0 ? (
        <p className="muted my-empty" data-testid="my-desktops-empty">
          You have no desktop in {describeScope(scope)}.
        </p>
      ) : (
        <div className="table-wrap">
          {mine.map(({ member }) => (
            <ReclaimNotice
              key={`${member.namespace}/${member.name}`}
              member={member}
              clockOffsetMs={clockOffsetMs}
              keeping={running.has(actionKeys.keep(member.namespace, member.name))}
              onKeep={onKeep}
            />
          ))}
          <table className="members my-table">
            <caption className="sr-only">Desktops held by {username}</caption>
            <colgroup>
              <col className="col-my-member" />
              <col className="col-my-pool" />
              <col className="col-my-state" />
              <col className="col-my-power" />
              <col className="col-my-lease" />
              <col className="col-my-actions" />
            </colgroup>
            <thead>
              <tr>
                <th scope="col">Member</th>
                <th scope="col">Pool</th>
                <th scope="col">State</th>
                <th scope="col">Power</th>
                <th scope="col">Ends</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {mine.map(({ namespace, pool, member }) => {
                const releasing = running.has(actionKeys.release(member.namespace, member.name));
                return (
                  <tr
                    key={`${member.namespace}/${member.name}`}
                    data-testid={`my-desktop-${member.name}`}
                  >
                    <th scope="row" className="cell-member">
                      <MemberName
                        member={member}
                        onHistory={onHistory}
                        history={permissionsFor(member.namespace)?.history ?? null}
                      />
                    </th>
                    <td>
                      <span className="truncate" title={`${namespace}/${pool}`}>
                        {pool} <span className="muted mono">ns/{namespace}</span>
                      </span>
                    </td>
                    <td>
                      <StateBadge member={member} />
                    </td>
                    <td>
                      <PowerBadge power={member.power} />
                    </td>
                    <td>
                      {member.reclaimAt !== null ? (
                        <ReclaimCountdown member={member} clockOffsetMs={clockOffsetMs} />
                      ) : (
                        <LeaseCell
                          lease={member.lease}
                          removing={member.state === "removing"}
                          clockOffsetMs={clockOffsetMs}
                        />
                      )}
                    </td>
                    <td className="cell-actions">
                      <ConnectButton member={member} onConnect={onConnect} />
                      <button
                        type="button"
                        className="btn btn-small"
                        data-testid={`release-${member.name}`}
                        disabled={releasing}
                        aria-busy={releasing || undefined}
                        aria-label={releasing ? undefined : `Release ${member.name}`}
                        title={`Give ${member.name} back to the pool: ${member.onRelease.words}`}
                        onClick={() => {
                          onRelease(member, false);
                        }}
                      >
                        {releasing ? <Working /> : "Release…"}
                      </button>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
