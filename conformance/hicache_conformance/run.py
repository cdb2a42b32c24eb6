"""Run ``hicache check`` as a user's CI does, in a subprocess, and read its JSON report.

For tests that certify what users run (the command line, the documented configs)::

    result = run_check("redis", {"url": url}, "--matrix", "minimal")
    assert result.ok and result.totals["failed"] == 0, result.failures

Nothing here imports the backend: the subprocess does, exactly as ``hicache check`` would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CheckResult", "run_check"]


@dataclass(frozen=True)
class CheckResult:
    """What one ``hicache check`` run said: exit code, JSON report (``{}`` when none was
    written), and its combined output (stdout then stderr)."""

    returncode: int
    report: dict[str, Any]
    output: str
    seconds: float = 0.0
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.report.get("ok") is True

    @property
    def totals(self) -> dict[str, int]:
        """passed / skipped / failed / waived summed over the levels."""
        out = {"passed": 0, "skipped": 0, "failed": 0, "waived": 0}
        for counts in self.report.get("levels", {}).values():
            for k in out:
                out[k] += int(counts.get(k, 0))
        return out

    def outcomes(self, outcome: str) -> dict[str, str]:
        """Test id -> reason of every test with ``outcome`` (``"failed"``, ``"skipped"``)."""
        return {
            name: str(t.get("reason") or "")
            for name, t in self.report.get("tests", {}).items()
            if t.get("outcome") == outcome
        }

    @property
    def failures(self) -> dict[str, str]:
        return self.outcomes("failed")

    @property
    def summary_line(self) -> str:
        """The ``NAME: PASS|FAIL (profile ...)`` line of the terminal summary ("" if none)."""
        for line in reversed(self.output.splitlines()):
            if ": PASS (profile " in line or ": FAIL (profile " in line:
                return line.strip()
        return ""


def run_check(
    backend: str,
    config: Mapping[str, Any] | str | None = None,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float = 600.0,
    executable: str | None = None,
) -> CheckResult:
    """``hicache check BACKEND --config CONFIG ARGS... --report R`` in a subprocess.

    ``config`` is a mapping (passed as inline JSON), an ``@file`` / JSON string, or ``None``.
    ``executable`` defaults to the ``hicache`` script next to this Python. ``env`` is merged
    over this process's environment."""
    import time

    exe = executable or str(Path(sys.executable).with_name("hicache"))
    cmd = [exe, "check", backend]
    if config is not None:
        cmd += ["--config", config if isinstance(config, str) else json.dumps(dict(config))]
    merged = {**os.environ, **(env or {})}
    with tempfile.TemporaryDirectory(prefix="hicache-run-check-") as tmp:
        report = Path(tmp) / "report.json"
        t0 = time.monotonic()
        proc = subprocess.run(
            [*cmd, *args, "--report", str(report)],
            env=merged,
            cwd=cwd or tmp,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        seconds = time.monotonic() - t0
        data = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    return CheckResult(proc.returncode, data, proc.stdout + proc.stderr, seconds, dict(env or {}))
