"""The linker contract (``hicache_conformance.linker_contract``) inside the real SGLang
0.5.23 (collected only in ``tox -e sglang``): ``TransportLinker`` passes every check on the
file backend, and each broken linker of ``hicache_conformance.broken.linkers`` fails the
check named for its fault, with its reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hicache_conformance.broken.linkers import BROKEN_LINKERS
from hicache_conformance.linker_contract import CHECKS, LinkerEnv, linker_env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[LinkerEnv]:
    e = linker_env(
        "hicache_sdk.sglang.linker:TransportLinker",
        {"backend": "file", "backend_config": {"root": str(tmp_path)}},
    )
    yield e
    e.close()


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_transport_linker_passes(env: LinkerEnv, check: str) -> None:
    CHECKS[check](env)


@pytest.mark.parametrize("name", sorted(BROKEN_LINKERS))
def test_broken_linker_fails_its_check(name: str, tmp_path: Path) -> None:
    _, check, reason = BROKEN_LINKERS[name]
    e = linker_env(
        f"hicache_conformance.broken.linkers:{name}",
        {"backend": "file", "backend_config": {"root": str(tmp_path)}},
    )
    try:
        with pytest.raises(AssertionError, match=reason):
            CHECKS[check](e)
    finally:
        e.close()


def test_hicache_check_engine_sglang_linker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``hicache check NAME --engine sglang-linker``: the transport tests, then every check
    (exit 0); a broken linker by ``module:Class`` fails with its check named (exit 1)."""
    import json

    from hicache_conformance.cli import main as check_main

    cfg = json.dumps({"root": str(tmp_path / "ok")})
    (tmp_path / "ok").mkdir()
    report = tmp_path / "r.json"
    assert check_main(["file", "--config", cfg, "--engine", "sglang-linker", "--report", str(report)]) == 0
    doc = json.loads(report.read_text())
    assert doc["linker"] == "hicache_sdk.sglang.linker:TransportLinker"
    assert {k: v["outcome"] for k, v in doc["checks"].items()} == {k: "passed" for k in CHECKS}
    capsys.readouterr()
    broken = "hicache_conformance.broken.linkers:LongestPrefixOnly"
    extra = json.dumps({"backend": "file", "backend_config": {"root": str(tmp_path)}})
    assert check_main([broken, "--config", extra, "--engine", "sglang-linker"]) == 1
    out = capsys.readouterr().out
    assert "FAIL lookup_lists_every_prefix: lookup must list every restorable prefix" in out
    assert "PASS layers_land_before_wait_returns" in out
