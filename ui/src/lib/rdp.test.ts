import { describe, expect, it } from "vitest";
import {
  IRON_ERROR,
  describeRdpFailure,
  desktopSizeFor,
  fitBox,
  ironFacts,
  isLoginRefused,
} from "./rdp";

describe("ironFacts", () => {
  it("reads an IronError's kind, first backtrace line and RDCleanPath details", () => {
    const error = {
      kind: () => IRON_ERROR.rdCleanPath,
      backtrace: () => "proxy said no\n  at somewhere",
      rdcleanpathDetails: () => ({ httpStatusCode: 403 }),
    };
    expect(ironFacts(error)).toEqual({
      kind: IRON_ERROR.rdCleanPath,
      text: "proxy said no",
      httpStatus: 403,
      wsaError: undefined,
      tlsAlert: undefined,
    });
  });

  it("reads anything else as a general error with its message", () => {
    expect(ironFacts(new Error("boom"))).toEqual({ kind: IRON_ERROR.general, text: "boom" });
    expect(ironFacts("plain")).toEqual({ kind: IRON_ERROR.general, text: "plain" });
    // An error of another realm (the RDP frame's) is no instance of this one's Error.
    const foreign = Object.create(null) as { message: string };
    foreign.message = "from the frame";
    expect(ironFacts(foreign)).toEqual({ kind: IRON_ERROR.general, text: "from the frame" });
  });
});

describe("describeRdpFailure", () => {
  it("names the member and asks again for a refused login", () => {
    const facts = { kind: IRON_ERROR.wrongPassword, text: "" };
    expect(isLoginRefused(facts)).toBe(true);
    expect(describeRdpFailure("d-1", facts, null)).toContain(
      "d-1 refused the user name or password",
    );
  });

  it("prefers the proxy's own reason for an RDCleanPath error", () => {
    const facts = { kind: IRON_ERROR.rdCleanPath, text: "", tlsAlert: 42 };
    expect(describeRdpFailure("d-1", facts, "the RDP certificate of d-1 changed")).toBe(
      "the RDP certificate of d-1 changed.",
    );
    expect(describeRdpFailure("d-1", facts, null)).toContain("certificate");
    expect(
      describeRdpFailure("d-1", { kind: IRON_ERROR.rdCleanPath, text: "", wsaError: 10061 }, null),
    ).toContain("port 3389 of d-1");
    expect(isLoginRefused(facts)).toBe(false);
  });
});

describe("desktopSizeFor", () => {
  it("keeps sizes within 200..8192 with an even width", () => {
    expect(desktopSizeFor(1001.7, 700.2)).toEqual({ width: 1000, height: 700 });
    expect(desktopSizeFor(50, 50)).toEqual({ width: 200, height: 200 });
    expect(desktopSizeFor(10000, 9000)).toEqual({ width: 8192, height: 8192 });
  });
});

describe("fitBox", () => {
  it("keeps the picture's aspect inside the stage, letterboxed", () => {
    // The shadow server's 1024×768 in a 1280×715 stage: height-bound, bars at the sides.
    expect(fitBox(1024, 768, 1280, 715)).toEqual({ width: 953, height: 715 });
    // A wide stage's twin: width-bound.
    expect(fitBox(1024, 768, 800, 900)).toEqual({ width: 800, height: 600 });
    expect(fitBox(1280, 715, 1280, 715)).toEqual({ width: 1280, height: 715 });
    expect(fitBox(0, 768, 1280, 715)).toEqual({ width: 0, height: 0 });
  });
});
