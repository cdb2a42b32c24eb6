"""LMCache in-process connectors, each broken in exactly one way (importing this module
imports LMCache).

Each is :class:`hicache_sdk.lmcache.ConnectorAdapter` building a connector with one fault;
``FAILS`` names the rule it breaks. Configure one as ``remote_storage_plugin.hicache.class_name``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_sdk.lmcache.connector import ConnectorAdapter, TransportConnector
from hicache_sdk.lmcache.settings import L2Settings

__all__ = ["BlocksTheLoopAdapter", "ReleasesOnPutAdapter"]


class _ReleasesOnPut(TransportConnector):
    async def put(self, key: Any, memory_obj: Any) -> None:
        await super().put(key, memory_obj)
        memory_obj.ref_count_down()  # LMCache's instrumented wrapper releases it again


class _BlocksTheLoop(TransportConnector):
    async def exists(self, key: Any) -> bool:
        return self.exists_sync(key)

    async def get(self, key: Any) -> Any:
        return self._get_sync(key)

    async def put(self, key: Any, memory_obj: Any) -> None:
        self._put_sync(key, memory_obj)


class _Broken(ConnectorAdapter):
    connector_cls: ClassVar[type[TransportConnector]] = TransportConnector

    def create_connector(self, context: Any) -> TransportConnector:
        from hicache_sdk.lmcache.connector import _params

        plugin = context.url[len("plugin://") :]
        extra = getattr(context.config, "extra_config", None)
        return self.connector_cls(context, L2Settings.from_mapping(_params(extra, plugin)))


class ReleasesOnPutAdapter(_Broken):
    """``put`` releases the caller's object: it is released once too many."""

    FAILS: ClassVar[str] = "put never releases the caller's object"
    connector_cls = _ReleasesOnPut


class BlocksTheLoopAdapter(_Broken):
    """The ``async`` methods do their I/O on LMCache's event loop."""

    FAILS: ClassVar[str] = "I/O never runs on LMCache's event loop"
    connector_cls = _BlocksTheLoop
