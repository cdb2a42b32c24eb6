#!/usr/bin/env bash
# Set up, then run the whole test suite: lint, types, unit/property/backend/conformance tests,
# and the real-SGLang bridge environment. Tests start the servers they need themselves
# (on free 127.0.0.1 ports, stopped by PID).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CI="${CI:-1}"   # hypothesis "ci" profile: derandomized, bounded examples

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy (strict, hicache_sdk)"
.venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest -q -p no:cacheprovider \
    tests backends/file/tests backends/redis/tests backends/s3/tests conformance/tests
echo "== pytest (mooncake: a real master + holder process on loopback)"
.venv/bin/python -m pytest -q -p no:cacheprovider backends/mooncake/tests
echo "== real SGLang 0.5.23 (tox -e sglang)"
.venv/bin/tox -q -e sglang
