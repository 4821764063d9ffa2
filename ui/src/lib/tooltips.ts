/**
 * The page's own tooltips in place of the platform's. WebKitGTK shows an element's `title` in a
 * native tooltip that stays where it is until the pointer moves again: over the dialog a click
 * just opened, for one. Here, while the pointer is over an element with a `title`, the title is
 * held aside (so the platform has none to show) and shown in a tooltip of the page's, which goes
 * at the first click, key or scroll; the title is put back when the pointer leaves.
 */

/** How long the pointer rests on an element before its tooltip shows, in milliseconds. */
export const TOOLTIP_DELAY_MS = 600;

/** The attribute a hovered element's title is held in. */
const HELD = "data-held-title";

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

/** Starts the page's tooltips in `doc`; returns what stops them. */
export function installTooltips(doc: Document): () => void {
  const tip = doc.createElement("div");
  tip.className = "app-tooltip";
  tip.setAttribute("role", "tooltip");
  tip.setAttribute("data-testid", "app-tooltip");
  tip.hidden = true;
  doc.body.appendChild(tip);

  let hovered: Element | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;

  const hide = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    tip.hidden = true;
  };
  const release = () => {
    hide();
    if (hovered === null) return;
    const held = hovered.getAttribute(HELD);
    hovered.removeAttribute(HELD);
    // A title the page set meanwhile is newer than the one held.
    if (held !== null && !hovered.hasAttribute("title")) hovered.setAttribute("title", held);
    hovered = null;
  };
  const show = (element: Element) => {
    const text = element.getAttribute(HELD) ?? "";
    if (text.trim() === "" || !element.isConnected) return;
    tip.textContent = text;
    tip.hidden = false;
    const rect = element.getBoundingClientRect();
    const place = tooltipPlace(
      rect,
      { width: tip.offsetWidth, height: tip.offsetHeight },
      { width: doc.documentElement.clientWidth, height: doc.documentElement.clientHeight },
    );
    tip.style.left = `${place.left}px`;
    tip.style.top = `${place.top}px`;
  };

  const onOver = (event: Event) => {
    const target =
      event.target instanceof Element ? event.target.closest(`[title],[${HELD}]`) : null;
    if (target === hovered || target === null) return;
    release();
    const title = target.getAttribute("title") ?? "";
    if (title === "") return;
    hovered = target;
    target.setAttribute(HELD, title);
    target.removeAttribute("title");
    timer = setTimeout(() => {
      show(target);
    }, TOOLTIP_DELAY_MS);
  };
  const onOut = (event: Event) => {
    if (hovered === null) return;
    const to = (event as MouseEvent).relatedTarget;
    if (to instanceof Node && hovered.contains(to)) return;
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
