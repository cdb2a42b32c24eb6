"""``L2Adapter``: LMCache's multiprocess L2 adapter over any hicache-sdk backend.

Loaded by LMCache's own plugin loader::

    lmcache server ... --l2-adapter '{"type": "plugin",
        "module_path": "hicache_sdk.lmcache", "class_name": "L2Adapter",
        "adapter_params": {"backend": "file", "backend_config": {"root": "/var/cache/kv"}}}'

LMCache finds :class:`L2AdapterConfig` by its name (``class_name + "Config"``), builds it
from ``adapter_params`` alone (:mod:`.settings`), then calls
``L2Adapter(config, l1_memory_desc=desc)``.

The backend is built as SGLang's loader builds it (:func:`hicache_sdk.create_backend`), so
its typed config, key rules, resilience layer (deadlines, breaker, staging), failure
reasons and metrics are the ones SGLang gets; the adapter talks to that backend's
transport directly (LMCache chunks are not SGLang pages). Semantics, LMCache's:

* **submit, then poll**: every ``submit_*`` returns a task id at once; the result is
  collected with ``pop_completed_store_tasks`` / ``query_*_result`` after the task's own
  event fd fired (three distinct fds, closed by :meth:`L2Adapter.close`). A result is
  returned once.
* **store**: create-if-absent (:meth:`.objects.ChunkObjects.store`). A task succeeds when
  every chunk now exists; its ``L2StoreResult`` bytes and ``_notify_keys_stored`` count only
  the chunks this call created (payload bytes, as the engine sizes them).
* **lookup**: one bit per key (not a prefix): the object exists, and, where the layout
  hint names the key's group, its size matches the hint's. Locking is a no-op (the stores
  have no pins); ``submit_unlock`` never raises.
* **load**: into the caller's buffers; a missing object, another size or another layout
  (the record stored with the object) is a 0 bit for that key.
* **deadlines**: every task completes: a task not started ``task_timeout_s`` after
  submission fails without I/O, and the I/O of a started one is bounded by the backend's
  ``exists_timeout_s`` / ``transfer_timeout_s``.
* **memory**: LMCache's L1 arena (``l1_memory_desc``) is registered with the transport
  (Mooncake registers it; the others ignore it), so chunks move between the store and L1
  without a copy where the transport allows. Under a deadline, a transport that is not
  cancellable would get a staging copy of the caller's memory (an abandoned call must never
  touch memory its owner reuses). A task whose chunks all lie in the registered arena of a
  transport that registers memory (Mooncake) moves them in place instead
  (:meth:`~hicache_sdk.resilience.ResilientTransport.held`), and is reported only once
  every transfer on that memory has ended: LMCache neither frees nor reuses a task's
  buffers before the task is reported. Such a task still fails (0 bits) when its transfer
  outlives the deadline, but it completes when the transfer ends (Mooncake bounds its own
  calls); ``"in_place": false`` keeps the strict deadline, with one staging copy.
* ``delete`` removes objects and reports the sizes this adapter knows; ``get_usage`` is
  LMCache's byte accounting fed by those notifications; ``report_status`` shows the
  backend, its health and the failure reasons (never its settings: they may hold secrets).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from lmcache.lmcache_native import Bitmap
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase

from ..registry import create_backend
from ..transport import Transport
from .keys import SCHEME, NameMaker
from .objects import Chunk, ChunkObjects, layout_identity
from .settings import L2Settings
from .tasks import Completions, TaskRunner

__all__ = ["L2Adapter", "L2AdapterConfig"]

log = logging.getLogger(__name__)
R = TypeVar("R")


class L2AdapterConfig(L2AdapterConfigBase):  # type: ignore[misc]
    """LMCache's config object for :class:`L2Adapter`: :class:`~.settings.L2Settings`
    parsed from ``adapter_params``."""

    def __init__(self, settings: L2Settings) -> None:
        self.settings = settings

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> L2AdapterConfig:
        return cls(L2Settings.from_mapping(d))

    @classmethod
    def help(cls) -> str:
        return (
            "hicache-sdk L2 adapter (adapter_params): backend (a hicache-sdk backend name or "
            "'module:Class'), backend_config (that backend's settings, as for `hicache sglang-args`), "
            "workers (threads per direction, 4), task_timeout_s (30), in_place (true: chunks in the registered L1 arena move without a staging copy)"
        )


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _layout_of(obj: Any) -> tuple[bytes, int, int]:
    """``(identity, address, nbytes)`` of a MemoryObj: its logical layout and payload."""
    meta = obj.metadata
    shapes = meta.shapes if meta.shapes else [meta.shape]
    dtypes = meta.dtypes if meta.dtypes else [meta.dtype]
    fmt = getattr(meta.fmt, "name", str(meta.fmt))
    ident = layout_identity([tuple(s) for s in shapes], [_name(t) for t in dtypes], fmt)
    return ident, int(obj.data_ptr), int(obj.get_size())


class _TaskHold:
    """The quarantine of one task's in-place transfers (:meth:`ResilientTransport.held`):
    counts the transfers that may still touch the task's buffers; :meth:`wait` returns once
    none may (or the adapter closed)."""

    __slots__ = ("_cond", "_n")

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._n = 0

    def hold(self, buffers: Sequence[Any]) -> None:
        with self._cond:
            self._n += 1

    def release(self, buffers: Sequence[Any]) -> None:
        with self._cond:
            self._n -= 1
            self._cond.notify_all()

    def wait(self, closed: threading.Event) -> None:
        with self._cond:
            while self._n > 0 and not closed.is_set():
                self._cond.wait(0.05)


def _hint_sizes(descs: Mapping[int, Any] | None) -> dict[int, int]:
    """Payload bytes per object group from lookup's layout hint (groups it names)."""
    out: dict[int, int] = {}
    for group, desc in (descs or {}).items():
        try:
            out[int(group)] = sum(
                math.prod(int(d) for d in s) * int(t.itemsize) for s, t in zip(desc.shapes, desc.dtypes)
            )
        except Exception:  # an advisory hint that does not parse is no hint
            continue
    return out


