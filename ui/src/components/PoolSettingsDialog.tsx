import { useId, useState, type ReactNode, type SubmitEvent } from "react";
import { checkPoolSettings } from "../api";
import type {
  Allowed,
  ErrorView,
  PolicyCheck,
  PoolPolicy,
  PoolSettings,
  PoolView,
} from "../bindings";
import {
  describeGrowth,
  describeShrink,
  formOf,
  sameSettings,
  settingsOf,
  type SettingsForm,
} from "../lib/policy";
import { NEW_POOL_FIELD_LABELS } from "../lib/pools";
import { usePolicyCheck, usePoolPolicy } from "../usePoolSettings";
import { ActionError } from "./ActionNotice";
import { Modal } from "./Modal";
import { WhoMayUse } from "./WhoMayUse";
import { AssignmentChoices, DurationFields, PolicyInput, OnReleaseChoices } from "./PolicyFields";
import { Working } from "./Working";

type PoolSettingsDialogProps = {
  namespace: string;
  pool: string;
  /** The pool as the live view shows it now (null: no longer there). */
  view: PoolView | null;
  /** Whether you may change the settings and adopt (administrators); the reason when not. */
  manage: Allowed;
  /** Closes the dialog; `done` says what was written (for the window's notice). */
  onClose: (done?: string) => void;
};

/** The fields that can carry a problem, as the backend names them. */
type Field = "size" | "warm" | "disconnectGrace" | "maxSession" | "idleTimeout";

function ignore() {
  // Not while a write runs: its outcome is shown here.
}

/**
 * A pool's settings: who may use it (RBAC, for every pool), and its DesktopPool's size, warm
 * members, the three timeouts, what a release does and how members are assigned. The backend judges every value as it is typed (the broker's rules); a smaller
 * size asks first, naming the members it removes. An unmanaged pool offers Adopt instead.
 */
export function PoolSettingsDialog({
  namespace,
  pool,
  view,
  manage,
  onClose,
}: PoolSettingsDialogProps) {
  const { state, write, retry, save, adopt } = usePoolPolicy(namespace, pool);
  const introId = useId();
  const busy = write.kind === "running";
  const close = busy
    ? ignore
    : () => {
        onClose();
      };

  let body: ReactNode;
  if (state.kind === "loading") {
    body = (
      <p className="muted" aria-busy="true">
        <Working label={`Reading the settings of ${pool}…`} />
      </p>
    );
  } else if (state.kind === "failed") {
    body = (
      <>
        <ActionError source={`Reading the settings of ${pool}`} error={state.error} />
        <div className="modal-actions">
          <button type="button" className="btn" onClick={close}>
            Close
          </button>
          <button type="button" className="btn btn-primary" onClick={retry}>
            Try again
          </button>
        </div>
      </>
    );
  } else if (state.policy.settings === null) {
    body = (
      <Unmanaged
        pool={pool}
        manage={manage}
        busy={busy}
        error={write.kind === "failed" ? write.error : null}
        onAdopt={() => {
          void adopt();
        }}
        onClose={close}
      />
    );
  } else {
    body = (
      <SettingsForm
        // A new policy (adopted, or written) starts the fields again from it.
        key={JSON.stringify(state.policy.settings)}
        policy={state.policy}
        settings={state.policy.settings}
        view={view}
        manage={manage}
        busy={busy}
        error={write.kind === "failed" ? write.error : null}
        onSave={async (settings) => {
          if (await save(settings)) {
            onClose(`Settings of ${pool} saved: size ${settings.size}, warm ${settings.warm}.`);
          }
        }}
        onClose={close}
      />
    );
  }

  return (
    <Modal
      title={`Settings of pool ${pool}`}
      onClose={close}
      describedBy={introId}
      testId="pool-settings-dialog"
    >
      <p id={introId} className="modal-text">
        Pool <strong>{pool}</strong> in namespace <span className="mono">{namespace}</span>
        {state.kind === "loaded" ? (
          state.policy.settings === null ? (
            <> is unmanaged.</>
          ) : (
            <>
              {" "}
              is managed by the broker (DesktopPool, golden VM{" "}
              <span className="mono">{state.policy.golden}</span>).
            </>
          )
        ) : (
          "."
        )}
      </p>
      <WhoMayUse namespace={namespace} pool={pool} manage={manage} />
      {body}
    </Modal>
  );
}

