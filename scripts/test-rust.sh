#!/usr/bin/env bash
# Every Rust test. The credential-renewal test lives five minutes of sandbox time while doing
# almost nothing, so it runs beside the others instead of after them (cargo runs test binaries
# one by one); either failing fails this script.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-features --no-run
log=$(mktemp)
cargo test -p corral-tests --all-features --test credentials -- --ignored >"$log" 2>&1 &
slow=$!
status=0
cargo test --workspace --all-features || status=$?
slow_status=0
wait "$slow" || slow_status=$?
echo "--- the credential-renewal test (run beside the others) ---"
cat "$log"
rm -f "$log"
[ "$status" -eq 0 ] && [ "$slow_status" -eq 0 ]
