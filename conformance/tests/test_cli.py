from __future__ import annotations

import json
from pathlib import Path

from hicache_conformance.cli import main


def test_check_memory_passes_and_writes_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    junit = tmp_path / "out.xml"
    config = json.dumps({"namespace_salt": "s3cr3t-salt"})
    rc = main(
        [
            "memory",
            "--config",
            config,
            "--report",
            str(report),
            "--junitxml",
            str(junit),
            "--matrix",
            "minimal",
            "-q",
        ]
    )
    assert rc == 0
    data = json.loads(report.read_text())
    for key in ("suite_version", "backend", "capabilities", "levels", "waivers", "config", "tests", "ok"):
        assert key in data
    assert data["ok"] is True
    assert data["backend"]["name"] == "memory"
    assert data["backend"]["distribution"] == "hicache-sdk"
    assert set(data["capabilities"]["declared"]) == set(data["capabilities"]["verified"])
    assert {"L0-shape", "L1-semantics", "L2-lifecycle", "L3-concurrency", "L4-faults", "stateful"} <= set(
        data["levels"]
    )
    assert all(c["failed"] == 0 for c in data["levels"].values())
    assert data["levels"]["L4-faults"]["passed"] == 3
    text = report.read_text()
    assert "s3cr3t" not in text
    assert data["config"]["namespace_salt"] == "***"
    assert junit.exists() and "testcase" in junit.read_text()


def test_check_level_filter_and_failure_exit(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    rc = main(
        [
            "hicache_conformance.broken.semantic:ExistsCountsNonConsecutive",
            "--level",
            "L1",
            "--matrix",
            "minimal",
            "--report",
            str(report),
            "-q",
            "-k",
            "leading_run",
        ]
    )
    assert rc == 1
    data = json.loads(report.read_text())
    assert set(data["levels"]) == {"L1-semantics"}
    assert data["levels"]["L1-semantics"]["failed"] == 1


def test_check_rejects_unknown_level() -> None:
    assert main(["memory", "--level", "L9"]) == 2
