#!/usr/bin/env bash
# Install as a user without a C compiler does, and check that what users run works there.
#
# A fresh venv (.venv-nocc), no compiler on PATH (CC=false, and cc/gcc shadowed by a failing
# stub), build isolation on, regular (non-editable) installs: first the core, the file
# backend and the conformance suite alone, where the README's main job (`hicache demo`, then
# `hicache ping file`) and `hicache check file` (L0) must pass; then the other backends (their
# optional C parts not built) and the test tools, and the whole core test suite (tests/)
# runs against those installs. Every C extension of ours is optional, so nothing here may
# need one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=.venv-nocc
rm -rf "$V"
"$PY" -m venv "$V"
stub=$(mktemp -d -t hicache-nocc.XXXXXX)
trap 'rm -rf "$stub"' EXIT
for tool in cc gcc c++ g++ clang; do
    printf '#!/bin/sh\necho "no C compiler here ($0)" >&2\nexit 1\n' >"$stub/$tool"
    chmod +x "$stub/$tool"
done
export PATH="$stub:$PATH" CC=false CXX=false
PIP=("$V/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -c constraints.txt torch numpy
"${PIP[@]}" install -c constraints.txt . ./backends/file ./conformance
if find "$V/lib" -path '*hicache*' -name '*.so' | grep -q .; then
    echo "a compiled extension was built without a compiler:" >&2
    find "$V/lib" -path '*hicache*' -name '*.so' >&2
    exit 1
fi
root=$(mktemp -d -t hicache-nocc-demo.XXXXXX)
"$V/bin/hicache" backends
"$V/bin/hicache" demo
"$V/bin/hicache" ping file --config "{\"root\": \"$root/ping\"}" --pages 16
# L0 here (the command works in this minimal install); the core tests below run the
# whole default profile in this venv (tests/cli/test_cli_certify.py)
"$V/bin/hicache" check file --config "{\"root\": \"$root/check\"}" --level L0 -q | tail -n 3
rm -rf "$root"
"${PIP[@]}" install -c constraints.txt ./backends/redis ./backends/s3 "./backends/mooncake[cpu]" \
    pytest pytest-timeout pytest-xdist hypothesis matplotlib prometheus-client pyyaml
if find "$V/lib" -path '*hicache*' -name '*.so' | grep -q .; then
    echo "a compiled extension was built without a compiler" >&2
    exit 1
fi
# The core test suite against the installed packages (pytest's own script: the checkout's
# hicache_sdk/ is not put on sys.path, so the installs are what is imported).
"$V/bin/pytest" -q -p no:cacheprovider tests "$@"
