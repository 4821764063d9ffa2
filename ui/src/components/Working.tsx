/** A spinner and "Working…", shown in a button while its command runs. */
export function Working({ label = "Working…" }: { label?: string }) {
  return (
    <span className="working">
      <span className="spinner" aria-hidden="true" />
      {label}
    </span>
  );
}
