"""LMCache's own smoke check (``python -m lmcache.v1.basic_check``) run on an L2 adapter,
with its printed output judged, since the tool exits 0 after a failed check.

A run passes when the tool exited 0, printed at least one ``Validation`` line, every
``Validation ...: A/B`` line has ``A == B``, and no line says ``FAIL``, ``Error`` or
``Test Failed``. :func:`judge` returns the reasons it does not pass (empty: it passes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CheckRun", "judge", "run_l2_check", "run_remote_check"]

_VALIDATION = re.compile(r"Validation[^:]*:\s*(\d+)/(\d+)")
_BAD = re.compile(r"\bFAIL\b|\bError\b|Test Failed")


@dataclass(frozen=True)
class CheckRun:
    """One run of the tool: its exit status and output, and :func:`judge`'s verdict."""

    returncode: int
    output: str
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems


def judge(returncode: int, output: str, *, min_validations: int = 1) -> list[str]:
    """Why this output of ``basic_check`` is not a pass (``[]`` when it is)."""
    problems = []
    if returncode != 0:
        problems.append(f"exit status {returncode}")
    found = 0
    for line in output.splitlines():
        m = _VALIDATION.search(line)
        if m:
            found += 1
            if m.group(1) != m.group(2):
                problems.append(line.strip())
        elif _BAD.search(line):
            problems.append(line.strip())
    if found < min_validations:
        problems.append(f"{found} Validation line(s), expected at least {min_validations}")
    return problems


def run_l2_check(
    spec: Mapping[str, Any], *, num_keys: int = 16, obj_size: int | None = None, kv_dtype: str | None = None,
    timeout_s: float = 600.0,
) -> CheckRun:  # fmt: skip
    """Run ``basic_check --mode test_l2_adapter`` on the adapter ``spec`` (the
    ``--l2-adapter`` JSON) in a subprocess of this interpreter; ``obj_size`` in elements of
    ``kv_dtype`` (the tool's units)."""
    args = [sys.executable, "-m", "lmcache.v1.basic_check", "--mode", "test_l2_adapter",
            "--l2-adapter", json.dumps(dict(spec)), "--num-keys", str(num_keys)]  # fmt: skip
    if obj_size is not None:
        args += ["--obj-size", str(obj_size)]
    if kv_dtype is not None:
        args += ["--kv-dtype", kv_dtype]
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false"}
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return CheckRun(124, text, (f"did not finish in {timeout_s:.0f} s",))
    # judged on stdout (the tool's report); LMCache's log lines go to stderr
    problems = judge(out.returncode, out.stdout, min_validations=4)  # absent, found, loaded, content
    return CheckRun(out.returncode, out.stdout + out.stderr, tuple(problems))


def run_remote_check(config_file: str, *, num_keys: int = 16, timeout_s: float = 600.0) -> CheckRun:
    """Run ``basic_check --mode test_remote`` with the LMCache YAML ``config_file``
    (``LMCACHE_CONFIG_FILE``; for a plugin, ``remote_url: plugin://<name>``)."""
    args = [
        sys.executable,
        "-m",
        "lmcache.v1.basic_check",
        "--mode",
        "test_remote",
        "--num-keys",
        str(num_keys),
    ]
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "LMCACHE_CONFIG_FILE": config_file}
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return CheckRun(124, "", (f"did not finish in {timeout_s:.0f} s",))
    # the remote mode validates: absent, put, found, not None, content
    problems = judge(out.returncode, out.stdout, min_validations=4)
    return CheckRun(out.returncode, out.stdout + out.stderr, tuple(problems))
