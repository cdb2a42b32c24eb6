"""A minimal test-only backend shared by the registry tests."""

from __future__ import annotations

from typing import Any

from hicache_sdk.spec import HiCacheStorage


class Recorder(HiCacheStorage):
    """Records what it was constructed with."""

    def __init__(self, storage_config: Any, kwargs: Any) -> None:
        self.storage_config = storage_config
        self.kwargs = kwargs

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return None

    def batch_get(self, keys: Any, target_locations: Any = None, target_sizes: Any = None) -> Any:
        return [None] * len(keys)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return True

    def batch_set(
        self, keys: Any, values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        return True

    def exists(self, key: str) -> bool:
        return False
