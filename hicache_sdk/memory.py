"""``memory``: the in-process reference backend (a thread-safe dict of immutable byte
arrays), used by tests, benchmarks and as the simplest example of a transport.

* Objects live in a module-level store named by ``MemoryConfig.store``: every instance
  with the same store name in one process sees the same objects (re-instantiation keeps
  them), but nothing survives the process (``persistent=False``).
* ``capacity_bytes > 0`` bounds the store; writes evict least-recently-used objects
  (reads and writes of present objects refresh them). An object larger than the whole
  capacity is refused (``False``). The bound of a shared store is the one given by the
  most recent instance that set one.
* Writes are create-if-absent and atomic (the object is gathered into a private array,
  then published under the lock); reads copy out of an immutable array, so a concurrent
  delete never tears a read.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .capabilities import Capabilities
from .config import BackendConfig, setting
from .errors import ConfigError
from .paged.adapter import PagedStorage
from .transport import Segments, Transport

__all__ = ["MemoryConfig", "MemoryStorage", "MemoryTransport", "drop_store"]


@dataclass(frozen=True)
class MemoryConfig(BackendConfig):
    """Settings of the ``memory`` backend (environment prefix ``HICACHE_MEMORY_``).

    * ``store``: the name of the in-process store to share (default ``"default"``).
    * ``capacity_bytes``: the most bytes the store holds, ``0`` for unbounded.
    """

    env_prefix: ClassVar[str] = "memory"

    store: str = "default"
    capacity_bytes: int = setting(0, ge=0, le=1 << 50, unit="bytes")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.store:
            raise ConfigError("store: must be a non-empty string")


class _Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: OrderedDict[str, np.ndarray] = OrderedDict()
        self.used = 0
        self.capacity = 0


_STORES: dict[str, _Store] = {}
_STORES_LOCK = threading.Lock()


def _get_store(name: str) -> _Store:
    with _STORES_LOCK:
        store = _STORES.get(name)
        if store is None:
            store = _STORES[name] = _Store()
        return store


def drop_store(name: str) -> None:
    """Forget a named store and its objects (tests)."""
    with _STORES_LOCK:
        _STORES.pop(name, None)


class MemoryTransport(Transport):
    """A :class:`Transport` over a named in-process store (see the module docs)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        persistent=False,
        shared_across_processes=False,
        capacity_bound=True,
        eviction=True,
        delete=True,
    )

    def __init__(self, store: str = "default", capacity_bytes: int = 0) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes!r}")
        self.store_name = store
        self._store = _get_store(store)
        if capacity_bytes:
            with self._store.lock:
                self._store.capacity = capacity_bytes
                self._evict_locked(0)

    # -- helpers ---------------------------------------------------------------------
    def _evict_locked(self, incoming: int) -> None:
        st = self._store
        if not st.capacity:
            return
        while st.objects and st.used + incoming > st.capacity:
            _, arr = st.objects.popitem(last=False)
            st.used -= arr.nbytes

    # -- Transport ---------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        st = self._store
        with st.lock:
            out: list[int | None] = []
            for k in keys:
                arr = st.objects.get(k)
                out.append(None if arr is None else arr.nbytes)
            return out

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        st = self._store
        out: list[bool] = []
        for key, segs in zip(keys, buffers):
            with st.lock:
                arr = st.objects.get(key)
                if arr is not None:
                    st.objects.move_to_end(key)
            if arr is None or arr.nbytes != sum(n for _, n in segs):
                out.append(False)
                continue
            src = int(arr.ctypes.data)
            for address, nbytes in segs:
                ctypes.memmove(address, src, nbytes)
                src += nbytes
            out.append(True)
        return out

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        st = self._store
        out: list[bool] = []
        for key, segs in zip(keys, buffers):
            with st.lock:
                if key in st.objects:
                    st.objects.move_to_end(key)
                    out.append(True)
                    continue
            total = sum(n for _, n in segs)
            if st.capacity and total > st.capacity:
                out.append(False)
                continue
            arr = np.empty(total, dtype=np.uint8)
            dst = int(arr.ctypes.data)
            for address, nbytes in segs:
                ctypes.memmove(dst, address, nbytes)
                dst += nbytes
            arr.flags.writeable = False
            with st.lock:
                if key not in st.objects:  # first writer wins
                    self._evict_locked(total)
                    st.objects[key] = arr
                    st.used += total
            out.append(True)
        return out

    def delete(self, keys: Sequence[str]) -> None:
        st = self._store
        with st.lock:
            for k in keys:
                arr = st.objects.pop(k, None)
                if arr is not None:
                    st.used -= arr.nbytes

    def clear(self, prefix: str) -> None:
        st = self._store
        with st.lock:
            for k in [k for k in st.objects if k.startswith(prefix)]:
                st.used -= st.objects.pop(k).nbytes

    def used_bytes(self) -> int:
        """Bytes currently held by the store."""
        with self._store.lock:
            return self._store.used

    def __repr__(self) -> str:
        return f"MemoryTransport(store={self.store_name!r})"


class MemoryStorage(PagedStorage):
    """The ``memory`` backend: :class:`PagedStorage` over :class:`MemoryTransport`."""

    config_cls: ClassVar[type[BackendConfig]] = MemoryConfig
    transport_cls = MemoryTransport
    backend_name: ClassVar[str] = "memory"

    @classmethod
    def capacity_config(cls, capacity_bytes: int) -> dict[str, Any]:
        """``{"capacity_bytes": n}``: LRU eviction above ``n`` stored bytes."""
        return {"capacity_bytes": capacity_bytes}

    def create_transport(self, config: Any) -> Transport:
        return MemoryTransport(store=config.store, capacity_bytes=config.capacity_bytes)
