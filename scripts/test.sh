#!/usr/bin/env bash
# Set up, then run the whole test suite: lint, types, unit/property/backend/conformance tests,
# the real-SGLang environment (the bridge and the linker), and a short real-LMCache part (the
# L2 adapter's and the connector's contracts on the file backend, and end to end through a
# real `lmcache server`;
# HICACHE_TEST_LMCACHE=0 leaves it out). Tests start the servers they need themselves
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
t0=$SECONDS
# step NAME: print a step's header with the time since the start
step() { printf '== %s  [%dm%02ds]\n' "$1" $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)); }
# Imports write their bytecode (our packages, the tests' assertion rewrites): the test
# processes and the many subprocesses they start then compile each module once.
unset PYTHONDONTWRITEBYTECODE
# Installs skip compiling every module they unpack (torch, transformers, ...): the imports
# above write the bytecode of the modules the tests use, once.
export PIP_COMPILE=false
export CI="${CI:-1}"   # hypothesis "ci" profile: derandomized, bounded examples
# pytest workers: the tests mostly wait on servers and subprocesses, so one more than the cores.
workers="${HICACHE_TEST_WORKERS:-$(( $(nproc) + 1 ))}"

# Steps that run in the background: those still running are killed at exit, their logs removed.
bg_logs=()
trap 'kill $(jobs -pr) 2>/dev/null || true; rm -rf "${bg_logs[@]}"' EXIT
# start LOG_VAR PID_VAR CMD...: run CMD in the background, its output in a new log
start() {
    local log
    log="$(mktemp)"
    bg_logs+=("$log")
    "${@:3}" >"$log" 2>&1 &
    printf -v "$2" '%s' "$!"
    printf -v "$1" '%s' "$log"
}
# finish WHAT PID LOG: wait for a background step; when it failed, print its log and stop
finish() {
    if ! wait "$2"; then
        cat "$3"
        echo "$1 failed" >&2
        exit 1
    fi
}

if [ "$quick" = 1 ]; then
    scripts/setup.sh
    step "ruff"
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    step "import contracts, dead code, mypy"
    .venv/bin/lint-imports --no-logo
    .venv/bin/vulture
    .venv/bin/mypy
    echo "== pytest (quick: core and file backend)"
    exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" tests backends/file/tests
fi

# The steps below share 2 cores: what waits on servers and subprocesses overlaps with what
# computes. First, beside the setup (pip installs one package at a time): the install without
# a C compiler, then the core tests in it. The core tests (tests/) run once, there; the main
# run below has only the kit's, which compare the compiled copy extension with its fallback.
ids_dir="$(mktemp -d)"
bg_logs+=("$ids_dir")
start nocc_log nocc_pid env HICACHE_COLLECTED_IDS="$ids_dir/core" \
    scripts/nocompiler_check.sh -p no:cacheprovider -n 2
scripts/setup.sh
# Then, in the background: the SGLang and LMCache environments (tox runs each env's
# install commands, then only asks pytest for its version; their tests then run straight in
# the built env, without a second round of installs), and the static checks.
envs=".venv/bin/tox -q -e sglang -- --version"
if [ "${HICACHE_TEST_LMCACHE:-1}" = 1 ]; then
    envs="$envs && .venv/bin/tox -q -e lmcache -- --version"
fi
start envs_log envs_pid sh -c "$envs"
step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
start static_log static_pid sh -c \
    '.venv/bin/lint-imports --no-logo && .venv/bin/vulture && .venv/bin/mypy'

step "pytest (backends, conformance, the kit; $workers workers)"
HICACHE_COLLECTED_IDS="$ids_dir/main" .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" \
    tests/kit backends/file/tests backends/redis/tests backends/s3/tests backends/mooncake/tests \
    conformance/tests
step "import contracts, dead code, mypy (lint-imports, vulture, mypy; pyproject.toml): result"
finish "the static checks" "$static_pid" "$static_log"
cat "$static_log"
step "real SGLang 0.5.23: the bridge and the linker (tests/sglang in the tox sglang env)"
finish "building the tox sglang and lmcache environments" "$envs_pid" "$envs_log"
PIP_CONSTRAINT="$PWD/constraints.txt" HICACHE_SGLANG_ENV=1 \
    .tox/sglang/bin/python -m pytest -q -p no:cacheprovider -n 2 tests/sglang
if [ "${HICACHE_TEST_LMCACHE:-1}" = 1 ]; then
    step "real LMCache 0.5.6: the L2 adapter and the connector on the file backend, and end to end (tox -e lmcache runs all)"
    PIP_CONSTRAINT="$PWD/constraints.txt" HICACHE_LMCACHE_ENV=1 LMCACHE_TRACK_USAGE=false \
        .tox/lmcache/bin/python -m pytest -q -p no:cacheprovider -n 2 \
        "tests/lmcache/test_l2_end_to_end.py::test_chunks_come_back_from_our_adapter[file]" \
        tests/lmcache/test_l2_contract.py::TestOursOnFile tests/lmcache/test_connector.py::TestOursOnFile
fi
step "without a C compiler, and the core tests (scripts/nocompiler_check.sh): result"
finish "scripts/nocompiler_check.sh" "$nocc_pid" "$nocc_log"
grep -E '^[0-9]+ passed' "$nocc_log" | tail -n 1 || true
step "test ids: every 0.1.0 test is still here, renamed or removed with a reason (tests/ids)"
if [ -s "$ids_dir/core" ] && [ -s "$ids_dir/main" ]; then
    sort -u "$ids_dir/core" "$ids_dir/main" >"$ids_dir/all"
    .venv/bin/python scripts/compare_test_ids.py --ids "$ids_dir/all"
else
    .venv/bin/python scripts/compare_test_ids.py   # collects them itself
fi
step "done"
