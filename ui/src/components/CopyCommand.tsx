import { useRef, useState } from "react";

type CopyState = "idle" | "copied" | "failed";

type CopyCommandProps = {
  /** The command line, shown exactly as it is copied. */
  command: string;
  /** What the command is, for the Copy button's accessible name: "the ssh command". */
  label: string;
  testId?: string;
  copyTestId?: string;
};

/**
 * A command line with a Copy button. When the clipboard refuses, the command is selected so
 * that Ctrl+C copies it.
 */
export function CopyCommand({ command, label, testId, copyTestId }: CopyCommandProps) {
  const [copy, setCopy] = useState<CopyState>("idle");
  const codeRef = useRef<HTMLElement>(null);

  const selectCommand = () => {
    const code = codeRef.current;
    const selection = window.getSelection();
    if (code !== null && selection !== null) selection.selectAllChildren(code);
  };

  const onCopy = () => {
    if (!("clipboard" in navigator)) {
      selectCommand();
      setCopy("failed");
      return;
    }
    navigator.clipboard.writeText(command).then(
      () => {
        setCopy("copied");
      },
      () => {
        selectCommand();
        setCopy("failed");
      },
    );
  };

  return (
    <>
      <div className="command">
        <code ref={codeRef} data-testid={testId}>
          {command}
        </code>
        <button
          type="button"
          className="btn btn-small"
          data-testid={copyTestId}
          aria-label={`Copy ${label}`}
          onClick={onCopy}
        >
          {copy === "copied" ? "Copied" : "Copy"}
        </button>
      </div>
      <span className="sr-only" role="status">
        {copy === "copied" ? `Copied ${label}` : ""}
      </span>
      {copy === "failed" ? (
        <p className="muted" role="status">
          Could not copy: the command is selected, press Ctrl+C to copy it.
        </p>
      ) : null}
    </>
  );
}
