#!/usr/bin/env bash
# Set up, then run the whole test suite: lint, types, unit/property/backend/conformance tests,
# and the real-SGLang bridge environment. Tests start the servers they need themselves
# (on free 127.0.0.1 ports, stopped by PID), one set per pytest worker.
#
#   scripts/test.sh           everything (= CI); the core tests (tests/) run in an install
#                             without a C compiler (scripts/nocompiler_check.sh)
#   scripts/test.sh --quick   lint, types, the core and file-backend tests
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
    "") ;;
    --quick) quick=1 ;;
    *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
scripts/setup.sh
export CI="${CI:-1}"   # hypothesis "ci" profile: derandomized, bounded examples
# pytest workers: the tests mostly wait on servers and subprocesses, so one more than the cores.
workers="${HICACHE_TEST_WORKERS:-$(( $(nproc) + 1 ))}"

tox_pid=""
if [ "$quick" = 0 ]; then
    # Build the SGLang environment while the other steps run (it is mostly package installs).
    tox_log="$(mktemp)"
    .venv/bin/tox -q -e sglang --notest >"$tox_log" 2>&1 &
    tox_pid=$!
    trap '[ -n "$tox_pid" ] && kill "$tox_pid" 2>/dev/null; rm -f "$tox_log"' EXIT
fi

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy (strict, hicache_sdk)"
.venv/bin/mypy

if [ "$quick" = 1 ]; then
    echo "== pytest (quick: core and file backend)"
    exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" tests backends/file/tests
fi

echo "== without a C compiler, and the core tests (scripts/nocompiler_check.sh, alongside the next steps)"
nocc_log="$(mktemp)"
scripts/nocompiler_check.sh -q -p no:cacheprovider -n 2 >"$nocc_log" 2>&1 &
nocc_pid=$!
trap '[ -n "$tox_pid" ] && kill "$tox_pid" 2>/dev/null; [ -n "$nocc_pid" ] && kill "$nocc_pid" 2>/dev/null; rm -f "$tox_log" "$nocc_log"' EXIT
# The core tests (tests/) run once, in the no-compiler install above; here only the kit's,
# which compare the compiled copy extension with its fallback.
echo "== pytest (backends, conformance, the kit; $workers workers)"
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" \
    tests/kit backends/file/tests backends/redis/tests backends/s3/tests backends/mooncake/tests \
    conformance/tests
echo "== real SGLang 0.5.23 (tox -e sglang)"
if ! wait "$tox_pid"; then
    tox_pid=""
    cat "$tox_log"
    echo "building the tox sglang environment failed" >&2
    exit 1
fi
tox_pid=""
.venv/bin/tox -q -e sglang -- -n 2
echo "== without a C compiler: result"
if ! wait "$nocc_pid"; then
    nocc_pid=""
    cat "$nocc_log"
    echo "scripts/nocompiler_check.sh failed" >&2
    exit 1
fi
nocc_pid=""
grep -E '^[0-9]+ passed' "$nocc_log" | tail -n 1 || true
