#!/usr/bin/env bash
# Installs everything Corral VDI Console needs to build, run and test, idempotently:
#   - Debian packages (WebKitGTK for Tauri, Xvfb and WebKitWebDriver for GUI tests, libusb,
#     and the helper programs the app drives: usbredirect, FreeRDP, TigerVNC, virt-viewer);
#   - the UI's npm packages (npm ci, skipped when package-lock.json has not changed);
#   - tauri-driver (cargo install, into the cache);
#   - the sandbox's kube-apiserver and etcd (go build from the Go module proxy, cached by pin).
# Needs Rust (cargo), Go and Node.js/npm already installed. Uses sudo for apt when not root.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${CORRAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/corral-vdi}"
mkdir -p "$CACHE"

for tool in cargo go npm; do
  command -v "$tool" >/dev/null || { echo "install-deps: '$tool' is not on PATH (install Rust, Go and Node.js first)" >&2; exit 1; }
done

APT_PACKAGES=(
  build-essential pkg-config file libssl-dev libxdo-dev librsvg2-dev libayatana-appindicator3-dev
  libwebkit2gtk-4.1-dev libusb-1.0-0-dev
  xvfb xauth webkit2gtk-driver imagemagick
  usbredirect freerdp2-x11 tigervnc-viewer virt-viewer rpm procps
  tigervnc-standalone-server x11-utils x11-xserver-utils freerdp2-shadow-x11 openssh-server openssh-client
)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages: reinstall only when the lock file changed.
stamp="ui/node_modules/.corral-lock-sha"
want=$(sha256sum ui/package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "install-deps: npm ci (ui)"
  (cd ui && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" > "$stamp"
fi

# tauri-driver for the WebDriver GUI tests.
TAURI_DRIVER_VERSION=2.0.6
if [ ! -x "$CACHE/tools/bin/tauri-driver" ] || [ "$(cat "$CACHE/tools/.tauri-driver-version" 2>/dev/null)" != "$TAURI_DRIVER_VERSION" ]; then
  echo "install-deps: cargo install tauri-driver $TAURI_DRIVER_VERSION"
  cargo install tauri-driver --version "$TAURI_DRIVER_VERSION" --locked --root "$CACHE/tools" --quiet
  echo "$TAURI_DRIVER_VERSION" > "$CACHE/tools/.tauri-driver-version"
fi

# The sandbox's real kube-apiserver and etcd (built once per pin). The sandbox program is built
# with the workspace's feature set (as `make app` and `make sandbox-up` build it), so its
# dependencies are compiled once for every later build instead of once more for it alone.
cargo build --quiet --workspace --all-features --bin sandbox
"${CARGO_TARGET_DIR:-target}/debug/sandbox" prepare >/dev/null
echo "install-deps: done"
