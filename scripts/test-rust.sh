#!/usr/bin/env bash
# Every Rust test. The credential-renewal test lives five minutes of sandbox time while doing
# almost nothing, so it runs beside the others instead of after them (cargo runs test binaries
# one by one); either failing fails this script. It runs the very binary the build below
# made: a second `cargo test` with other target filters would unify features differently and
# rebuild much of the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
built=$(cargo test --workspace --all-features --no-run --message-format=json)
slow_exe=$(grep -o '"executable":"[^"]*/deps/credentials-[0-9a-f]*"' <<<"$built" | tail -n 1 | cut -d'"' -f4)
[ -x "$slow_exe" ] || { echo "test-rust: the credentials test binary was not built" >&2; exit 1; }
log=$(mktemp)
(cd tests && "$slow_exe" --ignored) >"$log" 2>&1 &
slow=$!
status=0
cargo test --workspace --all-features || status=$?
slow_status=0
wait "$slow" || slow_status=$?
echo "--- the credential-renewal test (run beside the others) ---"
cat "$log"
rm -f "$log"
[ "$status" -eq 0 ] && [ "$slow_status" -eq 0 ]
