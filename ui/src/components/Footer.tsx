import type { AppInfo } from "../bindings/AppInfo";

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
            {info.kubeconfigPaths.join(", ")}
          </code>
        </span>
      ) : null}
      <span className="footer-item footer-version">
        Corral VDI Console {info ? `v${info.version}` : ""}
      </span>
    </footer>
  );
}
