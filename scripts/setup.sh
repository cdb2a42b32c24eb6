#!/usr/bin/env bash
# Create .venv and install the SDK, our backends, the conformance suite and the dev tools.
# Idempotent; safe to re-run. Needs: python3 (3.10+) with venv, pip; package registries reachable.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}

# A C compiler and the Python headers build the optional C extensions (the Redis backend's
# reader of values into page memory; everything falls back to pure Python without them).
need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
# Mooncake's "non-cuda" wheel still links libibverbs.so.1 (no RDMA hardware needed with tcp).
ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1 ' || need+=(libibverbs1)
"$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need+=(python3-dev)
# The redis backend's tests and benchmark start real redis-server processes.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# Every version comes from constraints.txt. torch first (an unpinned torch would pull a
# multi-GB CUDA build).
"${PIP[@]}" install -c constraints.txt torch numpy
"${PIP[@]}" install -c constraints.txt -r requirements-dev.txt
# s3 backend: boto3, and moto_server (a real S3-protocol server) for its tests and benchmark.
"${PIP[@]}" install -c constraints.txt boto3 moto flask flask-cors
"${PIP[@]}" install -c constraints.txt -e . -e backends/file -e backends/redis -e conformance \
    -e "backends/mooncake[cpu]"
"${PIP[@]}" install -c constraints.txt --no-deps -e backends/s3
