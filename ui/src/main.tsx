import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { App } from "./App";
import { backendAvailable, clipboardText, setClipboardText } from "./api";
import { openEarlyCluster } from "./earlyCluster";
import { backendClipboard, installPageClipboard } from "./lib/clipboard";
import { followTheme } from "./lib/theme";
import { installTooltips } from "./lib/tooltips";
import "./styles.css";

// Before the first paint, so a dark choice never flashes light.
followTheme();
// Before the first render, so that the cluster's first answers travel while React renders.
openEarlyCluster();

// In the app's window the clipboard is the OS's, through the backend (WebKitGTK refuses reads).
if (backendAvailable()) installPageClipboard(backendClipboard(clipboardText, setClipboardText));

// The page's tooltips: the platform's would stay over a dialog the click under them opened.
installTooltips(document);

const root = document.getElementById("root");
if (!root) {
  throw new Error("index.html has no #root element");
}

createRoot(root).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
