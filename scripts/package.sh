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

# The CLI goes into the same packages, next to the app.
cargo build --release --locked -p corral-vdi
CLI="$(cd "$TARGET/release" && pwd)/corral-vdi"
extra=$(printf '{"bundle":{"linux":{"deb":{"files":{"/usr/bin/corral-vdi":"%s"}},"rpm":{"files":{"/usr/bin/corral-vdi":"%s"}}}}}' "$CLI" "$CLI")

# Run from the repository root, where the Tauri CLI finds src-tauri/tauri.conf.json; the
# frontend is built by `make ui` first.
ui/node_modules/.bin/tauri build --bundles deb,rpm --config "$extra" -- --locked >&2

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
