"""Fixtures of the paged-adapter tests: a private memory store per test and a storage
factory over it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from paged_helpers import StorageFactory

from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.spec import HiCacheStorageConfig


@pytest.fixture
def store() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    drop_store(name)


@pytest.fixture
def make_storage(store: str) -> StorageFactory:
    """``make_storage(pool=None, cls=MemoryStorage, **config_fields_and_extra)``."""

    def make(
        pool: Any = None,
        *,
        cls: type[MemoryStorage] = MemoryStorage,
        extra: dict[str, Any] | None = None,
        sidecars: dict[str, Any] | None = None,
        **fields: Any,
    ) -> MemoryStorage:
        fields.setdefault("model_name", "org/model")
        sc = HiCacheStorageConfig(extra_config={"store": store, **(extra or {})}, **fields)
        s = cls(sc, {})
        if pool is not None:
            s.register_mem_pool_host(pool)
            s.register_mem_host_pool_v2(pool, "kv")
        for name, p in (sidecars or {}).items():
            s.register_mem_host_pool_v2(p, name)
        if pool is not None:
            s.on_host_pools_registered()
        return s

    return make
