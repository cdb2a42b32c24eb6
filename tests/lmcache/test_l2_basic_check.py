"""LMCache's own check tool (``python -m lmcache.v1.basic_check --mode test_l2_adapter``)
through our adapter, its printed output judged (it exits 0 after a failed check)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hicache_conformance.engines.lmcache_check import judge, run_l2_check
from hicache_conformance.engines.lmcache_l2 import adapter_spec

BIG = os.environ.get("HICACHE_LMCACHE_BIG") == "1"


@pytest.mark.parametrize("backend", ["file", "redis", "s3", "mooncake"])
def test_lmcache_check_passes_through_our_adapter(
    backend: str, backend_config: Callable[[str], dict[str, Any]]
) -> None:
    # 16 keys; 32 MiB objects (16 Mi float16 elements) when HICACHE_LMCACHE_BIG=1, else 1 MiB
    size = (16 << 20) if BIG else (512 << 10)
    run = run_l2_check(
        adapter_spec(backend, backend_config(backend)), num_keys=16, obj_size=size, kv_dtype="float16"
    )
    assert run.passed, f"{run.problems}\n{run.output[-3000:]}"
    assert "=== Testing L2 adapter #0 (L2Adapter) ===" in run.output


def test_a_broken_binding_fails_the_parser(backend_config: Callable[[str], dict[str, Any]]) -> None:
    target = "hicache_conformance.broken.lmcache_l2:ForgetfulStoreL2Adapter"
    spec = adapter_spec(target, {"backend": "file", "backend_config": backend_config("file")})
    run = run_l2_check(spec, num_keys=4)
    assert run.returncode == 0  # the tool itself says nothing
    assert not run.passed
    assert any("0/4 found" in p for p in run.problems), run.problems


def test_judge_rules() -> None:
    good = "Phase 1\n  Validation: 4/4 correctly absent\n  Validation: 4/4 found\n"
    assert judge(0, good) == []
    assert judge(1, good) == ["exit status 1"]
    assert judge(0, good + "  Validation (loaded): 3/4\n") == ["Validation (loaded): 3/4"]
    assert judge(0, good + "  Test Failed - Error: boom\n") == ["Test Failed - Error: boom"]
    assert judge(0, good + "  Store: FAIL\n") == ["Store: FAIL"]
    assert judge(0, "nothing", min_validations=1) == ["0 Validation line(s), expected at least 1"]