class L2Adapter(L2AdapterInterface):  # type: ignore[misc]
    """LMCache's ``L2AdapterInterface`` over a hicache-sdk backend (see the module docs)."""

    config_class_name = "L2AdapterConfig"

    def __init__(self, config: L2AdapterConfig | Mapping[str, Any] | str, l1_memory_desc: Any = None) -> None:
        super().__init__()
        settings = config.settings if isinstance(config, L2AdapterConfig) else L2Settings.from_mapping(config)
        self.settings = settings
        backend: Any = create_backend(settings.backend, None, dict(settings.backend_config))
        self._backend = backend
        transport = getattr(backend, "transport", None)
        if transport is None:
            self._backend.close()
            raise TypeError(
                f"backend {settings.backend!r} ({type(self._backend).__name__}) is not a hicache-sdk "
                "PagedStorage backend: the LMCache binding needs its transport"
            )
        self._transport = transport
        self.metrics = backend.metrics
        cfg = backend.config
        self._names = NameMaker(getattr(cfg, "namespace", ""), getattr(cfg, "namespace_salt", None))
        self.objects = ChunkObjects(transport, self.metrics, checksum=bool(getattr(cfg, "checksum", False)))
        self._store_done: Completions[L2StoreResult] = Completions()
        self._lookup_done: Completions[Bitmap] = Completions()
        self._load_done: Completions[Bitmap] = Completions()
        self._stores = TaskRunner(
            settings.workers, settings.task_timeout_s, self.metrics, "hicache-lmc-store"
        )
        self._reads = TaskRunner(settings.workers, settings.task_timeout_s, self.metrics, "hicache-lmc-read")
        self._sizes: dict[str, int] = {}  # payload bytes of the objects this adapter stored
        self._sizes_lock = threading.Lock()
        self._closed = False
        self._closing = threading.Event()
        self._region: tuple[int, int] | None = None
        if l1_memory_desc is not None:
            region = (int(l1_memory_desc.ptr), int(l1_memory_desc.size))
            try:
                transport.register_memory(*region)
                self._region = region
            except Exception as e:  # unregistered memory still works, through staging
                self.metrics.failure("register_memory", e, getattr(transport, "io_errors", ()))
        inner = transport
        while isinstance(getattr(inner, "inner", None), Transport):  # through every wrapper
            inner = inner.inner
        registers = type(inner).register_memory is not Transport.register_memory
        #: The registered L1 arena whose chunks move in place (module docs), or ``None``.
        self.in_place_region: tuple[int, int] | None = (
            self._region
            if settings.in_place is not False and registers and hasattr(transport, "held")
            else None
        )

    # -- event fds -------------------------------------------------------------------
    def get_store_event_fd(self) -> int:
        return self._store_done.fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._lookup_done.fileno()

    def get_load_event_fd(self) -> int:
        return self._load_done.fileno()

    # -- helpers ---------------------------------------------------------------------
    def object_names(self, keys: Sequence[Any]) -> list[str]:
        """The object name of each key (:mod:`.keys`)."""
        return [self._names(k) for k in keys]

    def _chunks(self, keys: Sequence[Any], objects: Sequence[Any]) -> list[Chunk]:
        if len(keys) != len(objects):
            raise ValueError(
                f"objects: expected {len(keys)} memory objects (one per key), got {len(objects)}"
            )
        names = self.object_names(keys)
        out = []
        for name, obj in zip(names, objects):
            ident, address, nbytes = _layout_of(obj)
            out.append(Chunk(name, address, nbytes, ident))
        return out

    def _in_place(self, chunks: Sequence[Chunk]) -> bool:
        """Whether every chunk's payload lies in the registered L1 arena (module docs)."""
        region = self.in_place_region
        if region is None or not chunks:
            return False
        lo, hi = region[0], region[0] + region[1]
        return all(lo <= c.address and c.address + c.nbytes <= hi for c in chunks)

    def _run_held(self, in_place: bool, fn: Callable[[], R]) -> R:
        """``fn()``, with its transfers in place when ``in_place``; returns only once no
        transfer of it may still touch the task's buffers."""
        if not in_place:
            return fn()
        hold = _TaskHold()
        try:
            with self._transport.held(hold):
                return fn()
        finally:
            hold.wait(self._closing)

    # -- store -----------------------------------------------------------------------
    def submit_store_task(self, keys: list[Any], objects: list[Any]) -> int:
        """Create-if-absent store of ``objects[i]`` under ``keys[i]`` (see the module docs).
        ``ValueError`` for mismatched lengths or a malformed key, before anything runs."""
        chunks = self._chunks(keys, objects)
        keys, held = list(keys), list(objects)  # the buffers stay alive until the task ends
        in_place = self._in_place(chunks)

        def work() -> L2StoreResult:
            ok, created = self._run_held(in_place, partial(self.objects.store, chunks))
            del held[:]
            made = [i for i, c in enumerate(created) if c]
            if made:
                self.metrics.count("lmcache_chunks_stored", len(made))
                sizes = [chunks[i].nbytes for i in made]
                with self._sizes_lock:
                    for i in made:
                        self._sizes[chunks[i].name] = chunks[i].nbytes
                self._notify_keys_stored([keys[i] for i in made], sizes)
            return L2StoreResult(ok, sum(chunks[i].nbytes for i in made))

        return self._stores.submit(self._store_done, work, lambda: L2StoreResult(False, 0))

    def pop_completed_store_tasks(self) -> dict[int, L2StoreResult]:
        return self._store_done.take_all()

    # -- lookup ----------------------------------------------------------------------
    def submit_lookup_and_lock_task(self, keys: list[Any], group_layout_descs: Any = None) -> int:
        """One bit per key: present (and, where the hint names its group, of the hinted
        size). ``ValueError`` for a malformed key."""
        names = self.object_names(keys)
        want = _hint_sizes(group_layout_descs)
        payloads = [want.get(int(k.object_group_id)) for k in keys]
        n = len(names)

        def work() -> Bitmap:
            found = self.objects.present(names, payloads)
            bits = Bitmap(n)
            hits = [i for i, f in enumerate(found) if f]
            if hits:
                bits.batched_set(hits)
            return bits

        return self._reads.submit(self._lookup_done, work, lambda: Bitmap(n))

    def query_lookup_and_lock_result(self, task_id: int) -> Bitmap | None:
        return self._lookup_done.take(task_id)

    def submit_unlock(self, keys: list[Any]) -> None:
        """Nothing to release (lookups take no locks); never raises."""

    # -- load ------------------------------------------------------------------------
    def submit_load_task(self, keys: list[Any], objects: list[Any]) -> int:
        """Read each key's object into ``objects[i]``; a 0 bit for a miss, another size or
        another layout. ``ValueError`` for mismatched lengths or a malformed key."""
        chunks = self._chunks(keys, objects)
        keys, held = list(keys), list(objects)  # the buffers stay alive until the task ends
        n = len(chunks)
        in_place = self._in_place(chunks)

        def work() -> Bitmap:
            ok = self._run_held(in_place, partial(self.objects.load, chunks))
            del held[:]
            bits = Bitmap(n)
            hits = [i for i, good in enumerate(ok) if good]
            if hits:
                bits.batched_set(hits)
                self.metrics.count("lmcache_chunks_loaded", len(hits))
                self._notify_keys_accessed([keys[i] for i in hits])
            return bits

        return self._reads.submit(self._load_done, work, lambda: Bitmap(n))

    def query_load_result(self, task_id: int) -> Bitmap | None:
        return self._load_done.take(task_id)

    # -- management --------------------------------------------------------------------
    def delete(self, keys: list[Any]) -> None:
        """Remove the objects (synchronously, bounded by the backend's deadlines); the
        ones this adapter stored are reported deleted with their sizes. Never raises for
        an I/O failure."""
        if not keys or self._closed:
            return
        names = self.object_names(keys)
        self.objects.delete(names)
        gone_keys, gone_sizes = [], []
        with self._sizes_lock:
            for k, name in zip(keys, names):
                size = self._sizes.pop(name, None)
                if size is not None:
                    gone_keys.append(k)
                    gone_sizes.append(size)
        if gone_keys:
            self._notify_keys_deleted(gone_keys, gone_sizes)

    def report_status(self) -> dict[str, Any]:
        """``is_healthy`` (the transfer breaker is not open), the backend's name, the key
        scheme and the failure reasons and counters so far (no settings, no secrets)."""
        snap = self.metrics.snapshot()
        gauges = snap.get("gauges", {})
        healthy = not self._closed and str(gauges.get("breaker_state", "closed")) != "open"
        return {
            "is_healthy": healthy,
            "type": "hicache_sdk.lmcache.L2Adapter",
            "backend": self.settings.backend,
            "key_scheme": SCHEME,
            "objects_stored": len(self._sizes),
            "errors": dict(snap.get("errors", {})),
            "counters": dict(snap.get("counters", {})),
        }

    def close(self) -> None:
        """Stop the task threads, close the three event fds, unregister L1 memory and
        close the backend. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._stores.close()
        self._reads.close()
        for done in (self._store_done, self._lookup_done, self._load_done):
            done.close()
        if self._region is not None:
            try:
                self._transport.unregister_memory(*self._region)
            except Exception as e:
                self.metrics.failure("unregister_memory", e, getattr(self._transport, "io_errors", ()))
        try:
            self._backend.close()
        except Exception as e:
            log.warning("hicache-sdk L2Adapter: closing backend %s failed: %s", self.settings.backend, e)
