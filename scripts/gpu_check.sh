#!/usr/bin/env bash
# Read-path GPU check: load-back bandwidth vs torch's pinned copy (>= 0.9, contiguous and
# 128 scattered 256 KiB pages) and the demo on the GPU. Without CUDA it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" scripts/gpu_check.py
