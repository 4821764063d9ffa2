import type { AppInfo } from "../bindings";
import { shortenPath } from "../lib/presentation";

/** Kubeconfig paths longer than this (characters) lose folders from their middle. */
const KUBECONFIG_SHOWN = 48;

export function Footer({ info }: { info: AppInfo | null }) {
  return (
    <footer className="app-footer">
      <span className="footer-item">
        <span className="footer-label">Log file</span>
        <code className="selectable">{info ? info.logPath : "…"}</code>
      </span>
      {info && info.kubeconfigPaths.length > 0 ? (
        <span className="footer-item footer-kubeconfig">
          <span className="footer-label">Kubeconfig</span>
          <code className="selectable truncate" title={info.kubeconfigPaths.join("\n")}>
            {info.kubeconfigPaths.map((p) => shortenPath(p, KUBECONFIG_SHOWN)).join(", ")}
          </code>
        </span>
      ) : null}
      <span className="footer-item footer-version">
        Corral VDI Console {info ? `v${info.version}` : ""}
      </span>
    </footer>
  );
}
