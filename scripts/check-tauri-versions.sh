#!/usr/bin/env bash
# Fails when the Tauri crate (Cargo.lock) and the npm packages (@tauri-apps/api, @tauri-apps/cli
# in ui/package-lock.json) drift apart in major.minor: the Tauri CLI refuses to bundle then,
# and the webview API would not match the runtime.
set -euo pipefail
cd "$(dirname "$0")/.."

crate=$(awk '/^name = "tauri"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
npm_version() {
  node -e "const l=require('./ui/package-lock.json'); console.log(l.packages['node_modules/$1'].version)"
}
api=$(npm_version @tauri-apps/api)
cli=$(npm_version @tauri-apps/cli)
minor() { echo "$1" | cut -d. -f1,2; }
if [ "$(minor "$crate")" != "$(minor "$api")" ] || [ "$(minor "$crate")" != "$(minor "$cli")" ]; then
  echo "Tauri versions drift: crate tauri $crate, @tauri-apps/api $api, @tauri-apps/cli $cli" >&2
  echo "fix: cargo update -p tauri, or pin the npm packages to the crate's major.minor" >&2
  exit 1
fi
echo "tauri $crate, @tauri-apps/api $api, @tauri-apps/cli $cli: in step"
