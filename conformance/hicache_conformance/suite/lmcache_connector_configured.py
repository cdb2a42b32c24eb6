"""The in-process connector contract on the target ``hicache check --engine
lmcache-connector`` names.

Read from the environment (set by the runner, :mod:`..engines.lmcache_l2_run`):
``HICACHE_ENGINE_TARGET`` (a hicache-sdk backend, ``module:Class`` of a connector or its
adapter, or ``lmcache:URL``) and ``HICACHE_ENGINE_CONFIG`` (JSON: the backend's config, our
adapter's ``adapter_params``, or LMCache configuration keys). A hicache-sdk backend gets a
fresh ``namespace`` per test; other targets share the store their configuration names
(every test uses chunk hashes of its own).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from ..engines.lmcache_connector import connector_class, connector_config, is_ours
from .lmcache_connector_tests import ConnectorTests


class TestLMCacheConnector(ConnectorTests):
    @pytest.fixture
    def connector_config(self) -> dict[str, Any]:
        target = os.environ.get("HICACHE_ENGINE_TARGET", "")
        if not target:
            pytest.skip(
                "HICACHE_ENGINE_TARGET is not set (run through `hicache check --engine lmcache-connector`)"
            )
        config: dict[str, Any] = json.loads(os.environ.get("HICACHE_ENGINE_CONFIG") or "{}")
        ns = f"hicache-conformance-{uuid.uuid4().hex[:12]}"
        if not target.startswith("lmcache:"):
            cls = connector_class(target)
            if cls is None:  # a hicache-sdk backend
                config["namespace"] = ns
            elif is_ours(cls) and isinstance(config.get("backend_config"), dict):
                config["backend_config"] = {**config["backend_config"], "namespace": ns}
        return connector_config(target, config)
