"""The L2 adapter contract on the target ``hicache check --engine lmcache-l2`` names.

Read from the environment (set by the runner, :mod:`..engines.lmcache_l2_run`):
``HICACHE_ENGINE_TARGET`` (a hicache-sdk backend, ``module:Class`` of an L2 adapter, or
``lmcache:TYPE``) and ``HICACHE_ENGINE_CONFIG`` (JSON: the backend's config, the class's
``adapter_params`` or the built-in type's keys). Each test gets its own store: a fresh
``namespace`` for a hicache-sdk backend, a fresh directory for ``lmcache:fs`` and
``lmcache:fs_native`` (under the given ``base_path``, if any); other targets share the store
the config names.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from ..engines.lmcache_l2 import adapter_spec, is_l2_class
from .lmcache_l2_tests import L2AdapterTests


class TestLMCacheL2(L2AdapterTests):
    @pytest.fixture
    def l2_spec(self, tmp_path: Path) -> dict[str, Any]:
        target = os.environ.get("HICACHE_ENGINE_TARGET", "")
        if not target:
            pytest.skip("HICACHE_ENGINE_TARGET is not set (run through `hicache check --engine lmcache-l2`)")
        config: dict[str, Any] = json.loads(os.environ.get("HICACHE_ENGINE_CONFIG") or "{}")
        ns = f"hicache-conformance-{uuid.uuid4().hex[:12]}"
        if target.startswith("lmcache:"):
            if target in ("lmcache:fs", "lmcache:fs_native"):  # a directory per test
                base = config.get("base_path")
                config["base_path"] = str(Path(base) / ns) if base else str(tmp_path / "fs")
        elif is_l2_class(target):
            inner = config.get("backend_config")
            if isinstance(inner, dict):
                config["backend_config"] = {**inner, "namespace": ns}
        else:
            config["namespace"] = ns
        return adapter_spec(target, config)
