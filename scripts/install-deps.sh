#!/usr/bin/env bash
# Installs everything Corral VDI Console needs to build, run and test, idempotently:
#   - Debian packages (WebKitGTK for Tauri, Xvfb and WebKitWebDriver for GUI tests, libusb,
#     the helper programs the app drives: usbredirect, FreeRDP, TigerVNC, virt-viewer; and
#     Prometheus, which the sandbox runs to scrape its broker);
#   - the UI's npm packages (npm ci, skipped when package-lock.json has not changed);
#   - tauri-driver (cargo install, into the cache);
#   - Helm, for the broker's chart test (go build from the Go module proxy, cached by pin);
#   - the sandbox's kube-apiserver, kube-controller-manager and etcd (go build from the Go module proxy, cached by pin;
#     Go's build cache is filled first, in the background).
# Needs Rust (cargo), Go and Node.js/npm already installed. Uses sudo for apt when not root.
#
# On a fresh machine the longest single job, compiling kube-apiserver's and etcd's Go packages,
# starts first and runs in the background while everything else (apt, npm, tauri-driver, the
# Rust build) goes on: the sandbox's own `go build` waits for it (a file lock) and then only
# links. Logs: $CORRAL_CACHE_DIR/logs/go-build.log and sandbox-prepare.log.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${CORRAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/corral-vdi}"
LOGS="$CACHE/logs"
mkdir -p "$LOGS"

for tool in cargo go npm; do
  command -v "$tool" >/dev/null || { echo "install-deps: '$tool' is not on PATH (install Rust, Go and Node.js first)" >&2; exit 1; }
done

# First, in the background and not waited for here: compile the Go packages of the pinned
# kube-apiserver and etcd into Go's build cache, holding the lock that the sandbox's build
# (crates/sandbox/src/binaries.rs, GO_BUILD_LOCK) waits on. Once per pin (a stamp).
go_packages="./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager"
go_pin=$( (cat crates/sandbox/go/go.mod crates/sandbox/go/go.sum crates/sandbox/go/cmd/etcd/main.go; echo "$go_packages") | sha256sum | cut -c1-16)
go_stamp="$CACHE/sandbox-bin/.go-warm-$go_pin"
if [ ! -f "$go_stamp" ]; then
  mkdir -p "$CACHE/sandbox-bin"
  echo "install-deps: compiling kube-apiserver's, kube-controller-manager's and etcd's Go packages in the background (log: $LOGS/go-build.log)"
  nohup flock "$CACHE/sandbox-bin/.go-build.lock" bash -c \
    "cd crates/sandbox/go && GOFLAGS=-mod=mod go build $go_packages && touch '$go_stamp'" \
    >"$LOGS/go-build.log" 2>&1 </dev/null &
fi

# Jobs run beside each other, each with its log; `finish` waits for all and fails, showing the
# log, if any failed.
pids=()
jobs_named=()
start() {
  local name=$1
  shift
  "$@" >"$LOGS/$name.log" 2>&1 &
  pids+=("$!")
  jobs_named+=("$name")
}
finish() {
  local status=0 i
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "install-deps: ${jobs_named[$i]} failed:" >&2
      cat "$LOGS/${jobs_named[$i]}.log" >&2
      status=1
    fi
  done
  pids=()
  jobs_named=()
  return "$status"
}

# npm packages: reinstall only when the lock file changed.
stamp="ui/node_modules/.corral-lock-sha"
want=$(sha256sum ui/package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "install-deps: npm ci (ui)"
  start npm bash -c "cd ui && npm ci --no-audit --no-fund --loglevel=error && echo '$want' > '${stamp#ui/}'"
fi

# tauri-driver for the WebDriver GUI tests.
TAURI_DRIVER_VERSION=2.0.6
if [ ! -x "$CACHE/tools/bin/tauri-driver" ] || [ "$(cat "$CACHE/tools/.tauri-driver-version" 2>/dev/null)" != "$TAURI_DRIVER_VERSION" ]; then
  echo "install-deps: cargo install tauri-driver $TAURI_DRIVER_VERSION"
  start tauri-driver env -u RUSTC_WORKSPACE_WRAPPER bash -c "cargo install tauri-driver --version '$TAURI_DRIVER_VERSION' --locked --root '$CACHE/tools' --quiet \
    && echo '$TAURI_DRIVER_VERSION' > '$CACHE/tools/.tauri-driver-version'"
fi

# Helm, which renders broker/chart for its test (tests/guard/chart.rs): built from the Go module
# proxy (broker/chart-tools pins it), once per pin.
helm_pin=$(cat broker/chart-tools/go.mod broker/chart-tools/go.sum | sha256sum | cut -c1-16)
if [ ! -x "$CACHE/tools/bin/helm" ] || [ "$(cat "$CACHE/tools/.helm-pin" 2>/dev/null)" != "$helm_pin" ]; then
  echo "install-deps: go build helm (broker/chart-tools)"
  start helm bash -c "mkdir -p '$CACHE/tools/bin' && cd broker/chart-tools && GOFLAGS=-mod=mod go build -o '$CACHE/tools/bin/helm' helm.sh/helm/v4/cmd/helm \
    && echo '$helm_pin' > '$CACHE/tools/.helm-pin'"
fi

APT_PACKAGES=(
  build-essential pkg-config file libssl-dev libxdo-dev librsvg2-dev libayatana-appindicator3-dev
  libwebkit2gtk-4.1-dev libusb-1.0-0-dev
  xvfb xauth webkit2gtk-driver imagemagick jq
  usbredirect freerdp2-x11 tigervnc-viewer virt-viewer rpm procps
  tigervnc-standalone-server x11-utils x11-xserver-utils freerdp2-shadow-x11 openssh-server openssh-client
  xterm xdotool xrdp xclip
  gnome-keyring
  prometheus
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
  # xrdp's package enables and starts a system RDP server (port 3389, sesman); the sandbox runs
  # xrdp as a process of its own only, so the system one is turned off again.
  if [[ " ${missing[*]} " == *" xrdp "* ]] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now xrdp xrdp-sesman >/dev/null
  fi
  # Likewise prometheus's system service: the sandbox runs its own, scraping its broker.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null
  fi
fi
finish

# The sandbox program, built with the workspace's feature set (as `make app` and `make
# sandbox-up` build it), so its dependencies are compiled once for every later build. It builds
# the real kube-apiserver and etcd once per pin: on a fresh machine, in the background.
cargo build --quiet --workspace --all-features --bin sandbox
sandbox="${CARGO_TARGET_DIR:-target}/debug/sandbox"
cached=0
"$sandbox" prepare --check >/dev/null || cached=$?
case "$cached" in
  0) ;;
  3)
    echo "install-deps: building kube-apiserver, kube-controller-manager and etcd in the background (log: $LOGS/sandbox-prepare.log)"
    nohup "$sandbox" prepare >"$LOGS/sandbox-prepare.log" 2>&1 </dev/null &
    ;;
  4) echo "install-deps: kube-apiserver, kube-controller-manager and etcd are being built in the background (log: $LOGS/sandbox-prepare.log)" ;;
  *) exit "$cached" ;;
esac
echo "install-deps: done"
