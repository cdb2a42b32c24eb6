"""The base-class route: the full suite, full matrix, on ``memory`` with its test-only fault hooks."""

from __future__ import annotations

from typing import Any

import pytest
from hicache_conformance import BackendSuite
from hicache_conformance.faults import memory_with_faults, private_store_config

from hicache_sdk.memory import MemoryStorage

_Backend, _hooks = memory_with_faults(MemoryStorage)


class TestMemory(BackendSuite):
    backend = _Backend
    matrix = "full"
    config = {"transfer_timeout_s": 1.0}
    call_deadline_s = 3.0

    @pytest.fixture
    def fault_hooks(self) -> Any:
        return _hooks()

    def capacity_config(self, capacity_bytes: int) -> dict[str, Any]:
        return private_store_config(capacity_bytes)


class TestMemorySGLangFile(BackendSuite):
    """``sglang-file`` names on ``memory`` (a private store per test namespace)."""

    backend = MemoryStorage
    matrix = "minimal"
    config = {"key_scheme": "sglang-file"}
    stateful_examples = 3


class TestMemorySGLangMooncake(TestMemorySGLangFile):
    config = {"key_scheme": "sglang-mooncake"}
