#!/usr/bin/env bash
# Builds the Linux installers: a .deb and an .rpm holding the app (corral-vdi-console), the
# corral-vdi CLI on PATH, a desktop entry and icons. Prints each artifact with its size. The
# in-cluster broker is no part of a workstation's install: it ships as its image
# (scripts/broker-image.sh, broker/chart).
#
# Output: dist/corral-vdi-console_<version>_<arch>.deb and .rpm (no spaces in the names).
#
# `package.sh` (`make package`) builds release binaries into $CARGO_TARGET_DIR/release.
# `package.sh --debug` builds nothing: it bundles the debug binaries `make app` already built
# (the workspace's feature set, the UI embedded), so that `make test` tries the installers
# without a second, release, compilation of the whole tree. Tauri bundles a debug build the
# same way (`tauri bundle --debug`); only the binaries inside differ.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${CARGO_TARGET_DIR:-target}"
scripts/check-tauri-versions.sh

case "${1:-}" in
  "")
    profile=release
    # The app (with its default features: the UI built by `make ui` served from inside the
    # binary, as `tauri build` would) and the CLI that goes into the same packages, in one
    # cargo run so that their shared dependencies are compiled once.
    cargo build --release --locked -p corral-vdi-console -p corral-vdi
    bundle_flags=()
    ;;
  --debug)
    profile=debug
    for bin in corral-vdi-console corral-vdi; do
      [ -x "$TARGET/debug/$bin" ] || { echo "package: $TARGET/debug/$bin is missing: run \`make app\` first" >&2; exit 1; }
    done
    bundle_flags=(--debug)
    ;;
  *)
    echo "usage: scripts/package.sh [--debug]" >&2
    exit 2
    ;;
esac
# The CLI beside the app in /usr/bin, in both packages.
BIN="$(cd "$TARGET/$profile" && pwd)"
files=$(printf '{"/usr/bin/corral-vdi":"%s"}' "$BIN/corral-vdi")
extra=$(printf '{"bundle":{"linux":{"deb":{"files":%s},"rpm":{"files":%s}}}}' "$files" "$files")

# Bundle what was built. Run from the repository root, where the Tauri CLI finds
# src-tauri/tauri.conf.json.
ui/node_modules/.bin/tauri bundle "${bundle_flags[@]}" --bundles deb,rpm --config "$extra" >&2

version=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' src-tauri/tauri.conf.json)
rm -rf dist && mkdir -p dist
for kind in deb rpm; do
  for file in "$TARGET"/"$profile"/bundle/"$kind"/*"$version"*."$kind"; do
    [ -e "$file" ] || { echo "package: no .$kind was built" >&2; exit 1; }
    base=$(basename "$file")
    # "Corral VDI Console_0.1.0_amd64.deb" → "corral-vdi-console_0.1.0_amd64.deb"
    name=$(echo "$base" | tr '[:upper:]' '[:lower:]' | tr ' ' '-')
    cp "$file" "dist/$name"
  done
done
echo "installers:"
for file in dist/*; do
  printf '  %s  %s\n' "$(du -h "$file" | cut -f1)" "$file"
done
