"""``hicache check --sglang-version``: the release the suite certifies against, and the skips
(never failures) under a release whose controller the suite does not model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hicache_conformance import release
from hicache_conformance.cli import main


def _check(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "r.json"
    argv = ["memory", "--matrix", "minimal", "--profile", "contract", "--report", str(report), "-q", *extra]
    rc = main(argv)
    return rc, json.loads(report.read_text()) if report.exists() else {}


def test_unmodelled_release_skips_controller_tests_with_the_reason(tmp_path: Path) -> None:
    rc, data = _check(tmp_path, "--sglang-version", "0.5.9")
    assert rc == 0, data.get("levels")
    assert data["sglang"]["profile"] == "0.5.9"
    assert data["sglang"]["sglang_code_ran"] is False and data["sglang"]["controller_modelled"] is False
    assert all(c["failed"] == 0 for c in data["levels"].values())
    text = json.dumps(data["tests"])
    assert "controller model for 0.5.9 not built" in text
    assert sum(c["passed"] for c in data["levels"].values()) > 0  # what does not drive the controller ran


def test_modelled_release_runs_the_controller_tests(tmp_path: Path) -> None:
    rc, data = _check(tmp_path, "--sglang-version", "0.5.23", "--level", "L1")
    assert rc == 0
    assert data["sglang"]["profile"] == "0.5.23" and data["sglang"]["controller_modelled"] is True
    assert "not built" not in json.dumps(data["tests"])
    assert data["levels"]["L1-semantics"]["passed"] >= 10


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("0.4.9", "--sglang-version 0.4.9: no contract profile; hicache-sdk supports SGLang 0.5.3 to 0.5.23"),
        ("latest", "--sglang-version: not an SGLang version: 'latest'"),
    ],
)
def test_a_version_without_profile_is_a_usage_error(
    tmp_path: Path, capsys: Any, version: str, message: str
) -> None:
    rc, _ = _check(tmp_path, "--sglang-version", version)
    assert rc == 2
    assert message in capsys.readouterr().err


def test_the_version_must_be_the_installed_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release, "installed_sglang_version", lambda: "0.5.9")
    assert release.check_requested("0.5.9") is None
    why = release.check_requested("0.5.23")
    assert why is not None and "0.5.23" in why and "installed SGLang 0.5.9" in why
    monkeypatch.setattr(release, "installed_sglang_version", lambda: "0.5.3.post3")
    assert release.check_requested("0.5.3") is None
