#!/usr/bin/env bash
# Line coverage of the main test run (the core, every backend and the suite's own tests;
# the real-SGLang tests run in their own environment and are not counted):
#
#   scripts/coverage.sh        after scripts/setup.sh; prints the report, the total last
#
# 0.1.0's last commit before the 0.2.0 redesign measured 84 % this way (14,307 statements);
# the CHANGELOG records the figure of each release.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-1}"
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
export COVERAGE_FILE="$data/.coverage"
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${HICACHE_TEST_WORKERS:-2}" \
    --cov=hicache_sdk --cov=hicache_backend_file --cov=hicache_backend_redis \
    --cov=hicache_backend_s3 --cov=hicache_backend_mooncake --cov=hicache_conformance --cov-report= \
    tests backends/file/tests backends/redis/tests backends/s3/tests backends/mooncake/tests conformance/tests
.venv/bin/python -m coverage report
