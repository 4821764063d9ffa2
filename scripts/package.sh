#!/usr/bin/env bash
# Builds the Linux installers: a .deb and an .rpm holding the app (corral-vdi-console), the
# corral-vdi CLI on PATH, a desktop entry and icons. Prints each artifact with its size.
#
# Output: dist/corral-vdi-console_<version>_<arch>.deb and .rpm (no spaces in the names).
# Release builds live in $CARGO_TARGET_DIR/release like every other build output.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${CARGO_TARGET_DIR:-target}"
scripts/check-tauri-versions.sh

# The app (with its default features: the UI built by `make ui` served from inside the binary,
# as `tauri build` would) and the CLI that goes into the same packages, in one cargo run so
# that their shared dependencies are compiled once. `make bench` builds the same set.
cargo build --release --locked -p corral-vdi-console -p corral-vdi
CLI="$(cd "$TARGET/release" && pwd)/corral-vdi"
extra=$(printf '{"bundle":{"linux":{"deb":{"files":{"/usr/bin/corral-vdi":"%s"}},"rpm":{"files":{"/usr/bin/corral-vdi":"%s"}}}}}' "$CLI" "$CLI")

# Bundle what was built. Run from the repository root, where the Tauri CLI finds
# src-tauri/tauri.conf.json.
ui/node_modules/.bin/tauri bundle --bundles deb,rpm --config "$extra" >&2

version=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' src-tauri/tauri.conf.json)
rm -rf dist && mkdir -p dist
for kind in deb rpm; do
  for file in "$TARGET"/release/bundle/"$kind"/*"$version"*."$kind"; do
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
