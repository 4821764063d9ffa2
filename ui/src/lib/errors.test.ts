import { describe, expect, it } from "vitest";
import { errorSeverity, errorTitle, toErrorView } from "./errors";

describe("toErrorView", () => {
  it("keeps an ErrorView from the backend", () => {
    const view = {
      kind: "forbidden",
      message: 'list VirtualMachines in namespace "x": forbidden',
      suggestion: "ask for the corral-vdi-viewer role",
      retryable: false,
    };
    expect(toErrorView(view)).toEqual(view);
  });

  it("fills missing optional fields", () => {
    expect(toErrorView({ kind: "timeout", message: "timed out" })).toEqual({
      kind: "timeout",
      message: "timed out",
      suggestion: null,
      retryable: false,
    });
  });

  it("wraps a plain string rejection", () => {
    expect(toErrorView("command connect_cluster not found")).toEqual({
      kind: "other",
      message: "command connect_cluster not found",
      suggestion: null,
      retryable: true,
    });
  });

  it("wraps an Error", () => {
    const view = toErrorView(new TypeError("window.__TAURI_INTERNALS__ is undefined"));
    expect(view.kind).toBe("other");
    expect(view.message).toBe("window.__TAURI_INTERNALS__ is undefined");
  });

  it("keeps the claim kinds refused and partial", () => {
    const refused = {
      kind: "refused",
      message: "legacy-3 is claimed by alice until 2026-01-01T10:00:00Z; only alice can release it",
      suggestion: "ask alice to release it",
      retryable: false,
    };
    expect(toErrorView(refused)).toEqual(refused);
    expect(toErrorView({ kind: "partial", message: "half done" }).kind).toBe("partial");
  });

  it("keeps the kind busy (someone else is viewing a console)", () => {
    const busy = {
      kind: "busy",
      message: "someone is viewing devpool-1's console",
      suggestion: "take over to disconnect them",
      retryable: true,
    };
    expect(toErrorView(busy)).toEqual(busy);
  });

  it("treats an unknown kind as other", () => {
    expect(toErrorView({ kind: "weird", message: "m" }).kind).toBe("other");
  });

  it("survives odd values", () => {
    expect(toErrorView(null).message).toBe("Unexpected error: null");
    expect(toErrorView(undefined).message).toBe("Unexpected error: undefined");
    expect(toErrorView(42).message).toBe("Unexpected error: 42");
    expect(toErrorView("").message).toBe("Unknown error");
  });
});

describe("errorTitle", () => {
  it("names the common failures", () => {
    expect(errorTitle("unreachable")).toBe("Cluster unreachable");
    expect(errorTitle("unauthorized")).toBe("Credentials refused");
    expect(errorTitle("forbidden")).toBe("Access denied");
  });

  it("names refusals and partial results", () => {
    expect(errorTitle("refused")).toBe("Refused");
    expect(errorTitle("partial")).toBe("Partly done");
  });
});

describe("errorSeverity", () => {
  it("shows refusals and partial results as warnings", () => {
    expect(errorSeverity("refused")).toBe("warning");
    expect(errorSeverity("partial")).toBe("warning");
  });

  it("shows a console in use as a warning", () => {
    expect(errorTitle("busy")).toBe("In use");
    expect(errorSeverity("busy")).toBe("warning");
  });

  it("shows other failures as errors", () => {
    expect(errorSeverity("forbidden")).toBe("error");
    expect(errorSeverity("invalid")).toBe("error");
    expect(errorSeverity("other")).toBe("error");
  });
});

describe("toErrorView with awkward values", () => {
  it("does not throw on values that cannot be printed", () => {
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(toErrorView(circular).kind).toBe("other");
    expect(toErrorView(Object.create(null)).message).toBe("Unexpected error: {}");
    expect(toErrorView(Symbol("x")).message).toBe("Unexpected error: Symbol(x)");
  });
});
