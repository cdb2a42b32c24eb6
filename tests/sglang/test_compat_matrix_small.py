"""The small part of the compatibility matrix that runs with every test run (``tox -e
sglang``): SGLang 0.5.23's own ``file``, ``sim`` and ``shm`` backends, built by SGLang's
``StorageBackendFactory`` with SGLang's default configuration (``scripts/compat``), through
``hicache check`` with the ``contract`` profile, on the core round-trip rules and the
smallest host-pool matrix. The whole matrix is ``tox -e matrix`` (``docs/compatibility.md``).

* ``file`` (``HiCacheFile``) passes;
* ``sim`` fails: it stores keys only and reports hits for pages it never wrote;
* ``shm`` fails: every write returns True and nothing is stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / "scripts" / "compat"

#: The round-trip rules (byte-exact reads of what was written, on every path the backend
#: implements); enough to tell a backend that stores pages from one that does not.
SELECTION = "test_get_after_set_is_byte_exact or test_missing_page_is_a_miss or test_sidecar_pool_round_trip"


def _check(row: str, tmp_path: Path) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / f"{row}.json"
    argv = [
        sys.executable, "-c", "from hicache_conformance.cli import console_main; console_main()",
        f"compat_backends:{row}", "--config", json.dumps({"compat_root": str(tmp_path / "data")}),
        "--isolate", "compat_namespace={namespace}", "--profile", "contract", "--matrix", "minimal",
        "--sglang-backend", row,
        "--level", "L1", "-k", SELECTION, "--report", str(report), "-q",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(COMPAT), os.environ.get("PYTHONPATH", "")])}
    env.pop("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", None)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    out = proc.stdout + proc.stderr
    assert report.exists(), f"hicache check {row} wrote no report (exit {proc.returncode}):\n{out[-3000:]}"
    return proc.returncode, json.loads(report.read_text(encoding="utf-8")), out


def _outcomes(report: dict[str, Any]) -> dict[str, set[str]]:
    by: dict[str, set[str]] = {}
    for nodeid, t in report["tests"].items():
        by.setdefault(t["outcome"], set()).add(nodeid.rsplit("::", 1)[-1].split("[", 1)[0])
    return by


def test_sglang_file_passes_the_contract(tmp_path: Path) -> None:
    rc, report, out = _check("file", tmp_path)
    assert rc == 0 and report["ok"] is True, out[-3000:]
    by = _outcomes(report)
    assert "test_get_after_set_is_byte_exact" in by.get("passed", set())
    assert report["backend"]["class"] == "compat_backends:file"
    assert report["profile"] == "contract"


@pytest.mark.parametrize("row", ["sim", "shm"])
def test_sglang_backends_that_store_no_bytes_fail(row: str, tmp_path: Path) -> None:
    rc, report, out = _check(row, tmp_path)
    assert rc == 1 and report["ok"] is False, out[-3000:]
    by = _outcomes(report)
    # the byte-exact round trip is what fails: a write is accepted, no page comes back
    assert "test_get_after_set_is_byte_exact" in by.get("failed", set()), by
    assert "test_missing_page_is_a_miss" in by.get("passed", set()), by
