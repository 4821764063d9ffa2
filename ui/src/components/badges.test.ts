import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import type { BrokerBadge as BrokerBadgeView } from "../bindings";
import { member } from "../lib/fixtures";
import { BrokerBadge } from "./Header";
import { StateBadge } from "./MemberCells";

const NOTICE =
  "no broker on this cluster: anyone who may claim here can open any desktop's console";

function broker(overrides: Partial<BrokerBadgeView>): BrokerBadgeView {
  return {
    status: {
      state: "running",
      leader: "broker-a",
      replicas: [],
      lastReconcile: null,
      summary: "a broker runs on this cluster: broker-a leads",
      refusing: null,
    },
    text: "broker: broker-a",
    detail: "a broker runs on this cluster: broker-a leads",
    notice: null,
    brokered: true,
    ...overrides,
  };
}

describe("BrokerBadge", () => {
  it("shows the core's words, its detail as the title and for screen readers", () => {
    const html = renderToStaticMarkup(createElement(BrokerBadge, { broker: broker({}) }));
    expect(html).toContain(">broker: broker-a</span>");
    expect(html).toContain("tone-green");
    expect(html).toContain('title="a broker runs on this cluster: broker-a leads"');
    expect(html).toContain('class="sr-only">a broker runs on this cluster: broker-a leads<');
  });

  it("says what no broker means", () => {
    const none = broker({
      status: {
        state: "absent",
        leader: null,
        replicas: [],
        lastReconcile: null,
        summary: "",
        refusing: null,
      },
      text: "no broker",
      detail: NOTICE,
      notice: NOTICE,
      brokered: false,
    });
    const html = renderToStaticMarkup(createElement(BrokerBadge, { broker: none }));
    expect(html).toContain(">no broker</span>");
    expect(html).toContain("tone-amber");
    expect(html).toContain(
      `title="no broker on this cluster: anyone who may claim here can open any desktop&#x27;s console"`,
    );
  });
});

describe("StateBadge", () => {
  it("shows the backend's note beside the state", () => {
    const reason = "no node has a free nvidia.com/GA102 for devpool-1";
    const granting = member("devpool-1", {
      state: "granting",
      stateLabel: "granting",
      claimable: false,
      holder: "alice",
      stateNote: reason,
    });
    const html = renderToStaticMarkup(createElement(StateBadge, { member: granting }));
    expect(html).toContain(">granting</span>");
    expect(html).toContain("tone-amber");
    expect(html).toContain(`data-testid="state-note-devpool-1" title="${reason}">${reason}</span>`);
  });

  it("shows nothing beside the state without a note", () => {
    const html = renderToStaticMarkup(createElement(StateBadge, { member: member("devpool-1") }));
    expect(html).not.toContain("state-note");
  });
});
