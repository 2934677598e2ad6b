#!/usr/bin/env bash
# Runs every test binary of the workspace (each crate's unit tests, and hearth-e2e's
# end-to-end tests) HEARTH_TEST_JOBS at a time (default 3), slowest first, each as `cargo
# test` runs it (from its package's folder, with CARGO set), then the doc tests. Prints one
# line per binary with its time and result as it ends, the whole output of every binary
# that failed, and exits non-zero if any did.
#
# Why not `cargo test --workspace`: it runs the binaries one after the other, and the e2e
# tests spend most of their time waiting for apiservers, Kueue and controllers, not on
# the CPU: two at a time each took as long as alone, even with one core held by a busy
# loop (docs/ci.md), so the phase took half as long. Each binary starts its own planes
# (folders of their own; ports reserved across processes by
# `hearth_e2e::process::free_port`), so they do not meet. The binaries are listed by
# `cargo test --workspace --no-run`, which resolves features as the build phase does
# (`cargo build --workspace --all-targets`), so nothing is compiled again.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${HEARTH_TEST_JOBS:-3}
case $jobs in '' | *[!0-9]* | 0)
    echo "tests: HEARTH_TEST_JOBS must be a whole number of at least 1, not '$jobs'" >&2
    exit 2
    ;;
esac
out=$(mktemp -d "${TMPDIR:-/tmp}/hearth-e2e-run.XXXXXX")
trap 'rm -rf "$out"' EXIT

# Builds what is missing and lists every test binary as "<name> <package folder> <path>",
# named by its test target (e2e/tests/<name>.rs) or <target>:<lib|bin> for unit tests.
cargo test --workspace --no-run --message-format=json-render-diagnostics >"$out/artifacts.json"
python3 - "$out/artifacts.json" >"$out/binaries" <<'EOF'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    target = m["target"]
    kind = target["kind"][0]
    name = target["name"] if kind == "test" else f"{target['name']}:{kind}"
    print(name, os.path.dirname(m["manifest_path"]), m["executable"])
EOF
# Slowest first (from CI's logs), so that the last ones to start are short; the unit
# tests (under a second each) last.
order="takeover_py fournos_real memory_bounds fournos_attacks fournos_cordon lock_manager lock_trust lock_holds migration discovery discovery_offboarding offboard_trust teardown
rollback_py harness hostile hostile_targets dashboard kueue_sync kueue_sync_places upgrade chart_install plugin cordon binaries pools
smoke images argocd chart chart_operations chart_privilege"
# HEARTH_TESTS="<name> ..." runs only those binaries (and no doc tests): `just test-kueue`.
if [ -n "${HEARTH_TESTS:-}" ]; then
    awk -v only="$HEARTH_TESTS" 'BEGIN { n = split(only, o); for (i = 1; i <= n; i++) keep[o[i]] = 1 }
        $1 in keep' "$out/binaries" >"$out/only"
    if [ "$(wc -l <"$out/only")" != "$(echo "$HEARTH_TESTS" | wc -w)" ]; then
        echo "tests: HEARTH_TESTS names a binary that does not exist: $HEARTH_TESTS" >&2
        exit 2
    fi
    mv "$out/only" "$out/binaries"
fi
awk -v order="$order" 'BEGIN { n = split(order, o); for (i = 1; i <= n; i++) rank[o[i]] = i }
    { print (($1 in rank) ? rank[$1] : 999), $0 }' "$out/binaries" | sort -n -s -k1,1 | cut -d' ' -f2- \
    >"$out/ordered"

export CARGO=${CARGO:-$(command -v cargo)}
run_one() {
    local name=$1 dir=$2 exe=$3 start=$SECONDS rc=0
    (cd "$dir" && "$exe") >"$out/$name.log" 2>&1 || rc=$?
    local result
    result=$(grep -E '^test result:' "$out/$name.log" | tail -1 || true)
    echo "$rc" >"$out/$name.rc"
    echo "test $name: $((SECONDS - start))s, ${result:-no test result} (exit $rc)"
}
export -f run_one
export out
start=$SECONDS
# run_one on each line, $jobs at a time; failures are counted below.
xargs -P "$jobs" -L 1 bash -c 'run_one "$1" "$2" "$3"' run_one <"$out/ordered" || true
failed=()
while read -r name _; do
    [ "$(cat "$out/$name.rc" 2>/dev/null || echo missing)" = 0 ] || failed+=("$name")
done <"$out/ordered"
echo "tests: $(wc -l <"$out/ordered") binaries, $jobs at a time, in $((SECONDS - start))s"
# The doc tests, which cargo runs only itself.
if [ -z "${HEARTH_TESTS:-}" ]; then
    if ! cargo test --workspace --doc >"$out/doc.log" 2>&1; then
        failed+=(doc)
    fi
    echo "test doc: $(grep -E '^test result:' "$out/doc.log" | tail -1)"
fi
if [ "${#failed[@]}" -gt 0 ]; then
    for name in "${failed[@]}"; do
        echo "=== test $name failed; its output:"
        cat "$out/$name.log" 2>/dev/null || echo "(no output: it did not run)"
    done
    echo "tests: failed: ${failed[*]}"
    exit 1
fi
