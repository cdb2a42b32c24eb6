"""Outside backends written against the 0.1.0 public API keep certifying.

``v0_1_0/`` holds frozen copies (never edited; ``MANIFEST.sha256`` proves it): the doc
examples as they were at 0.1.0, a backend that restates ``capabilities`` beside
``transport_cls``, and one written from the month-old docs (capabilities restated on the
storage class, transport built in ``create_transport`` without ``transport_cls``). Each runs
through ``hicache check`` as a subprocess, as its author's CI would, and the JSON report is
read. A backend the SDK can no longer accept must fail at import or construction with one
error naming the class, the attribute and the change to make: never deep inside the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hicache_conformance.run import run_check

FROZEN = Path(__file__).resolve().parent / "v0_1_0"
HICACHE = str(Path(sys.executable).with_name("hicache"))


def test_frozen_fixtures_are_unchanged() -> None:
    for line in (FROZEN / "MANIFEST.sha256").read_text().splitlines():
        digest, name = line.split()
        got = hashlib.sha256((FROZEN / name).read_bytes()).hexdigest()
        assert got == digest, f"{name} is a frozen 0.1.0 fixture and must not be edited"


# ref, config, profile, the least number of tests that must pass, capabilities verified
CASES = [
    (
        "dirstore_backend:DirStorage",
        {"root": "{tmp}/dir"},
        "strict",
        50,
        ("persistent", "shared_across_processes", "zero_copy", "hybrid_pools", "mla", "delete"),
    ),
    # contract: only what SGLang 0.5.23 does (empty / duplicate batches, single-key calls and
    # first-write-wins are strict rules since the suite follows SGLang's own call path)
    ("contract_backend:DictPagesStorage", {}, "contract", 12, ("delete",)),
    (
        "restated_caps_backend:RestatedStorage",
        {"root": "{tmp}/restated"},
        "strict",
        50,
        ("persistent", "zero_copy", "hybrid_pools", "mla", "delete"),
    ),
    (
        "month_old_backend:MineStorage",
        {"root": "{tmp}/mine"},
        "strict",
        50,
        ("persistent", "shared_across_processes", "zero_copy", "hybrid_pools", "mla", "delete"),
    ),
]


@pytest.mark.parametrize("ref,config,profile,least,verified", CASES, ids=[c[0] for c in CASES])
def test_frozen_outside_backend_certifies(
    tmp_path: Path, ref: str, config: dict[str, Any], profile: str, least: int, verified: tuple[str, ...]
) -> None:
    config = {k: v.replace("{tmp}", str(tmp_path)) for k, v in config.items()}
    res = run_check(ref, config, "--matrix", "minimal", "-q", env={"PYTHONPATH": str(FROZEN)}, cwd=tmp_path)
    assert res.ok and not res.failures, (res.returncode, res.failures, res.output[-3000:])
    assert res.report["profile"] == profile
    totals = res.totals
    assert totals["failed"] == 0 and totals["passed"] >= least, totals
    for cap in verified:
        assert res.report["capabilities"]["verified"][cap] == "verified", (cap, res.report["capabilities"])


def test_a_restatement_that_disagrees_fails_at_import_with_one_error(tmp_path: Path) -> None:
    (tmp_path / "disagrees.py").write_text(
        "from dirstore_backend import DirConfig, DirTransport\n"
        "from hicache_sdk import Capabilities, PagedStorage\n"
        "class Claims(PagedStorage):\n"
        "    config_cls = DirConfig\n"
        "    transport_cls = DirTransport\n"
        "    capabilities = Capabilities(persistent=True, ttl=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{FROZEN}"}
    proc = subprocess.run(
        [HICACHE, "check", "disagrees:Claims", "--config", json.dumps({"root": str(tmp_path / "d")})],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 6, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Claims.capabilities disagrees with DirTransport.capabilities on" in lines[0]
    assert "delete the `capabilities = ...` line of Claims" in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout.strip() == ""
