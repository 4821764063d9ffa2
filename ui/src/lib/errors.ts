import type { ErrorKind, ErrorView } from "../bindings";

const ERROR_KINDS: readonly ErrorKind[] = [
  "invalid",
  "config",
  "unreachable",
  "unauthorized",
  "forbidden",
  "notFound",
  "conflict",
  "timeout",
  "refused",
  "busy",
  "partial",
  "other",
];

function isErrorKind(value: unknown): value is ErrorKind {
  return typeof value === "string" && (ERROR_KINDS as readonly string[]).includes(value);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/**
 * Turns whatever a rejected `invoke` (or `listen`) gave us into an ErrorView.
 *
 * The backend rejects with an ErrorView object, but Tauri itself rejects with a plain string
 * (unknown command, bad arguments), and outside the app `invoke` throws a TypeError; none of
 * those may break the screen.
 */
export function toErrorView(reason: unknown): ErrorView {
  if (isRecord(reason) && typeof reason.message === "string") {
    if (isErrorKind(reason.kind)) {
      return {
        kind: reason.kind,
        message: reason.message,
        suggestion: typeof reason.suggestion === "string" ? reason.suggestion : null,
        retryable: typeof reason.retryable === "boolean" ? reason.retryable : false,
      };
    }
    // An Error, or an object of some other shape that still has a message.
    return {
      kind: "other",
      message: reason.message || "Unknown error",
      suggestion: null,
      retryable: true,
    };
  }
  if (typeof reason === "string") {
    return { kind: "other", message: reason || "Unknown error", suggestion: null, retryable: true };
  }
  return {
    kind: "other",
    message: `Unexpected error: ${describeValue(reason)}`,
    suggestion: null,
    retryable: true,
  };
}

function describeValue(value: unknown): string {
  try {
    // JSON.stringify gives undefined for undefined, functions and symbols.
    const json = JSON.stringify(value) as string | undefined;
    if (json !== undefined) {
      return json;
    }
  } catch {
    // Circular or BigInt-holding values cannot be serialised; fall through.
  }
  try {
    return String(value);
  } catch {
    return "unprintable value";
  }
}

/** A short headline for a banner, by kind of failure. */
export function errorTitle(kind: ErrorKind): string {
  switch (kind) {
    case "invalid":
      return "Invalid input";
    case "config":
      return "Kubeconfig problem";
    case "unreachable":
      return "Cluster unreachable";
    case "unauthorized":
      return "Credentials refused";
    case "forbidden":
      return "Access denied";
    case "notFound":
      return "Not found";
    case "conflict":
      return "Conflict";
    case "timeout":
      return "Timed out";
    case "refused":
      return "Refused";
    case "busy":
      return "In use";
    case "partial":
      return "Partly done";
    case "other":
      return "Error";
  }
}

/**
 * How loudly to show an error: a refusal (a claim rule said no, nothing changed), a busy
 * console (someone else is viewing it) and a partial result (a state the rules allow was left)
 * are warnings; everything else is an error.
 */
export function errorSeverity(kind: ErrorKind): "error" | "warning" {
  switch (kind) {
    case "refused":
    case "busy":
    case "partial":
      return "warning";
    case "invalid":
    case "config":
    case "unreachable":
    case "unauthorized":
    case "forbidden":
    case "notFound":
    case "conflict":
    case "timeout":
    case "other":
      return "error";
  }
}
