import { useCallback, useEffect, useId, useRef, useState, type CSSProperties } from "react";
import { matchClaimPools, POOL_MATCHES_SHOWN, type PoolChoice } from "../lib/claims";

type PoolPickerProps = {
  /** The `id` of the text box, for its `<label>`. */
  id: string;
  /** The pools on offer, in order. */
  choices: readonly PoolChoice[];
  /** The pool chosen now, shown while nothing is being typed; null when none is. */
  chosen: PoolChoice | null;
  /**
   * A pool was picked, or what was typed (`query`) matched none or was nothing (null; `query`
   * is "" when a pool was picked from the list).
   */
  onChoose: (choice: PoolChoice | null, query: string) => void;
  /**
   * While a pool's name is typed: the pool Enter or leaving the box would take now (null:
   * none) with what was typed; null once the typing ends (taken or abandoned).
   */
  onTyping: (preview: { choice: PoolChoice | null; query: string } | null) => void;
  disabled: boolean;
  /** Shown in the empty box when no pool is offered ("Loading pools…"). */
  placeholder: string;
  /** `aria-describedby` of the box (why it is disabled). */
  describedBy?: string;
};

/** Where the list opens: under the box, right edges aligned, inside the window. */
function popupPlace(box: HTMLElement): CSSProperties {
  const rect = box.getBoundingClientRect();
  return {
    top: rect.bottom + 2,
    right: document.documentElement.clientWidth - rect.right,
    minWidth: rect.width,
  };
}

/**
 * "Get a desktop"'s pool: a text box that filters the pools on offer as you type (by name or
 * namespace, `matchClaimPools`), with the matches in a list under it (the ARIA combobox
 * pattern with a listbox popup). At 1,000 pools a plain `<select>` is a long scroll and costs
 * the first layout a thousand options; this lists at most POOL_MATCHES_SHOWN (so the list never
 * scrolls) and says how many more there are, and only while open.
 *
 * Keyboard: typing or ↓ opens the list (at the chosen pool), ↑/↓ move through it, Enter takes
 * the highlighted pool (the form's submit is Enter on a closed list), Escape closes it and
 * restores the chosen pool's name. Leaving the box after typing takes the highlighted pool, or
 * none when nothing matched: a claim never goes to a pool hidden behind what was typed.
 */
