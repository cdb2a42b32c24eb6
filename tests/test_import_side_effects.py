"""Importing ``hicache_sdk`` (and its resilience layer, adapter and SGLang bridge) changes no
process-wide state: no import hook, no ``atexit`` hook, no thread, no CPU affinity, no
warning filter, no signal handler. Checked in a fresh interpreter, after importing the
third-party packages it depends on (torch registers hooks of its own)."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import atexit, json, os, signal, sys, threading, warnings

def state():
    return {
        "meta_path": [type(f).__name__ for f in sys.meta_path],
        "path_hooks": len(sys.path_hooks),
        "atexit": atexit._ncallbacks(),
        "threads": sorted(t.name for t in threading.enumerate()),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
        "warning_filters": len(warnings.filters),
        "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)},
    }

import numpy, torch  # third-party dependencies: their own import-time hooks are not ours
before = state()
import hicache_sdk, hicache_sdk.resilience, hicache_sdk.resilience.deadline, hicache_sdk.paged
import hicache_sdk.sglang, hicache_sdk.kit, hicache_sdk.memory
after = state()
from hicache_sdk.resilience.deadline import DeadlineRunner
r = DeadlineRunner(1)
made = atexit._ncallbacks()
r.shutdown()
print(json.dumps({"before": before, "after": after, "atexit_after_runner": made}))
"""


def test_importing_the_sdk_changes_no_process_wide_state() -> None:
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.splitlines()[-1])
    assert got["after"] == got["before"]
    # the exit drain is registered by the first runner, not by the import
    assert got["atexit_after_runner"] == got["before"]["atexit"] + 1
