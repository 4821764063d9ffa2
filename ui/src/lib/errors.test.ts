import { describe, expect, it } from "vitest";
import { errorTitle, toErrorView } from "./errors";

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
    expect(toErrorView("command open_session not found")).toEqual({
      kind: "other",
      message: "command open_session not found",
      suggestion: null,
      retryable: true,
    });
  });

  it("wraps an Error", () => {
    const view = toErrorView(new TypeError("window.__TAURI_INTERNALS__ is undefined"));
    expect(view.kind).toBe("other");
    expect(view.message).toBe("window.__TAURI_INTERNALS__ is undefined");
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
