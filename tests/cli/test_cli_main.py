"""``hicache`` dispatch: ``--version``, ``backends``, ``check`` hand-over, usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from hicache_sdk import registry
from hicache_sdk.cli import COMMANDS, main
from hicache_sdk.cli.check import INSTALL_HINT
from hicache_sdk.memory import MemoryStorage

HICACHE = Path(sys.executable).parent / "hicache"
KEYS = [
    "accelerators",
    "capabilities",
    "distribution",
    "error",
    "importable",
    "install",
    "name",
    "source",
    "value",
    "version",
]


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv(registry.ALLOW_LIST_ENV, raising=False)
    registry.refresh()
    yield
    registry.refresh()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"hicache (hicache-sdk) {version('hicache-sdk')}"


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "usage: hicache" in err
    for cmd in COMMANDS:
        assert cmd.name in err


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_backends_json_is_stable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "cli_extra-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cli-extra\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text(
        "[hicache_sdk.backends]\nextra-broken = hicache_cli_absent_mod:Store\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh()
    assert main(["backends", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list) and all(sorted(d) == KEYS for d in data)
    by = {(d["name"], d["source"]): d for d in data}
    memory = by[("memory", "entry_point")]
    assert memory["distribution"] == "hicache-sdk" and memory["value"] == "hicache_sdk.memory:MemoryStorage"
    if memory["importable"]:
        assert memory["error"] is None and isinstance(memory["capabilities"], dict)
        assert "zero_copy" in memory["capabilities"]
    broken = by[("extra-broken", "entry_point")]
    assert broken["importable"] is False and broken["version"] == "1.2"
    assert (
        "entry point 'extra-broken' = 'hicache_cli_absent_mod:Store' in cli-extra's metadata"
        in broken["error"]
    )
    discovered = registry._discovery.discover()
    for name, dist in registry.KNOWN_BACKENDS.items():
        if name not in discovered:
            entry = by[(name, "not_installed")]
            assert entry["install"] == f"pip install {dist}" and entry["importable"] is False


def test_backends_human(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Installed backends:")
    assert "memory" in out and "hicache-sdk" in out
    discovered = registry._discovery.discover()
    missing = [n for n in registry.KNOWN_BACKENDS if n not in discovered]
    if missing:
        assert "Known backends not installed:" in out
        for name in missing:
            assert f"pip install hicache-backend-{name}" in out


def test_check_dispatches_to_the_conformance_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    result: list[Any] = [3]

    def fake_main(argv: list[str]) -> Any:
        seen.append(argv)
        return result[0]

    pkg = types.ModuleType("hicache_conformance")
    cli = types.ModuleType("hicache_conformance.cli")
    cli.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hicache_conformance", pkg)
    monkeypatch.setitem(sys.modules, "hicache_conformance.cli", cli)
    assert main(["check", "memory", "--config", "{}", "-x", "--help"]) == 3
    assert seen == [["memory", "--config", "{}", "-x", "--help"]]
    result[0] = None
    assert main(["check"]) == 0
    assert seen[-1] == []


def test_check_without_the_suite_exits_2_with_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both entries: the suite's cli module may already be imported by an earlier test.
    monkeypatch.setitem(sys.modules, "hicache_conformance", None)
    monkeypatch.setitem(sys.modules, "hicache_conformance.cli", None)
    assert main(["check", "memory"]) == 2
    assert capsys.readouterr().err.strip() == INSTALL_HINT
    assert INSTALL_HINT == "hicache check needs the conformance suite: pip install hicache-conformance"


def test_check_with_a_broken_suite_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = types.ModuleType("hicache_conformance.cli")  # no main
    monkeypatch.setitem(sys.modules, "hicache_conformance", types.ModuleType("hicache_conformance"))
    monkeypatch.setitem(sys.modules, "hicache_conformance.cli", cli)
    assert main(["check"]) == 2
    assert "cannot be imported" in capsys.readouterr().err


def test_console_script_backends_json() -> None:
    proc = subprocess.run([str(HICACHE), "backends", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert "memory" in {d["name"] for d in data}
    version_proc = subprocess.run([str(HICACHE), "--version"], capture_output=True, text=True, timeout=60)
    assert version_proc.returncode == 0 and version_proc.stdout.startswith("hicache (hicache-sdk) ")


class _Accelerated(MemoryStorage):
    """A runtime backend that reports one optional compiled part, built, and one not."""

    @classmethod
    def accelerators(cls) -> dict[str, bool]:
        return {"fast_reader": True, "fast_writer": False}


def test_backends_shows_whether_optional_accelerators_are_built(capsys: pytest.CaptureFixture[str]) -> None:
    registry.register_backend("accel-demo", _Accelerated)
    try:
        assert main(["backends", "--json"]) == 0
        data = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
        assert data["accel-demo"]["accelerators"] == {"fast_reader": True, "fast_writer": False}
        assert data["memory"]["accelerators"] == {}
        assert main(["backends"]) == 0
        out = capsys.readouterr().out
        assert "accelerators: fast_reader (built), fast_writer (not built: pure-Python path)" in out
    finally:
        registry.unregister_backend("accel-demo")
