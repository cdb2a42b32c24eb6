"""LMCache in-process connectors, each broken in exactly one way (importing this module
imports LMCache).

Each is :class:`hicache_sdk.lmcache.ConnectorAdapter` building a connector with one fault;
``FAILS`` names the :class:`~..suite.lmcache_connector_tests.ConnectorTests` test that must
fail for it. Judge one with ``hicache check hicache_conformance.broken.lmcache_connector:CLASS
--engine lmcache-connector --config '{"backend": "file", "backend_config": {...}}'``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

from hicache_sdk.lmcache.connector import ConnectorAdapter, TransportConnector, _params
from hicache_sdk.lmcache.objects import Chunk
from hicache_sdk.lmcache.settings import L2Settings

__all__ = [
    "BlocksTheLoopAdapter",
    "LeaksFailedGetsAdapter",
    "LoopBoundExistsSyncAdapter",
    "ReleasesOnPutAdapter",
    "TagBlindAdapter",
]


class _ReleasesOnPut(TransportConnector):
    async def put(self, key: Any, memory_obj: Any) -> None:
        await super().put(key, memory_obj)
        memory_obj.ref_count_down()  # LMCache's instrumented wrapper releases it again


class _BlocksTheLoop(TransportConnector):
    async def exists(self, key: Any) -> bool:
        return self.exists_sync(key)

    async def get(self, key: Any) -> Any:
        return self._get_many([key])[0]

    async def put(self, key: Any, memory_obj: Any) -> None:
        self._put_many([key], [memory_obj])

    async def batched_get(self, keys: list[Any]) -> list[Any]:
        return self._get_many(keys)

    async def batched_put(self, keys: list[Any], memory_objs: list[Any]) -> None:
        self._put_many(keys, memory_objs)


class _TagBlind(TransportConnector):
    def object_name(self, key: Any) -> str:
        if getattr(key, "tags", None):
            key = type(key)(key.model_name, key.world_size, key.worker_id, key.chunk_hash, key.dtype)
        return super().object_name(key)


class _LeaksFailedGets(TransportConnector):
    def _get_many(self, keys: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for key in keys:
            name = self.object_name(key)
            (size,) = self.objects.sizes([name], exact=True)
            payload = self._payload(size)
            obj = (
                None
                if payload is None
                else self.local_cpu_backend.allocate(
                    self.meta_shapes, self.meta_dtypes, self.meta_fmt, busy_loop=False
                )
            )
            if obj is None or payload is None:
                out.append(None)
                continue
            (ok,) = self.objects.load_sized([Chunk(name, int(obj.data_ptr), payload, self.identity)])
            if not ok:
                out.append(None)  # the allocation is never released
                continue
            out.append(
                obj if payload == self.full_chunk_size_bytes else self.reshape_partial_chunk(obj, payload)
            )
        return out


class _LoopBoundExistsSync(TransportConnector):
    def exists_sync(self, key: Any) -> bool:
        return bool(asyncio.run_coroutine_threadsafe(self.exists(key), self.loop).result())

    async def exists(self, key: Any) -> bool:
        return bool(await self._off_loop(super().exists_sync, key))


class _Broken(ConnectorAdapter):
    connector_cls: ClassVar[type[TransportConnector]] = TransportConnector

    def create_connector(self, context: Any) -> TransportConnector:
        plugin = context.url[len("plugin://") :]
        extra = getattr(context.config, "extra_config", None)
        return self.connector_cls(context, L2Settings.from_mapping(_params(extra, plugin)))


class ReleasesOnPutAdapter(_Broken):
    """``put`` releases the caller's object: it is released once too many."""

    FAILS: ClassVar[str] = "test_put_never_releases_the_callers_object"
    connector_cls = _ReleasesOnPut


class BlocksTheLoopAdapter(_Broken):
    """The ``async`` methods do their I/O on LMCache's event loop."""

    FAILS: ClassVar[str] = "test_async_calls_never_hold_the_event_loop"
    connector_cls = _BlocksTheLoop


class TagBlindAdapter(_Broken):
    """Object names leave out the key's tags: tenants share each other's chunks."""

    FAILS: ClassVar[str] = "test_each_key_field_isolates[tag]"
    connector_cls = _TagBlind


class LeaksFailedGetsAdapter(_Broken):
    """A get that allocates and then fails keeps LMCache's memory."""

    FAILS: ClassVar[str] = "test_a_failed_get_releases_what_it_allocated"
    connector_cls = _LeaksFailedGets


class LoopBoundExistsSyncAdapter(_Broken):
    """``exists_sync`` waits for LMCache's event loop (it is not synchronous)."""

    FAILS: ClassVar[str] = "test_exists_sync_answers_while_the_loop_is_busy"
    connector_cls = _LoopBoundExistsSync
