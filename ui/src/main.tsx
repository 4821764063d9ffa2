import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { App } from "./App";
import { openEarlyCluster } from "./earlyCluster";
import { followTheme } from "./lib/theme";
import "./styles.css";

// Before the first paint, so a dark choice never flashes light.
followTheme();
// Before the first render, so that the cluster's first answers travel while React renders.
openEarlyCluster();

const root = document.getElementById("root");
if (!root) {
  throw new Error("index.html has no #root element");
}

createRoot(root).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