export function PoolPicker({
  id,
  choices,
  chosen,
  onChoose,
  onTyping,
  disabled,
  placeholder,
  describedBy,
}: PoolPickerProps) {
  const listId = useId();
  const optionId = useId();
  const boxRef = useRef<HTMLInputElement>(null);
  // What is typed; null while the box shows the chosen pool.
  const [query, setQuery] = useState<string | null>(null);
  const [open, setOpen] = useState(false);
  const [active, setActive] = useState(0);
  const [place, setPlace] = useState<CSSProperties>({});

  // A box disabled while its list is open (the pools stopped being readable, say) shows none.
  const shownOpen = open && !disabled;
  const matches = shownOpen ? matchClaimPools(choices, query ?? "") : [];
  const shown = matches.slice(0, POOL_MATCHES_SHOWN);
  const activeIndex = Math.min(active, shown.length - 1);

  const close = useCallback(() => {
    setOpen(false);
    setQuery(null);
    onTyping(null);
  }, [onTyping]);

  // The list is fixed to the window (the section around the box clips what overflows it): it
  // is placed from the box as it opens (openAt), and closed when the page scrolls or resizes.
  // (The list itself never scrolls: it shows at most POOL_MATCHES_SHOWN.)
  useEffect(() => {
    if (!shownOpen) return;
    window.addEventListener("scroll", close, true);
    window.addEventListener("resize", close);
    return () => {
      window.removeEventListener("scroll", close, true);
      window.removeEventListener("resize", close);
    };
  }, [shownOpen, close]);

  const take = (choice: PoolChoice | null) => {
    onChoose(choice, choice === null ? (query ?? "") : "");
    close();
  };
  // Moves the highlight while typing, and says what it would take.
  const highlight = (index: number, typed: string | null, among: readonly PoolChoice[]) => {
    setActive(index);
    if (typed !== null) onTyping({ choice: index >= 0 ? among[index] : null, query: typed });
  };
  const openAt = (index: number) => {
    if (!shownOpen && boxRef.current !== null) setPlace(popupPlace(boxRef.current));
    setOpen(true);
    setActive(index);
  };
  // The list opened without typing starts at the chosen pool (when it is among those shown).
  const openAtChosen = () => {
    openAt(
      Math.max(
        0,
        choices.slice(0, POOL_MATCHES_SHOWN).findIndex((c) => c.key === chosen?.key),
      ),
    );
  };

  return (
    <div className="pool-picker">
      <input
        ref={boxRef}
        id={id}
        type="text"
        role="combobox"
        data-testid="get-desktop-pool"
        className="pool-picker-box"
        autoComplete="off"
        spellCheck={false}
        value={query ?? chosen?.label ?? ""}
        placeholder={choices.length === 0 ? placeholder : "Type to find a pool"}
        disabled={disabled}
        aria-describedby={describedBy}
        aria-autocomplete="list"
        aria-expanded={shownOpen}
        aria-controls={listId}
        aria-activedescendant={
          shownOpen && activeIndex >= 0 ? `${optionId}-${activeIndex}` : undefined
        }
        onChange={(e) => {
          const typed = e.target.value;
          const found = matchClaimPools(choices, typed).slice(0, POOL_MATCHES_SHOWN);
          setQuery(typed);
          openAt(0);
          // An emptied box highlights nothing: it lists the pools to pick from.
          highlight(typed.trim() === "" || found.length === 0 ? -1 : 0, typed, found);
        }}
        onClick={(e) => {
          if (shownOpen) return;
          // Typing replaces the chosen pool's name instead of adding to it (the click has
          // just put the caret somewhere in it).
          if (query === null) e.currentTarget.select();
          openAtChosen();
        }}
        onFocus={(e) => {
          e.target.select();
        }}
        onBlur={() => {
          if (query !== null && shownOpen) {
            take(activeIndex >= 0 ? shown[activeIndex] : null);
          } else {
            close();
          }
        }}
        onKeyDown={(e) => {
          if (e.key === "ArrowDown" || e.key === "ArrowUp") {
            e.preventDefault();
            if (!shownOpen) {
              openAtChosen();
            } else if (shown.length > 0) {
              const next =
                activeIndex < 0
                  ? e.key === "ArrowDown"
                    ? 0
                    : shown.length - 1
                  : (activeIndex + (e.key === "ArrowDown" ? 1 : -1) + shown.length) % shown.length;
              highlight(next, query, shown);
            }
          } else if (e.key === "Enter" && shownOpen) {
            e.preventDefault();
            take(activeIndex >= 0 ? shown[activeIndex] : null);
          } else if (e.key === "Escape" && shownOpen) {
            e.preventDefault();
            close();
          }
        }}
      />
      {/* Opens and closes the list like a drop-down's arrow; the box keeps the keyboard. */}
      <button
        type="button"
        className="pool-picker-chevron"
        tabIndex={-1}
        aria-label="Show the pools"
        aria-controls={listId}
        aria-expanded={shownOpen}
        disabled={disabled}
        onMouseDown={(e) => {
          e.preventDefault();
        }}
        onClick={() => {
          if (shownOpen) {
            close();
          } else {
            boxRef.current?.focus();
            openAtChosen();
          }
        }}
      >
        <span aria-hidden="true">▾</span>
      </button>
      <div
        className="pool-picker-popup"
        hidden={!shownOpen}
        style={place}
        // Keeps the focus in the box: a click in the list finds it still open.
        onMouseDown={(e) => {
          e.preventDefault();
        }}
      >
        <ul id={listId} role="listbox" aria-label="Pools with a free member">
          {shown.map((c, i) => (
            <li
              key={c.key}
              id={`${optionId}-${i}`}
              role="option"
              data-testid={`get-desktop-option-${c.key}`}
              className={i === activeIndex ? "pool-picker-option active" : "pool-picker-option"}
              aria-selected={i === activeIndex}
              onClick={() => {
                take(c);
              }}
            >
              <span>{c.pool}</span>
              <span className="muted mono">ns/{c.namespace}</span>
              <span className="pool-picker-free">{c.free} free</span>
            </li>
          ))}
        </ul>
        {shownOpen && shown.length === 0 ? (
          <p className="pool-picker-note">No pool with a free member matches “{query?.trim()}”.</p>
        ) : null}
        {matches.length > shown.length ? (
          <p className="pool-picker-note">
            {matches.length - shown.length} more: type to narrow them down.
          </p>
        ) : null}
      </div>
    </div>
  );
}
