/**
 * The page's own tooltips in place of the platform's. WebKitGTK shows an element's `title` in a
 * native tooltip that stays where it is until the pointer moves again: over the dialog a click
 * just opened, for one. Here, while the pointer is over an element with a `title`, the title is
 * held aside (so the platform has none to show; see HeldTitle) and shown in a tooltip of the
 * page's, which goes at the first click, key or scroll; the title is put back when the pointer
 * leaves.
 */

/** How long the pointer rests on an element before its tooltip shows, in milliseconds. */
export const TOOLTIP_DELAY_MS = 600;

/** Gap between the element and its tooltip, in pixels. */
const GAP = 6;

/**
 * Where a tooltip of `size` goes for an element at `anchor` in a viewport of `viewport`: below
 * it, or above when there is no room below; its left edge at the element's, kept inside the
 * viewport.
 */
export function tooltipPlace(
  anchor: { left: number; top: number; bottom: number },
  size: { width: number; height: number },
  viewport: { width: number; height: number },
): { left: number; top: number } {
  const below = anchor.bottom + GAP;
  const top =
    below + size.height <= viewport.height ? below : Math.max(0, anchor.top - GAP - size.height);
  const left = Math.max(0, Math.min(anchor.left, viewport.width - size.width - 4));
  return { left, top };
}

/**
 * An element's title held aside while the pointer rests on it. The page (React) may set or
 * remove the title meanwhile: those writes land here instead of on the element (through the
 * element's own `setAttribute` and `removeAttribute`, which the page calls), so the title put
 * back is the page's latest, or none.
 */
class HeldTitle {
  readonly element: Element;
  text: string | null;

  constructor(element: Element) {
    this.element = element;
    this.text = element.getAttribute("title");
    element.removeAttribute("title");
    const proto = Element.prototype;
    Object.assign(element, {
      setAttribute: (name: string, value: string) => {
        if (name === "title") this.text = value;
        else proto.setAttribute.call(element, name, value);
      },
      removeAttribute: (name: string) => {
        if (name === "title") this.text = null;
        else proto.removeAttribute.call(element, name);
      },
    });
  }

  /** Gives the element its own methods and the page's latest title back. */
  release() {
    const element = this.element as Partial<Pick<Element, "setAttribute" | "removeAttribute">>;
    delete element.setAttribute;
    delete element.removeAttribute;
    if (this.text !== null) this.element.setAttribute("title", this.text);
  }
}

/** Starts the page's tooltips in `doc`; returns what stops them. */
export function installTooltips(doc: Document): () => void {
  const tip = doc.createElement("div");
  tip.className = "app-tooltip";
  tip.setAttribute("role", "tooltip");
  tip.setAttribute("data-testid", "app-tooltip");
  tip.hidden = true;
  doc.body.appendChild(tip);

  let held: HeldTitle | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;

  const hide = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    tip.hidden = true;
  };
  const release = () => {
    hide();
    held?.release();
    held = null;
  };
  const show = (title: HeldTitle) => {
    const text = title.text ?? "";
    if (text.trim() === "" || !title.element.isConnected) return;
    tip.textContent = text;
    tip.hidden = false;
    const rect = title.element.getBoundingClientRect();
    const place = tooltipPlace(
      rect,
      { width: tip.offsetWidth, height: tip.offsetHeight },
      { width: doc.documentElement.clientWidth, height: doc.documentElement.clientHeight },
    );
    tip.style.left = `${place.left}px`;
    tip.style.top = `${place.top}px`;
  };

  const onOver = (event: Event) => {
    const over = event.target instanceof Element ? event.target : null;
    // Still within the element held: nothing changes.
    if (held !== null && over !== null && held.element.contains(over)) return;
    // Anywhere else (a mouseout missed over a disabled control included): give it back.
    release();
    const target = over?.closest("[title]") ?? null;
    if (target === null || (target.getAttribute("title") ?? "") === "") return;
    const title = new HeldTitle(target);
    held = title;
    timer = setTimeout(() => {
      show(title);
    }, TOOLTIP_DELAY_MS);
  };
  const onOut = (event: Event) => {
    if (held === null) return;
    const to = (event as MouseEvent).relatedTarget;
    if (to instanceof Node && held.element.contains(to)) return;
    release();
  };

  doc.addEventListener("mouseover", onOver, true);
  doc.addEventListener("mouseout", onOut, true);
  doc.addEventListener("pointerdown", hide, true);
  doc.addEventListener("keydown", hide, true);
  doc.addEventListener("scroll", hide, true);
  return () => {
    release();
    doc.removeEventListener("mouseover", onOver, true);
    doc.removeEventListener("mouseout", onOut, true);
    doc.removeEventListener("pointerdown", hide, true);
    doc.removeEventListener("keydown", hide, true);
    doc.removeEventListener("scroll", hide, true);
    tip.remove();
  };
}
