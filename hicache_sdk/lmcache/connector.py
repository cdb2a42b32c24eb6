"""``ConnectorAdapter`` / ``TransportConnector``: LMCache's in-process remote connector over
any hicache-sdk backend (``remote_storage_plugins``).

Configured in LMCache's YAML::

    remote_url: "plugin://hicache"
    remote_storage_plugins: ["hicache"]
    extra_config:
      remote_storage_plugin.hicache.module_path: hicache_sdk.lmcache
      remote_storage_plugin.hicache.class_name: ConnectorAdapter
      remote_storage_plugin.hicache.adapter_params:
        {"backend": "file", "backend_config": {"root": "/var/cache/lmcache"}}

The plugin name is ``hicache`` or ``hicache.<instance>`` (the adapter claims those
``plugin://`` URLs only); ``adapter_params`` are :mod:`.settings`' keys (``workers`` sizes
the connector's I/O threads). LMCache creates :class:`ConnectorAdapter` with no
arguments and asks it for a connector with the URL, its loop, allocator, config and
metadata.

:class:`TransportConnector` rules:

* **names**: ``lmc1c_<model>_<digest>``, the digest being sha256 of the key's full string
  (model, world size, worker id, chunk hash, dtype and tags), so every field isolates;
* **objects**: ``payload || record`` (:mod:`.objects`); the record carries the identity
  of the deployment's full-chunk layout (shapes, dtypes, KV or MLA format), so a chunk of
  another model layout or dtype is a miss; a short chunk stores its own byte count;
* **async**: every ``async`` method runs the transport on the connector's own threads
  (``run_in_executor``), never on LMCache's event loop; ``exists_sync`` and
  ``remove_sync`` are synchronous;
* **get** sizes the object first, allocates through LMCache's allocator (without
  waiting for memory: none free is a miss), reads into it, reshapes a short chunk, and
  releases the allocation on any failure;
* **put** is create-if-absent and never releases the caller's object (LMCache's
  instrumented wrapper does);
* **MLA** (``use_mla``, more than one rank): every rank holds the same latent cache, so
  the object name leaves out the worker id (every rank reads one object) and only rank 0
  writes it; a put on another rank is a no-op. LMCache's ``RemoteBackend`` does the same
  by default (``remote_enable_mla_worker_id_as0``); the connector keeps the rule when an
  operator turns that off, or uses the connector without it;
* a get whose caller is cancelled (LMCache's ``blocking_timeout_secs``) releases what it
  allocated when it ends;
* nothing raises into LMCache's worker for an I/O failure; ``list`` is empty (a transport
  cannot enumerate its objects).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lmcache.v1.storage_backend.connector import ConnectorAdapter as _LMCacheConnectorAdapter
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from ..keys.names import sanitize_component
from ..paged.header import TRAILER_SIZE
from ..registry import create_backend
from ..transport import SIZE_UNKNOWN
from .objects import Chunk, ChunkObjects, layout_identity
from .settings import L2Settings

__all__ = ["PLUGIN", "ConnectorAdapter", "TransportConnector"]

log = logging.getLogger(__name__)

#: The plugin type this adapter claims (``plugin://hicache`` and ``plugin://hicache.<x>``).
PLUGIN = "hicache"


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


class TransportConnector(RemoteConnector):  # type: ignore[misc]
    """LMCache's ``RemoteConnector`` over a hicache-sdk backend (see the module docs)."""

    def __init__(self, context: Any, settings: L2Settings) -> None:
        super().__init__(context.config, context.metadata)
        self.loop = context.loop
        self.local_cpu_backend = context.local_cpu_backend
        self.settings = settings
        backend: Any = create_backend(settings.backend, None, dict(settings.backend_config))
        self._backend = backend
        transport = getattr(backend, "transport", None)
        if transport is None:
            backend.close()
            raise TypeError(f"backend {settings.backend!r} is not a hicache-sdk PagedStorage backend")
        self.metrics = backend.metrics
        cfg = backend.config
        ns = getattr(cfg, "namespace", "")
        self._prefix = f"{sanitize_component(ns)}/" if ns else ""
        self._salt = (getattr(cfg, "namespace_salt", None) or "").encode()
        self.objects = ChunkObjects(transport, self.metrics, checksum=bool(getattr(cfg, "checksum", False)))
        fmt = getattr(self.meta_fmt, "name", str(self.meta_fmt))
        self.identity = layout_identity(
            [tuple(s) for s in self.meta_shapes], [_dtype_name(t) for t in self.meta_dtypes], fmt
        )
        meta = context.metadata
        #: MLA over several ranks: one object per chunk, written by rank 0 only.
        self.mla_shared = bool(getattr(meta, "use_mla", False)) and int(getattr(meta, "world_size", 1)) > 1
        self.writes = not self.mla_shared or int(getattr(meta, "worker_id", 0)) == 0
        self._pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="hicache-lmc-conn")
        self._closed = False

    # -- names ---------------------------------------------------------------------
    def object_name(self, key: Any) -> str:
        """``[<namespace>/]lmc1c_<model>_<sha256 of the key's string>`` (for MLA over several
        ranks, the key's string with worker id 0)."""
        if self.mla_shared and getattr(key, "worker_id", 0) != 0 and hasattr(key, "with_new_worker_id"):
            key = key.with_new_worker_id(0)
        text = key.to_string() if hasattr(key, "to_string") else str(key)
        digest = hashlib.sha256(self._salt + b"\0" + text.encode("utf-8", "surrogatepass")).hexdigest()
        model = sanitize_component(str(getattr(key, "model_name", "")))[:32]
        return f"{self._prefix}lmc1c_{model}_{digest}"

    def _payload(self, size: int | None) -> int | None:
        """The payload bytes of an object of stored ``size``, or ``None`` when no chunk of
        this deployment has that size."""
        if size is None:
            return None
        if size == SIZE_UNKNOWN:
            return int(self.full_chunk_size_bytes)
        n = size - TRAILER_SIZE
        if n <= 0 or n > self.full_chunk_size_bytes or n % self.single_token_size:
            return None
        return n

    # -- sync ------------------------------------------------------------------------
    def exists_sync(self, key: Any) -> bool:
        return self._present([key])[0]

    def remove_sync(self, key: Any) -> bool:
        if not self._closed:
            self.objects.delete([self.object_name(key)])
        return True

    def _get_many(self, keys: Sequence[Any]) -> list[Any]:
        """One object (or ``None``) per key: one size query and one read for the batch."""
        out: list[Any] = [None] * len(keys)
        if self._closed or not keys:
            return out
        names = [self.object_name(k) for k in keys]
        todo: list[tuple[int, int, Any]] = []  # (index, payload bytes, allocated object)
        try:
            for i, size in enumerate(self.objects.sizes(names, exact=True)):
                payload = self._payload(size)
                if payload is None:
                    continue
                obj = self.local_cpu_backend.allocate(
                    self.meta_shapes, self.meta_dtypes, self.meta_fmt, busy_loop=False
                )
                if obj is None:  # no memory free now: this and the rest miss
                    self.metrics.count("lmcache_alloc_failed")
                    break
                todo.append((i, payload, obj))
            chunks = [Chunk(names[i], int(obj.data_ptr), payload, self.identity) for i, payload, obj in todo]
            got = self.objects.load_sized(chunks)
        except Exception as e:
            self.metrics.failure("read", e, ())
            got = [False] * len(todo)
        for (i, payload, obj), ok in zip(todo, got):
            if not ok:
                obj.ref_count_down()
                continue
            if payload != self.full_chunk_size_bytes:
                try:
                    obj = self.reshape_partial_chunk(obj, payload)
                except Exception as e:
                    self.metrics.failure("read", e, ())
                    obj.ref_count_down()
                    continue
            out[i] = obj
        return out

    def _put_many(self, keys: Sequence[Any], memory_objs: Sequence[Any]) -> None:
        """Create-if-absent of every chunk: one existence query and one write for the batch."""
        if self._closed or not self.writes or not keys:
            return
        try:
            chunks = [
                Chunk(self.object_name(k), int(o.data_ptr), int(o.get_size()), self.identity)
                for k, o in zip(keys, memory_objs, strict=True)
            ]
        except Exception as e:
            self.metrics.failure("write", e, ())
            return
        ok, _created = self.objects.store(chunks)
        if not ok:
            self.metrics.count("lmcache_put_failed")

    def _present(self, keys: Sequence[Any]) -> list[bool]:
        if self._closed or not keys:
            return [False] * len(keys)
        sizes = self.objects.sizes([self.object_name(k) for k in keys])
        return [self._payload(size) is not None for size in sizes]

    # -- async (LMCache's loop never runs the transport) -------------------------------
    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _objects_off_loop(self, fn: Any, *args: Any) -> list[Any]:
        """``fn(*args)`` (a list of allocated objects or ``None``) off the loop; when the
        caller is cancelled (LMCache's ``blocking_timeout_secs``), the objects the call still
        returns are released, not leaked."""
        fut = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        try:
            return list(await asyncio.shield(fut))
        except asyncio.CancelledError:
            fut.add_done_callback(_release_results)
            raise

    async def exists(self, key: Any) -> bool:
        return bool(await self._off_loop(self.exists_sync, key))

    async def get(self, key: Any) -> Any:
        return (await self._objects_off_loop(self._get_many, [key]))[0]

    async def put(self, key: Any, memory_obj: Any) -> None:
        """Create-if-absent; never releases ``memory_obj``; never raises for I/O."""
        await self._off_loop(self._put_many, [key], [memory_obj])

    # -- batched (one transport batch per LMCache batch) -------------------------------
    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: list[Any]) -> list[Any]:
        """One object (or ``None``) per key, in one size query and one read."""
        return await self._objects_off_loop(self._get_many, list(keys))

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: list[Any], memory_objs: list[Any]) -> None:
        """Create-if-absent of every chunk in one existence query and one write; never
        releases ``memory_objs``; never raises for I/O."""
        await self._off_loop(self._put_many, list(keys), list(memory_objs))

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: list[Any]) -> int:
        """How many keys, from the first, are present (LMCache's prefix answer), in one
        existence query."""
        found = self._present(list(keys))
        return found.index(False) if False in found else len(found)

    async def batched_async_contains(self, lookup_id: str, keys: list[Any], pin: bool = False) -> int:
        return int(await self._off_loop(self.batched_contains, list(keys)))

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[Any]) -> list[Any]:
        """The objects of the keys up to the first miss (later hits are released), in one
        size query and one read."""
        got = await self._objects_off_loop(self._get_many, list(keys))
        out: list[Any] = []
        for i, obj in enumerate(got):
            if obj is None:
                for rest in got[i + 1 :]:
                    if rest is not None:
                        rest.ref_count_down()
                break
            out.append(obj)
        return out

    async def list(self) -> list[str]:
        return []

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        try:
            self._backend.close()
        except Exception as e:
            log.warning(
                "hicache-sdk TransportConnector: closing backend %s failed: %s", self.settings.backend, e
            )


