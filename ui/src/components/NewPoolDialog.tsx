import { useId, useRef, useState, type SubmitEvent } from "react";
import { validateNewPool } from "../api";
import type { NewPool, NewPoolField, NewPoolProblem, PoolView } from "../bindings";
import {
  NEW_POOL_FIELD_LABELS,
  chooseGolden,
  createBlocker,
  describeMembersToCreate,
  goldenOptionLabel,
  newPoolProblems,
  parseWholeNumber,
  poolExists,
} from "../lib/pools";
import { DEFAULT_POLICY_FORM, NO_POLICY, policyChangesOf, type PolicyForm } from "../lib/policy";
import { usePoolCapacity } from "../useCapacity";
import { useCreatePool, useGoldenCandidates, usePoolValidation } from "../useNewPool";
import { ActionError } from "./ActionNotice";
import { CapacityPreview } from "./CapacityPreview";
import { CreateProgressView } from "./CreateProgressView";
import { PowerBadge } from "./MemberCells";
import { Modal } from "./Modal";
import { AssignmentChoices, DurationFields, PolicyInput, OnReleaseChoices } from "./PolicyFields";
import { Working } from "./Working";

const DEFAULT_SIZE = "3";
const DEFAULT_TIMEOUT_SECONDS = "120";

type NewPoolDialogProps = {
  /** Where the pool is created: the namespace of the golden VM. */
  namespace: string;
  /** The pools of the current snapshot, to warn about a name already taken. */
  pools: readonly PoolView[];
  /**
   * Whether the cluster has a broker: then the pool is managed (a DesktopPool, as the CLI's
   * `pool create` makes) and the dialog asks for its policy too.
   */
  managed: boolean;
  onClose: () => void;
};

function ignore() {
  // A create cannot be stopped half-way: the dialog stays until it ends.
}

/** The policy of `form` with warm set to 0: judged while warm is no whole number. */
function policyChangesOrDefaultWarm(form: PolicyForm) {
  const without = policyChangesOf({ ...form, warm: "0" });
  return without.ok ? without.changes : NO_POLICY;
}

/**
 * "New pool": clones a golden VM of the namespace into `<name>-1` … `<name>-<N>`. The backend
 * validates the input as it is typed (the CLI's rules) and judges the request; once sent, the
 * dialog shows the create's progress and outcome and cannot be dismissed until it ends.
 */
