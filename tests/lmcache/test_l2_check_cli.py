"""``hicache check TARGET --engine lmcache-l2``: the L2 contract through the CLI, on our
adapter over the file backend, on a broken binding, and on LMCache's own file-system
adapters (``fs``, ``fs_native``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hicache_conformance.cli import main


def _report(path: Path) -> dict[str, dict[str, str]]:
    doc = json.loads(path.read_text())
    assert doc["engine"] == "lmcache-l2"
    tests: dict[str, dict[str, str]] = doc["tests"]
    return tests


def _failed(tests: dict[str, dict[str, str]]) -> list[str]:
    return sorted(k.rsplit("::", 1)[-1] for k, v in tests.items() if v["outcome"] == "failed")


def test_ours_on_file_passes(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cfg = json.dumps({"root": str(tmp_path / "kv")})
    assert main(["file", "--engine", "lmcache-l2", "--config", cfg, "--report", str(report), "-q"]) == 0
    tests = _report(report)
    assert _failed(tests) == [] and len(tests) >= 13
    assert tests["TestLMCacheL2::test_32_mib_chunks_round_trip"]["outcome"] == "passed"


def test_a_broken_binding_fails_its_test(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cfg = json.dumps({"backend": "file", "backend_config": {"root": str(tmp_path / "kv")}})
    target = "hicache_conformance.broken.lmcache_l2:SaltBlindL2Adapter"
    assert main([target, "--engine", "lmcache-l2", "--config", cfg, "--report", str(report), "-q"]) == 1
    assert _failed(_report(report)) == ["test_each_key_field_isolates[salt]"]


@pytest.mark.parametrize("target", ["lmcache:fs", "lmcache:fs_native"])
def test_lmcaches_own_fs_adapters_are_judged(target: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cfg = json.dumps({"base_path": str(tmp_path / "fs")})
    assert main([target, "--engine", "lmcache-l2", "--config", cfg, "--report", str(report), "-q"]) == 1
    # LMCache 0.5.6's fs adapters read a chunk into a smaller buffer, and keep no layout
    assert _failed(_report(report)) == [
        "test_another_dtype_of_the_same_size_misses",
        "test_wrong_size_loads_miss",
    ]