def _release_results(fut: Any) -> None:
    """Release the objects of a finished get whose caller was cancelled."""
    if fut.cancelled() or fut.exception() is not None:
        return
    for obj in fut.result() or ():
        if obj is not None:
            obj.ref_count_down()


def _params(extra: Mapping[str, Any] | None, plugin: str) -> Any:
    for name in (plugin, PLUGIN):
        got = (extra or {}).get(f"remote_storage_plugin.{name}.adapter_params")
        if got is not None:
            return got
    raise ValueError(
        f"remote_storage_plugin.{plugin}.adapter_params is not set in extra_config "
        '(e.g. {"backend": "file", "backend_config": {"root": "/var/cache/lmcache"}})'
    )


class ConnectorAdapter(_LMCacheConnectorAdapter):  # type: ignore[misc]
    """LMCache's ``ConnectorAdapter`` for ``plugin://hicache[.<instance>]`` URLs."""

    def __init__(self) -> None:
        super().__init__(f"plugin://{PLUGIN}")

    def can_parse(self, url: str) -> bool:
        if not url.startswith("plugin://"):
            return False
        name = url[len("plugin://") :]
        return name == PLUGIN or name.startswith(PLUGIN + ".")

    def create_connector(self, context: Any) -> TransportConnector:
        plugin = context.url[len("plugin://") :]
        extra = getattr(context.config, "extra_config", None)
        return TransportConnector(context, L2Settings.from_mapping(_params(extra, plugin)))
