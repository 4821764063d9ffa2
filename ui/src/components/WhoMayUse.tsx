import { useId, useState, type SubmitEvent } from "react";
import type { Allowed, Entitlement, Reach, WhoInput } from "../bindings";
import { usePoolEntitlements } from "../usePoolEntitlements";
import { ActionError } from "./ActionNotice";
import { Working } from "./Working";

type Kind = WhoInput["kind"];

const REACH_WORDS: Record<Reach, string> = {
  pool: "this pool",
  namespace: "every pool of the namespace",
  cluster: "every pool of the cluster",
};

const KIND_WORDS: Record<Kind, string> = {
  group: "Group",
  user: "User",
  everyone: "Everyone",
};

/** Whom the add form names, or why it names nobody yet. */
function whoOf(kind: Kind, name: string): WhoInput | null {
  if (kind === "everyone") return { kind };
  const trimmed = name.trim();
  return trimmed === "" ? null : { kind, name: trimmed };
}

/**
 * "Who may use this pool" in a pool's settings: every RBAC grant of the right to claim from it
 * (users, groups, service accounts, everyone; by the pool's name, for every pool of the
 * namespace, or cluster-wide), with who granted it; an administrator adds a user or a group (a
 * RoleBinding of the pool's name) and takes back the grants this product wrote. A change applies
 * at once: claims running go on, the next claim is judged by it.
 */
export function WhoMayUse({
  namespace,
  pool,
  manage,
}: {
  namespace: string;
  pool: string;
  /** Whether you may change who may use it (administrators); the reason when not. */
  manage: Allowed;
}) {
  const { state, change, apply } = usePoolEntitlements(namespace, pool);
  const ids = { heading: useId(), hint: useId(), kind: useId(), name: useId() };
  const [kind, setKind] = useState<Kind>("group");
  const [name, setName] = useState("");
  const busy = change.kind === "running";
  const who = whoOf(kind, name);

  const submit = async (event: SubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy || who === null) return;
    if (await apply(who, false)) setName("");
  };

  return (
    <section className="who-may-use" aria-labelledby={ids.heading} data-testid="who-may-use">
      <h3 id={ids.heading} className="section-heading">
        Who may use this pool
      </h3>
      <p id={ids.hint} className="form-hint">
        RBAC&apos;s <span className="mono">claim</span> on{" "}
        <span className="mono">desktoppools</span> with the pool&apos;s name, so your identity
        provider&apos;s groups work as they are. A change applies at once; claims running go on.
      </p>
      {state.kind === "loading" ? (
        <p className="muted" aria-busy="true">
          <Working label={`Reading who may use ${pool}…`} />
        </p>
      ) : state.kind === "failed" ? (
        <ActionError
          source={`Reading who may use ${pool}`}
          error={state.error}
          testId="entitlements-error"
        />
      ) : state.read.entitlements.length === 0 ? (
        <p className="modal-text" data-testid="entitlements-empty">
          Nobody may claim from {pool} yet: add a group, a user or everyone.
        </p>
      ) : (
        <table className="entitlements" data-testid="entitlements">
          <thead>
            <tr>
              <th scope="col">Who</th>
              <th scope="col">Reaches</th>
              <th scope="col">Granted by</th>
              <th scope="col">
                <span className="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {state.read.entitlements.map((e) => (
              <EntitlementRow
                key={`${e.via}\u0000${e.kind}\u0000${e.name}`}
                entitlement={e}
                pool={pool}
                disabled={busy || !manage.allowed}
                onRevoke={(w) => {
                  void apply(w, true);
                }}
              />
            ))}
          </tbody>
        </table>
      )}
      {state.kind === "loaded" && !state.read.complete ? (
        <p className="form-hint" data-testid="entitlements-incomplete">
          The cluster-wide grants (ClusterRoleBindings) could not be read: some who may claim are
          not listed.
        </p>
      ) : null}
      {manage.allowed ? (
        <form
          className="entitle-form"
          aria-describedby={ids.hint}
          onSubmit={(event) => {
            void submit(event);
          }}
          noValidate
        >
          <label htmlFor={ids.kind} className="sr-only">
            Whom to add
          </label>
          <select
            id={ids.kind}
            data-testid="entitle-kind"
            value={kind}
            disabled={busy}
            onChange={(event) => {
              setKind(event.target.value as Kind);
            }}
          >
            {(Object.keys(KIND_WORDS) as Kind[]).map((k) => (
              <option key={k} value={k}>
                {KIND_WORDS[k]}
              </option>
            ))}
          </select>
          <label htmlFor={ids.name} className="sr-only">
            {kind === "group" ? "Group name" : "User name"}
          </label>
          <input
            id={ids.name}
            data-testid="entitle-name"
            className="mono"
            value={kind === "everyone" ? "" : name}
            placeholder={
              kind === "group"
                ? "engineering"
                : kind === "user"
                  ? "alice or system:serviceaccount:ns:name"
                  : "everyone who may claim here"
            }
            disabled={busy || kind === "everyone"}
            autoComplete="off"
            spellCheck={false}
            onChange={(event) => {
              setName(event.target.value);
            }}
          />
          <button
            type="submit"
            className="btn"
            data-testid="entitle-add"
            disabled={busy || who === null}
            aria-busy={busy || undefined}
            title={who === null ? `Type the ${kind}'s name first` : undefined}
          >
            {busy ? <Working /> : "Add"}
          </button>
        </form>
      ) : (
        <p className="form-hint" data-testid="entitlements-read-only">
          {manage.reason}
        </p>
      )}
      {change.kind === "failed" ? (
        <ActionError
          source={`Change who may use ${pool}`}
          error={change.error}
          testId="entitle-error"
        />
      ) : change.kind === "done" ? (
        <p className="form-preview" role="status" data-testid="entitle-done">
          {change.said.join("; ")}.
        </p>
      ) : null}
    </section>
  );
}

function EntitlementRow({
  entitlement,
  pool,
  disabled,
  onRevoke,
}: {
  entitlement: Entitlement;
  pool: string;
  disabled: boolean;
  onRevoke: (who: WhoInput) => void;
}) {
  const { who, reach, via, grantedBy, revoke } = entitlement;
  return (
    <tr data-testid="entitlement" data-reach={reach}>
      <td>{who}</td>
      <td title={via}>{REACH_WORDS[reach]}</td>
      <td className="muted">{grantedBy ?? via}</td>
      <td>
        {revoke !== null ? (
          <button
            type="button"
            className="btn btn-small"
            data-testid="entitle-remove"
            disabled={disabled}
            aria-label={`Take back ${pool} from ${who}`}
            onClick={() => {
              onRevoke(revoke);
            }}
          >
            Remove
          </button>
        ) : (
          <span className="muted" title={`Granted by ${via}: changed where it was made`}>
            —
          </span>
        )}
      </td>
    </tr>
  );
}