function Unmanaged({
  pool,
  manage,
  busy,
  error,
  onAdopt,
  onClose,
}: {
  pool: string;
  manage: Allowed;
  busy: boolean;
  error: ErrorView | null;
  onAdopt: () => void;
  onClose: () => void;
}) {
  const reasonId = useId();
  return (
    <>
      <p className="modal-text" data-testid="settings-unmanaged">
        It has no DesktopPool, so it has no settings: the broker leaves it as it is (no resize, no
        warm members, no reclaim by policy). Adopt makes one with its current size, its golden VM
        and the defaults (nothing warm, a one-hour grace, no limits, keep on release).
      </p>
      {manage.allowed ? null : (
        <p id={reasonId} className="form-hint" data-testid="settings-adopt-denied">
          {manage.reason}
        </p>
      )}
      {error ? (
        <ActionError source={`Adopt ${pool}`} error={error} testId="settings-error" />
      ) : null}
      <div className="modal-actions">
        <button type="button" className="btn" disabled={busy} onClick={onClose}>
          Close
        </button>
        <button
          type="button"
          className="btn btn-primary"
          data-testid="settings-adopt"
          disabled={busy || !manage.allowed}
          aria-busy={busy || undefined}
          aria-describedby={manage.allowed ? undefined : reasonId}
          title={manage.reason ?? `Make ${pool} a managed pool`}
          onClick={onAdopt}
        >
          {busy ? <Working /> : "Adopt"}
        </button>
      </div>
    </>
  );
}

function SettingsForm({
  policy,
  settings,
  view,
  manage,
  busy,
  error,
  onSave,
  onClose,
}: {
  policy: PoolPolicy;
  settings: PoolSettings;
  view: PoolView | null;
  manage: Allowed;
  busy: boolean;
  error: ErrorView | null;
  onSave: (settings: PoolSettings) => Promise<void>;
  onClose: () => void;
}) {
  const ids = {
    size: useId(),
    warm: useId(),
    problem: useId(),
    readOnly: useId(),
  };
  const [form, setForm] = useState<SettingsForm>(() => formOf(settings));
  /** The shrink to confirm, with what it removes. */
  const [confirm, setConfirm] = useState<{ settings: PoolSettings; check: PolicyCheck } | null>(
    null,
  );
  const shaped = settingsOf(form);
  const wanted = shaped.ok ? shaped.settings : null;
  // The members of the pool as the live view shows them: a change asks again what a shrink
  // would remove.
  const revision = view?.members.map((m) => `${m.name}:${m.state}`).join(",") ?? "";
  const check = usePolicyCheck(policy.namespace, policy.pool, policy.golden, wanted, revision);
  const readOnly = !manage.allowed;

  const problem: { field: Field | null; message: string } | null = !shaped.ok
    ? shaped.problem
    : check?.problem
      ? {
          field: fieldOf(check.problem.field),
          message: `${fieldLabel(check.problem.field)}: ${check.problem.message}`,
        }
      : null;
  const unchanged = wanted !== null && sameSettings(wanted, settings);
  const blocker = readOnly
    ? manage.reason
    : problem !== null
      ? "Correct the value marked above."
      : unchanged
        ? "Nothing changed yet."
        : null;

  const set = (field: keyof SettingsForm) => (value: string) => {
    setForm((f) => ({ ...f, [field]: value }));
  };

  const submit = async (event: SubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy || blocker !== null || wanted === null) return;
    // Judge these very values (typing may have outrun the live check).
    const judged = await checkPoolSettings(
      policy.namespace,
      policy.pool,
      policy.golden ?? "",
      wanted,
    );
    if (!judged.ok || judged.value.problem !== null) return;
    if (judged.value.removed.length > 0 || judged.value.removedOnceReleased.length > 0) {
      setConfirm({ settings: wanted, check: judged.value });
      return;
    }
    await onSave(wanted);
  };

  if (confirm !== null) {
    return (
      <ConfirmShrink
        pool={policy.pool}
        settings={confirm.settings}
        check={confirm.check}
        busy={busy}
        error={error}
        onBack={() => {
          setConfirm(null);
        }}
        onConfirm={() => {
          void onSave(confirm.settings);
        }}
      />
    );
  }

  const invalid = (field: Field) => problem !== null && problem.field === field;
  const describedBy = (field: Field) => (invalid(field) ? ids.problem : undefined);

  return (
    <form
      className="modal-form"
      onSubmit={(event) => {
        void submit(event);
      }}
      noValidate
    >
      {policy.problem !== null ? (
        <p className="form-warning" data-testid="settings-policy-problem">
          As written on the cluster, this policy cannot be read: {policy.problem}. The broker leaves
          the pool as it is until it is corrected.
        </p>
      ) : null}
      {readOnly ? (
        <p id={ids.readOnly} className="form-hint" data-testid="settings-read-only">
          {manage.reason}
        </p>
      ) : null}
      <div className="form-row">
        <PolicyInput
          id={ids.size}
          label="Size (members)"
          testId="settings-size"
          value={form.size}
          readOnly={readOnly || busy}
          invalid={invalid("size")}
          describedBy={describedBy("size")}
          onChange={set("size")}
        />
        <PolicyInput
          id={ids.warm}
          label="Warm (kept running)"
          testId="settings-warm"
          value={form.warm}
          readOnly={readOnly || busy}
          invalid={invalid("warm")}
          describedBy={describedBy("warm")}
          onChange={set("warm")}
        />
      </div>
      <DurationFields
        testIdPrefix="settings"
        values={form}
        readOnly={readOnly || busy}
        invalid={invalid}
        describedBy={describedBy}
        onChange={(field, value) => {
          set(field)(value);
        }}
      />
      {/* Room kept for the problem whether or not there is one, so that the dialog keeps its
          height while the values are typed (the field it is about is marked invalid); without
          one, what a larger size adds. */}
      <div className="form-problem-slot">
        <p id={ids.problem} className="form-invalid" data-testid="settings-problem" role="alert">
          {problem?.message}
        </p>
        {problem === null && check !== null && check.added.length > 0 ? (
          <p className="form-preview" data-testid="settings-preview">
            {describeGrowth(check.added, policy.golden ?? "the golden VM")}
          </p>
        ) : null}
      </div>
      <OnReleaseChoices
        testIdPrefix="settings"
        value={form.onRelease}
        disabled={readOnly || busy}
        onChange={(onRelease) => {
          setForm((f) => ({ ...f, onRelease }));
        }}
      />
      <AssignmentChoices
        testIdPrefix="settings"
        value={form.assignment}
        disabled={readOnly || busy}
        onChange={(assignment) => {
          setForm((f) => ({ ...f, assignment }));
        }}
      />
      {error ? (
        <ActionError
          source={`Save settings of ${policy.pool}`}
          error={error}
          testId="settings-error"
        />
      ) : null}
      <div className="modal-actions">
        <span className="form-hint settings-blocker" data-testid="settings-blocked">
          {readOnly ? null : blocker}
        </span>
        <button type="button" className="btn" disabled={busy} onClick={onClose}>
          {readOnly ? "Close" : "Cancel"}
        </button>
        {readOnly ? null : (
          <button
            type="submit"
            className="btn btn-primary"
            data-testid="settings-save"
            disabled={busy || blocker !== null}
            aria-busy={busy || undefined}
            title={blocker ?? undefined}
          >
            {busy ? <Working /> : "Save"}
          </button>
        )}
      </div>
    </form>
  );
}

