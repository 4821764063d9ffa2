#!/usr/bin/env bash
# Every Rust test: each test binary `cargo test --workspace --all-features` builds, run from its
# package's folder as cargo runs it, CORRAL_TEST_JOBS (default 3) at a time; then the doc
# tests. Most of a test binary's time is spent waiting on its own sandbox (a real
# kube-apiserver and etcd), so three binaries share two cores well (on 2026-12-07 every binary
# took 8 minutes at 3, and each passed). The credential-renewal test
# (ignored in the normal run) lives five minutes of sandbox time while doing almost nothing,
# so it runs beside all of them. Each binary's output is printed whole when it ends; any
# failure fails the script, after every binary has run, and the script then ends with each
# failed test's panic message (without its backtrace), so that a cut-off log still says why.
# The binaries are the ones this build made: a second `cargo test` with other target filters
# would unify features differently and rebuild much of the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${CORRAL_TEST_JOBS:-3}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

built=$(cargo test --workspace --all-features --no-run --message-format=json)
# "name<TAB>package folder<TAB>executable" for each test binary; the two longest (the broker's
# and the GUI tests, 7 and 4.5 minutes) first, so that the others fill the slots around them
# and none of the two starts late.
list=$(jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
  | "\(.target.name)-\(.target.kind[0])\t\(.manifest_path | rtrimstr("/Cargo.toml"))\t\(.executable)"' <<<"$built" \
  | awk -F'\t' '{ print ($1 ~ /^(broker|gui_e2e)-test$/ ? 0 : 1) "\t" $0 }' | sort -s -t$'\t' -k1,1n | cut -f2-)
[ -n "$list" ] || { echo "test-rust: the build made no test binary" >&2; exit 1; }
slow_exe=$(awk -F'\t' '$1 == "credentials-test" { print $3 }' <<<"$list")
[ -x "$slow_exe" ] || { echo "test-rust: the credentials test binary was not built" >&2; exit 1; }

# run NAME DIR EXE [ARGS...]: runs one binary in the background; NAME.done holds
# "<exit status> <seconds>" when it has ended.
run() {
  local name=$1 dir=$2
  shift 2
  (
    start=$SECONDS
    status=0
    (cd "$dir" && "$@") >"$logs/$name.log" 2>&1 </dev/null || status=$?
    echo "$status $((SECONDS - start))" >"$logs/$name.done"
  ) &
}
failed=()
# Prints the panic of each failed test in LOG (its message, without the backtrace): the digest
# at the end, where a failure inside a long output cannot be missed or cut off.
panics() {
  awk '
    /^---- .* stdout ----$/ { print; shown = 0; next }
    /^thread .* panicked at / { shown = 1; lines = 0 }
    shown && (/^stack backtrace:/ || /^note: run with/ || ++lines > 30) { shown = 0 }
    shown { print }
  ' "$1"
}
# Prints every binary that has ended since the last call, with its whole output.
report() {
  local done name status secs
  for done in "$logs"/*.done; do
    [ -e "$done" ] || continue
    name=$(basename "$done" .done)
    read -r status secs <"$done"
    rm "$done"
    echo "=== $name: $([ "$status" -eq 0 ] && echo passed || echo "FAILED (exit $status)") in ${secs}s"
    cat "$logs/$name.log"
    [ "$status" -eq 0 ] || failed+=("$name")
  done
}

run credentials-renewal tests "$slow_exe" --ignored
slow=$!
while IFS=$'\t' read -r name dir exe; do
  while [ "$(jobs -rp | grep -cvx "$slow")" -ge "$jobs" ]; do
    wait -n || true
    report
  done
  run "$name" "$dir" "$exe"
done <<<"$list"
wait
report

echo "=== doc tests"
cargo test --workspace --all-features --doc || failed+=("doc tests")

if [ ${#failed[@]} -gt 0 ]; then
  echo "=== each failed test's panic (the binary's whole output is above)"
  for name in "${failed[@]}"; do
    [ -f "$logs/$name.log" ] && panics "$logs/$name.log"
  done
  echo "test-rust: failed: ${failed[*]}" >&2
  exit 1
fi
echo "test-rust: every test binary passed"
