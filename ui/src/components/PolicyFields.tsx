/**
 * The fields of a pool's policy, shared by the settings dialog and New pool (on a cluster with a
 * broker): warm members, the three durations and what a release does. Input only: the backend
 * judges the values.
 */
import { useId } from "react";
import type { Assignment, OnRelease } from "../bindings";
import { ASSIGNMENT_CHOICES, ON_RELEASE_CHOICES } from "../lib/policy";

/** The three durations' fields, in the order shown. */
const DURATION_FIELDS: {
  field: DurationName;
  label: string;
  placeholder: string;
  title: string;
  /** The field's test id after its dialog's prefix (`settings-grace`). */
  testSuffix: string;
}[] = [
  {
    field: "disconnectGrace",
    label: "Disconnect grace",
    placeholder: "1h (default)",
    title:
      "How long a claim lasts after its user's last session closed (the claim Lease's duration; the app renews it while a session is open)",
    testSuffix: "grace",
  },
  {
    field: "maxSession",
    label: "Max session",
    placeholder: "no limit",
    title: "The longest a claim lasts from the moment it was taken; Keep does not extend it",
    testSuffix: "max-session",
  },
  {
    field: "idleTimeout",
    label: "Idle timeout",
    placeholder: "never",
    title:
      "How long the desktop may have no logged-in user (its guest agent says) before it is reclaimed",
    testSuffix: "idle",
  },
];

/** A policy field: a whole number, or a duration (`90s`, `15m`, `1h30m`; empty: the default). */
export function PolicyInput(props: {
  id: string;
  label: string;
  testId: string;
  value: string;
  readOnly: boolean;
  invalid: boolean;
  describedBy: string | undefined;
  onChange: (value: string) => void;
  /** A duration's placeholder and explanation; absent for a whole number. */
  duration?: { placeholder: string; title: string };
}) {
  const duration = props.duration;
  return (
    <div className="form-field">
      <label htmlFor={props.id} title={duration?.title}>
        {props.label}
      </label>
      <input
        id={props.id}
        type={duration ? "text" : "number"}
        className={duration ? "user-input duration-input" : "number-input"}
        data-testid={props.testId}
        value={props.value}
        min={duration ? undefined : 0}
        step={duration ? undefined : 1}
        placeholder={duration?.placeholder}
        title={duration?.title}
        readOnly={props.readOnly}
        spellCheck={false}
        autoCapitalize="off"
        autoCorrect="off"
        autoComplete="off"
        aria-invalid={props.invalid || undefined}
        aria-describedby={props.describedBy}
        onChange={(e) => {
          props.onChange(e.target.value);
        }}
      />
    </div>
  );
}

/** Which of the three durations. */
export type DurationName = "disconnectGrace" | "maxSession" | "idleTimeout";

/** The three durations with the line that says how they are written, in one row. */
export function DurationFields(props: {
  /** Test ids are `<prefix>-grace`, `<prefix>-max-session`, `<prefix>-idle`. */
  testIdPrefix: string;
  values: Record<DurationName, string>;
  readOnly: boolean;
  /** Whether the field carries the problem shown. */
  invalid: (field: DurationName) => boolean;
  /** The id of the text that describes the field, if any. */
  describedBy: (field: DurationName) => string | undefined;
  onChange: (field: DurationName, value: string) => void;
}) {
  const ids: Record<DurationName, string> = {
    disconnectGrace: useId(),
    maxSession: useId(),
    idleTimeout: useId(),
  };
  return (
    <>
      <p className="form-hint">
        Durations are written like 90s, 15m or 1h30m; an empty field is the default.
      </p>
      <div className="form-row">
        {DURATION_FIELDS.map((d) => (
          <PolicyInput
            key={d.field}
            id={ids[d.field]}
            label={d.label}
            duration={{ placeholder: d.placeholder, title: d.title }}
            testId={`${props.testIdPrefix}-${d.testSuffix}`}
            value={props.values[d.field]}
            readOnly={props.readOnly}
            invalid={props.invalid(d.field)}
            describedBy={props.describedBy(d.field)}
            onChange={(value) => {
              props.onChange(d.field, value);
            }}
          />
        ))}
      </div>
    </>
  );
}

/** One radio per choice, each with its one-line explanation, under `legend`. */
function Choices<T extends string>(props: {
  legend: string;
  choices: readonly { value: T; label: string; explain: string }[];
  /** Test ids are `<testIdPrefix>-<choice>`. */
  testIdPrefix: string;
  value: T;
  disabled: boolean;
  onChange: (value: T) => void;
}) {
  const name = useId();
  return (
    <fieldset className="form-field settings-on-release" disabled={props.disabled}>
      <legend>{props.legend}</legend>
      {props.choices.map((choice) => (
        <label key={choice.value} className="radio-choice">
          <input
            type="radio"
            name={name}
            value={choice.value}
            data-testid={`${props.testIdPrefix}-${choice.value}`}
            checked={props.value === choice.value}
            onChange={() => {
              props.onChange(choice.value);
            }}
          />
          <span>
            <strong>{choice.label}</strong> <span className="muted">{choice.explain}</span>
          </span>
        </label>
      ))}
    </fieldset>
  );
}

/** What a release does. */
export function OnReleaseChoices(props: {
  /** Test ids are `<prefix>-on-release-<choice>`. */
  testIdPrefix: string;
  value: OnRelease;
  disabled: boolean;
  onChange: (value: OnRelease) => void;
}) {
  return (
    <Choices
      legend="On release"
      choices={ON_RELEASE_CHOICES}
      {...props}
      testIdPrefix={`${props.testIdPrefix}-on-release`}
    />
  );
}

/** How members are handed out: floating or dedicated. */
export function AssignmentChoices(props: {
  /** Test ids are `<prefix>-assignment-<choice>`. */
  testIdPrefix: string;
  value: Assignment;
  disabled: boolean;
  onChange: (value: Assignment) => void;
}) {
  return (
    <Choices
      legend="Assignment"
      choices={ASSIGNMENT_CHOICES}
      {...props}
      testIdPrefix={`${props.testIdPrefix}-assignment`}
    />
  );
}