/** A spec field's name as the form's labels say it ("maxSession": "Max session"). */
function fieldLabel(name: string): string {
  return Object.entries(NEW_POOL_FIELD_LABELS).find(([field]) => field === name)?.[1] ?? name;
}

/** A field name from the backend, if it is one of the dialog's. */
function fieldOf(name: string): Field | null {
  const fields: readonly Field[] = ["size", "warm", "disconnectGrace", "maxSession", "idleTimeout"];
  return fields.find((f) => f === name) ?? null;
}

/** The shrink's confirmation: the members it removes, and that claimed ones never are. */
function ConfirmShrink({
  pool,
  settings,
  check,
  busy,
  error,
  onBack,
  onConfirm,
}: {
  pool: string;
  settings: PoolSettings;
  check: PolicyCheck;
  busy: boolean;
  error: ErrorView | null;
  onBack: () => void;
  onConfirm: () => void;
}) {
  const textId = useId();
  return (
    <div
      className="modal-form"
      data-testid="settings-confirm"
      role="group"
      aria-describedby={textId}
    >
      <p id={textId} className="form-warning">
        {describeShrink(pool, settings.size, check.removed, check.removedOnceReleased)}
      </p>
      {check.removed.length + check.removedOnceReleased.length > 0 ? (
        <ul className="delete-list" data-testid="settings-removed">
          {check.removed.map((name) => (
            <li key={name} className="delete-member" data-testid={`settings-removed-${name}`}>
              <span className="mono">{name}</span> <span className="muted">now</span>
            </li>
          ))}
          {check.removedOnceReleased.map((name) => (
            <li key={name} className="delete-member" data-testid={`settings-removed-later-${name}`}>
              <span className="mono">{name}</span> <span className="muted">once released</span>
            </li>
          ))}
        </ul>
      ) : null}
      {error ? (
        <ActionError source={`Resize ${pool}`} error={error} testId="settings-error" />
      ) : null}
      <div className="modal-actions">
        {/* Focus moves here from the Save button the form had. */}
        <button type="button" className="btn" disabled={busy} onClick={onBack} autoFocus>
          Back
        </button>
        <button
          type="button"
          className="btn btn-danger"
          data-testid="settings-confirm-submit"
          disabled={busy}
          aria-busy={busy || undefined}
          onClick={onConfirm}
        >
          {busy ? <Working /> : `Resize to ${settings.size} and save`}
        </button>
      </div>
    </div>
  );
}
