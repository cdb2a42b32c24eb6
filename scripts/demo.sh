#!/usr/bin/env bash
# Set up, then run the main job on the embedded default backend (local files):
# two engine processes over one local-file store (`hicache demo`), then a round trip (`hicache ping file`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
root=$(mktemp -d -t hicache-demo.XXXXXX)
trap 'rm -rf "$root"' EXIT
.venv/bin/hicache backends
.venv/bin/hicache demo
.venv/bin/hicache ping file --config "{\"root\": \"$root\"}" --pages 16