export function NewPoolDialog({ namespace, pools, managed, onClose }: NewPoolDialogProps) {
  const { state: candidates, retry } = useGoldenCandidates(namespace);
  const { state: create, start, cleanUp } = useCreatePool();
  const nameRef = useRef<HTMLInputElement>(null);
  const goldenId = useId();
  const goldenInfoId = useId();
  const nameId = useId();
  const sizeId = useId();
  const timeoutId = useId();
  const checkId = useId();
  const blockerId = useId();
  const introId = useId();
  const capacityId = useId();
  const warmId = useId();

  const [goldenName, setGoldenName] = useState<string | null>(null);
  const [allowRunning, setAllowRunning] = useState(false);
  const [name, setName] = useState("");
  const [sizeText, setSizeText] = useState(DEFAULT_SIZE);
  const [timeoutText, setTimeoutText] = useState(DEFAULT_TIMEOUT_SECONDS);
  const [policyForm, setPolicyForm] = useState<PolicyForm>(DEFAULT_POLICY_FORM);

  const list = candidates.kind === "loaded" ? candidates.candidates : [];
  const golden = chooseGolden(list, goldenName);
  const size = parseWholeNumber(sizeText, "size");
  const timeout = parseWholeNumber(timeoutText, "timeout");
  const policy = managed ? policyChangesOf(policyForm) : { ok: true as const, changes: NO_POLICY };
  // Values that are no whole number, each on its field; the backend judges the rest.
  const shape: NewPoolProblem[] = [
    ...(size.ok ? [] : [{ field: "size" as const, message: size.problem }]),
    ...(timeout.ok ? [] : [{ field: "timeout" as const, message: timeout.problem }]),
    ...(policy.ok ? [] : [{ field: "warm" as const, message: policy.problem }]),
  ];

  const chosen = golden?.name ?? null;
  const allow = golden !== null && golden.running && allowRunning;
  const sizeValue = size.ok ? size.value : null;
  // What the backend judges: the input, with a stand-in for a value that is no number (its
  // own problem is shown from here), so that every other field is judged at once.
  const judged: NewPool | null =
    chosen === null || name.trim() === ""
      ? null
      : {
          namespace,
          name,
          golden: chosen,
          size: sizeValue ?? 1,
          allowRunning: allow,
          timeoutSeconds: timeout.ok ? timeout.value : Number(DEFAULT_TIMEOUT_SECONDS),
          policy: policy.ok ? policy.changes : policyChangesOrDefaultWarm(policyForm),
        };
  // What Create sends: the input itself, once every value is a number.
  const request = shape.length === 0 ? judged : null;
  // Once sent, the input is the backend's to judge: no more live checks.
  const validation = usePoolValidation(create.kind === "idle" ? judged : null);
  // The capacity preview follows the golden VM and size, and every pools snapshot (members
  // that start or stop take or free devices).
  const capacity = usePoolCapacity(
    create.kind === "idle" && chosen !== null && sizeValue !== null && sizeValue >= 1
      ? { namespace, golden: chosen, size: sizeValue }
      : null,
    pools,
  );

  const running = create.kind === "running";
  if (create.kind !== "idle") {
    return (
      <Modal
        title={`New pool in ${namespace}`}
        onClose={running ? ignore : onClose}
        testId="new-pool-dialog"
        wide
      >
        <CreateProgressView
          state={create}
          onClose={onClose}
          onCleanUp={(timeout) => {
            void cleanUp(timeout);
          }}
        />
      </Modal>
    );
  }

  // The backend's verdict on the current input (or, while it is being checked, on the
  // previous one), and every problem with its field.
  const check =
    validation.kind === "judged"
      ? validation.check
      : validation.kind === "checking"
        ? validation.last
        : null;
  const problems = newPoolProblems(shape, check?.problems ?? null);
  const invalid = (field: NewPoolField) => problems.some((p) => p.field === field);
  // A name the list shows taken is refused here rather than by the server (which refuses it
  // too, and also what this list has not seen yet).
  const nameTaken = name !== "" && poolExists(pools, namespace, name);
  let blocker: string | null;
  if (candidates.kind === "loading") {
    blocker = "Waiting for the list of VMs to clone.";
  } else if (candidates.kind === "failed") {
    blocker = "The VMs to clone could not be listed.";
  } else if (list.length === 0) {
    blocker = `There is no VM to clone in namespace ${namespace}.`;
  } else {
    blocker = createBlocker({
      golden,
      allowRunning: allow,
      name,
      problems: problems.length,
    });
    if (blocker === null && validation.kind === "failed") {
      blocker = validation.error.message;
    }
    if (blocker === null && nameTaken) {
      blocker = `Choose a name no pool in namespace ${namespace} has.`;
    }
    if (blocker === null && capacity.kind === "ready") {
      blocker = capacity.plan.words.fix;
    }
  }
  const members = problems.length === 0 ? (check?.members ?? []) : [];

  const submit = async (event: SubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (blocker !== null || request === null) return;
    let sent = members;
    if (validation.kind !== "judged") {
      // Typed faster than the debounce: check this very input before sending it.
      const checked = await validateNewPool(request);
      // The live validation shows why in a moment.
      if (!checked.ok || checked.value.problems.length > 0) return;
      sent = checked.value.members;
    }
    void start(request, sent);
  };

  const describedBy = (field: NewPoolField) =>
    invalid(field) || (field === "name" && nameTaken) ? checkId : undefined;

  return (
    <Modal
      title={`New pool in ${namespace}`}
      onClose={onClose}
      initialFocusRef={nameRef}
      describedBy={introId}
      testId="new-pool-dialog"
      wide
    >
      <form
        className="modal-form"
        onSubmit={(event) => {
          void submit(event);
        }}
        noValidate
      >
        <p id={introId} className="modal-text">
          Clones a golden VM of namespace <span className="mono">{namespace}</span> into the members
          of a new pool. The members start stopped and unassigned.
          {managed
            ? " The cluster's broker keeps the pool at its size and runs the policy below (its DesktopPool)."
            : null}
        </p>

        <div className="form-field">
          <label htmlFor={goldenId}>Golden VM</label>
          <select
            id={goldenId}
            className="golden-select"
            data-testid="golden-select"
            value={golden?.name ?? ""}
            disabled={list.length === 0}
            aria-describedby={goldenInfoId}
            onChange={(e) => {
              setGoldenName(e.target.value);
              setAllowRunning(false);
            }}
          >
            {list.length === 0 ? (
              <option value="">
                {candidates.kind === "loading" ? "Loading…" : "No VM to clone"}
              </option>
            ) : (
              list.map((c) => (
                <option key={c.name} value={c.name}>
                  {goldenOptionLabel(c)}
                </option>
              ))
            )}
          </select>
          <div id={goldenInfoId} className="golden-info">
            {candidates.kind === "loading" ? (
              <p className="muted" data-testid="golden-loading" aria-busy="true">
                <Working label={`Listing the VMs of namespace ${namespace}…`} />
              </p>
            ) : candidates.kind === "failed" ? (
              <div className="golden-failed">
                <ActionError
                  source={`Listing VMs in ${namespace}`}
                  error={candidates.error}
                  testId="golden-error"
                />
                <button
                  type="button"
                  className="btn btn-small"
                  data-testid="golden-retry"
                  onClick={retry}
                >
                  Try again
                </button>
              </div>
            ) : list.length === 0 ? (
              <p className="form-hint" data-testid="golden-empty">
                No VMs in namespace {namespace} to clone
              </p>
            ) : golden !== null ? (
              <>
                <p className="golden-power" data-testid="golden-power">
                  <PowerBadge power={golden.power} />
                  <span className="muted">
                    {golden.running
                      ? "Not stopped: its disks would be copied while in use."
                      : "Stopped: its disks can be copied consistently."}
                  </span>
                </p>
                {golden.problems.length > 0 ? (
                  <ul className="form-warnings" data-testid="golden-problems">
                    {golden.problems.map((problem) => (
                      <li key={problem} className="form-warning" data-testid="golden-problem">
                        {problem}
                      </li>
                    ))}
                  </ul>
                ) : null}
              </>
            ) : null}
          </div>
          {golden?.running ? (
            <label className="checkbox checkbox-wrap">
              <input
                type="checkbox"
                data-testid="allow-running"
                checked={allowRunning}
                onChange={(e) => {
                  setAllowRunning(e.target.checked);
                }}
              />
              Clone it anyway (its disks will be crash-consistent only)
            </label>
          ) : null}
        </div>

        <div className="form-field">
          <label htmlFor={nameId}>Pool name</label>
          <input
            ref={nameRef}
            id={nameId}
            type="text"
            className="user-input"
            data-testid="pool-name"
            value={name}
            aria-invalid={invalid("name") || nameTaken || undefined}
            aria-describedby={describedBy("name")}
            spellCheck={false}
            autoCapitalize="off"
            autoCorrect="off"
            autoComplete="off"
            placeholder="e.g. devpool"
            onChange={(e) => {
              setName(e.target.value);
            }}
          />
        </div>
        <div className="form-row">
          <div className="form-field">
            <label htmlFor={sizeId}>Size (members)</label>
            <input
              id={sizeId}
              type="number"
              className="number-input"
              data-testid="pool-size"
              value={sizeText}
              min={1}
              max={500}
              step={1}
              aria-invalid={invalid("size") || undefined}
              aria-describedby={describedBy("size")}
              onChange={(e) => {
                setSizeText(e.target.value);
              }}
            />
          </div>
          <div className="form-field">
            <label htmlFor={timeoutId}>Clone timeout (seconds)</label>
            <input
              id={timeoutId}
              type="number"
              className="number-input"
              data-testid="pool-timeout"
              value={timeoutText}
              min={1}
              step={1}
              aria-invalid={invalid("timeout") || undefined}
              aria-describedby={describedBy("timeout")}
              onChange={(e) => {
                setTimeoutText(e.target.value);
              }}
            />
          </div>
        </div>
        {managed ? (
          <>
            <div className="form-row">
              <PolicyInput
                id={warmId}
                label="Warm (kept running)"
                testId="new-pool-warm"
                value={policyForm.warm}
                readOnly={false}
                invalid={invalid("warm")}
                describedBy={describedBy("warm")}
                onChange={(warm) => {
                  setPolicyForm((f) => ({ ...f, warm }));
                }}
              />
            </div>
            <DurationFields
              testIdPrefix="new-pool"
              values={policyForm}
              readOnly={false}
              invalid={invalid}
              describedBy={describedBy}
              onChange={(field, value) => {
                setPolicyForm((f) => ({ ...f, [field]: value }));
              }}
            />
            <OnReleaseChoices
              testIdPrefix="new-pool"
              value={policyForm.onRelease}
              disabled={false}
              onChange={(onRelease) => {
                setPolicyForm((f) => ({ ...f, onRelease }));
              }}
            />
            <AssignmentChoices
              testIdPrefix="new-pool"
              value={policyForm.assignment}
              disabled={false}
              onChange={(assignment) => {
                setPolicyForm((f) => ({ ...f, assignment }));
              }}
            />
          </>
        ) : null}
        <div id={checkId} className="form-check" aria-live="polite">
          {nameTaken ? (
            <p className="form-warning" data-testid="new-pool-exists">
              A pool named {name} already exists in namespace {namespace}: a create would be
              refused.
            </p>
          ) : null}
          {problems.length > 0 ? (
            <ul className="form-problems" data-testid="new-pool-problems">
              {problems.map((p) => (
                <li
                  key={`${p.field}:${p.message}`}
                  className="form-invalid"
                  data-testid="new-pool-invalid"
                  data-field={p.field}
                >
                  {NEW_POOL_FIELD_LABELS[p.field]}: {p.message}
                </li>
              ))}
            </ul>
          ) : members.length > 0 ? (
            <p
              className={blocker === null ? "form-preview" : "form-hint"}
              data-testid="new-pool-preview"
            >
              {describeMembersToCreate(members, blocker === null)}
            </p>
          ) : null}
        </div>

        <CapacityPreview state={capacity} id={capacityId} />

        {blocker !== null ? (
          <p id={blockerId} className="form-hint" data-testid="create-blocked">
            {blocker}
          </p>
        ) : null}
        <div className="modal-actions">
          <button type="button" className="btn" onClick={onClose}>
            Cancel
          </button>
          <button
            type="submit"
            className="btn btn-primary"
            data-testid="create-submit"
            disabled={blocker !== null}
            aria-describedby={blocker !== null ? blockerId : undefined}
            title={blocker ?? undefined}
          >
            Create
          </button>
        </div>
      </form>
    </Modal>
  );
}
