"""LMCache's in-process remote connectors, built and driven the way LMCache does it.

* :func:`connector_config` turns a target into LMCache's engine configuration (the YAML
  keys): a hicache-sdk backend name (or ``module:Class`` of one) becomes our
  ``hicache_sdk.lmcache.ConnectorAdapter`` over it (``plugin://hicache``);
  ``module:Class`` of a ``ConnectorAdapter`` or ``RemoteConnector`` subclass is loaded as a
  ``remote_storage_plugins`` entry; ``lmcache:URL`` is one of LMCache's built-in connectors
  (``lmcache:fs://localhost:0/tmp/kv``, ``lmcache:redis://127.0.0.1:6379``).
* :class:`Harness` builds LMCache's ``RemoteBackend`` over it: LMCache's own connector
  loader (``CreateConnector``, its ``ConnectorManager`` and ``ConnectorContext``) with
  LMCache's CPU allocator and an event loop on a thread. An error LMCache would only log
  (an import or constructor failure) is raised as :class:`NotBuilt` with LMCache's log
  lines. Every allocation the connector makes through LMCache's allocator is recorded, so
  a test can check that each one was released or handed back.
* :func:`step_time`: drives a coroutine on the loop and measures each synchronous step it
  takes there, i.e. how long it held LMCache's event loop.

:func:`unavailable` says why LMCache cannot be used here (``None`` when it can).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import hashlib
import importlib
import logging
import threading
import time
import weakref
from collections.abc import Generator, Iterator, Mapping
from typing import Any

__all__ = [
    "Harness",
    "NotBuilt",
    "Stuck",
    "bounded",
    "Timed",
    "connector_class",
    "connector_config",
    "is_ours",
    "unavailable",
]

#: Our adapter and the plugin name it claims.
OURS = ("hicache_sdk.lmcache", "ConnectorAdapter")
OUR_PLUGIN = "hicache"


def unavailable() -> str | None:
    """Why LMCache's remote connectors cannot be built here, or ``None``."""
    try:
        importlib.import_module("lmcache.v1.storage_backend.connector")
        importlib.import_module("lmcache.v1.storage_backend.remote_backend")
    except Exception as e:
        return f"LMCache is not importable ({type(e).__name__}: {e}): pip install 'hicache-sdk[lmcache]'"
    return None


def connector_class(target: str) -> Any:
    """The ``ConnectorAdapter`` or ``RemoteConnector`` subclass ``target`` names, or ``None``."""
    if ":" not in target or target.startswith("lmcache:"):
        return None
    module, _, name = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module), name)
    except Exception:
        return None
    from lmcache.v1.storage_backend.connector import ConnectorAdapter
    from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

    ok = isinstance(obj, type) and issubclass(obj, (ConnectorAdapter, RemoteConnector))
    return obj if ok else None


def is_ours(cls: Any) -> bool:
    """Whether ``cls`` is our ``ConnectorAdapter`` or a subclass (its config is ``adapter_params``)."""
    try:
        from hicache_sdk.lmcache.connector import ConnectorAdapter
    except Exception:
        return False
    return isinstance(cls, type) and issubclass(cls, ConnectorAdapter)


def connector_config(target: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """LMCache's engine configuration (without the chunk and CPU keys the harness adds)
    that puts the connector ``target`` behind LMCache's ``RemoteBackend``.

    * a hicache-sdk backend (name or ``module:Class`` of a ``PagedStorage``): ``config``
      is the backend's settings;
    * ``module:Class`` of a subclass of our ``ConnectorAdapter``: ``config`` is its
      ``adapter_params`` (``{"backend": ..., "backend_config": ...}``);
    * ``module:Class`` of any other ``ConnectorAdapter`` or ``RemoteConnector``: ``config``
      holds LMCache configuration keys (``extra_config`` and the like, merged), and
      ``plugin``, the plugin name (default: the class name in lower case);
    * ``lmcache:URL``: LMCache's built-in connector for that URL; ``config`` holds more
      LMCache configuration keys.
    """
    config = copy.deepcopy(dict(config or {}))
    if target.startswith("lmcache:"):
        return {**config, "remote_url": target.partition(":")[2]}
    cls = connector_class(target)
    if cls is None or is_ours(cls):
        module, name = (cls.__module__, cls.__name__) if cls is not None else OURS
        params = config if cls is not None else {"backend": target, "backend_config": config}
        return {
            "remote_url": f"plugin://{OUR_PLUGIN}",
            "remote_storage_plugins": [OUR_PLUGIN],
            "extra_config": {
                f"remote_storage_plugin.{OUR_PLUGIN}.module_path": module,
                f"remote_storage_plugin.{OUR_PLUGIN}.class_name": name,
                f"remote_storage_plugin.{OUR_PLUGIN}.adapter_params": params,
            },
        }
    plugin = str(config.pop("plugin", cls.__name__.lower()))
    extra = dict(config.pop("extra_config", None) or {})
    extra.setdefault(f"remote_storage_plugin.{plugin}.module_path", cls.__module__)
    extra.setdefault(f"remote_storage_plugin.{plugin}.class_name", cls.__name__)
    return {
        "remote_url": f"plugin://{plugin}",
        "remote_storage_plugins": [plugin],
        **config,
        "extra_config": extra,
    }


class NotBuilt(RuntimeError):
    """LMCache did not build the connector (its log lines say why)."""


class Stuck(AssertionError):
    """A call did not return within its deadline."""


#: How long one call through LMCache may take before the suite calls it stuck.
CALL_TIMEOUT_S = 60.0


def bounded(fn: Any, *args: Any, timeout: float = CALL_TIMEOUT_S, what: str = "") -> Any:
    """``fn(*args)`` on a thread of its own; :class:`Stuck` when it has not returned in
    ``timeout`` seconds (the thread is left behind: a daemon)."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=call, daemon=True, name="hicache-bounded-call")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise Stuck(f"{what or getattr(fn, '__name__', 'the call')} did not return in {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(f"{record.name}: {record.getMessage()}")


@contextlib.contextmanager
def _lmcache_warnings() -> Iterator[_Records]:
    """LMCache's warnings and errors while the block runs (its loggers do not propagate)."""
    rec = _Records()
    names = [n for n in logging.Logger.manager.loggerDict if n == "lmcache" or n.startswith("lmcache.")]
    loggers = [logging.getLogger(n) for n in ("lmcache", *names)]
    for lg in loggers:
        lg.addHandler(rec)
    try:
        yield rec
    finally:
        for lg in loggers:
            lg.removeHandler(rec)


def metadata(
    *, model: str = "conformance/model", kv_dtype: Any = None, layers: int = 2, heads: int = 2,
    head_size: int = 64, chunk_size: int = 256, use_mla: bool = False, world_size: int = 8,
    worker_id: int = 0,
) -> Any:  # fmt: skip
    """An ``LMCacheMetadata``: ``kv_shape`` (layers, 2 or 1 for MLA, chunk, heads, head_size)."""
    import torch
    from lmcache.v1.metadata import LMCacheMetadata

    kv = 1 if use_mla else 2
    return LMCacheMetadata(
        model_name=model,
        world_size=world_size,
        local_world_size=world_size,
        worker_id=worker_id,
        local_worker_id=worker_id,
        kv_dtype=kv_dtype or torch.bfloat16,
        kv_shape=(layers, kv, chunk_size, 1 if use_mla else heads, head_size),
        use_mla=use_mla,
        chunk_size=chunk_size,
    )


class Harness:
    """LMCache's ``RemoteBackend`` over a connector, built by LMCache's own loader.

    ``config``: LMCache's engine configuration (:func:`connector_config`); ``meta``: the
    deployment (:func:`metadata`). ``backend`` is the ``RemoteBackend``, ``wrapper`` the
    ``InstrumentedRemoteConnector`` LMCache puts around every connector, ``connector`` the
    connector itself, ``cpu`` LMCache's ``LocalCPUBackend`` whose allocator it must use.
    """

    def __init__(self, config: Mapping[str, Any], meta: Any, *, cpu_gb: float = 0.2) -> None:
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend

        cfg = {
            "chunk_size": meta.chunk_size,
            "local_cpu": True,
            "max_local_cpu_size": cpu_gb,
            "remote_serde": "naive",
            **copy.deepcopy(dict(config)),
        }
        self.meta = meta
        self.config = LMCacheEngineConfig.from_dict(cfg)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="lmcache-loop")
        self._thread.start()
        self.cpu = LocalCPUBackend(config=self.config, metadata=meta, dst_device="cpu")
        self.allocated: list[weakref.ref[Any] | Any] = []
        self._spy_allocator()
        self.backend: Any = None
        with _lmcache_warnings() as rec:
            try:
                self.backend = RemoteBackend(
                    config=self.config,
                    metadata=meta,
                    loop=self.loop,
                    local_cpu_backend=self.cpu,
                    dst_device="cpu",
                )
            except Exception as e:
                self.close()
                raise NotBuilt(f"RemoteBackend raised {type(e).__name__}: {e}") from e
        if self.backend.connection is None:
            lines = [ln for ln in rec.lines if "Discovered" not in ln]
            self.close()
            raise NotBuilt("LMCache built no connector: " + (" | ".join(lines[-6:]) or "(nothing logged)"))
        self.wrapper = self.backend.connection
        inner = getattr(self.wrapper, "getWrappedConnector", None)
        self.connector = inner() if inner is not None else getattr(self.wrapper, "_connector", self.wrapper)

    # -- allocations -------------------------------------------------------------------
    def _spy_allocator(self) -> None:
        cpu, made = self.cpu, self.allocated
        real_one, real_many = cpu.allocate, cpu.batched_allocate

        def allocate(*args: Any, **kw: Any) -> Any:
            obj = real_one(*args, **kw)
            if obj is not None:
                made.append(obj)
            return obj

        def batched_allocate(*args: Any, **kw: Any) -> Any:
            objs = real_many(*args, **kw)
            made.extend(o for o in objs or () if o is not None)
            return objs

        cpu.allocate = allocate
        cpu.batched_allocate = batched_allocate

    def unreleased(self, handed_back: list[Any] = ()) -> list[Any]:  # type: ignore[assignment]
        """Objects the connector allocated that are still referenced, other than those in
        ``handed_back`` (returned to the caller, which holds one reference each)."""
        keep = {id(o) for o in handed_back if o is not None}
        out = []
        for o in self.allocated:
            refs = o.get_ref_count()
            if refs > (1 if id(o) in keep else 0):
                out.append(o)
        return out

    # -- keys and objects ----------------------------------------------------------------
    def key(self, tag: Any, *, dtype: Any = None, **fields: Any) -> Any:
        """A ``CacheEngineKey`` of this deployment (``chunk_hash`` from ``tag``)."""
        from lmcache.utils import CacheEngineKey

        h = int.from_bytes(hashlib.sha256(repr(tag).encode()).digest()[:8], "big") - (1 << 63)
        base: dict[str, Any] = {
            "model_name": self.meta.model_name,
            "world_size": self.meta.world_size,
            "worker_id": self.meta.worker_id,
            "chunk_hash": h,
            "dtype": dtype or self.meta.kv_dtype,
        }
        base.update(fields)
        return CacheEngineKey(**base)

    def obj(self, seed: int, num_tokens: int | None = None) -> Any:
        """A chunk (ref count 1) from LMCache's allocator, filled from ``seed``; short when
        ``num_tokens`` is less than the chunk size. Not recorded as the connector's."""
        import torch
        from lmcache.v1.memory_management import MemoryFormat

        fmt = MemoryFormat.KV_MLA_FMT if self.meta.use_mla else MemoryFormat.KV_2LTD
        o = self.cpu.memory_allocator.allocate(self.meta.get_shapes(num_tokens), self.meta.get_dtypes(), fmt)
        assert o is not None, "LMCache's CPU allocator is out of memory"
        raw = o.byte_array
        g = torch.Generator().manual_seed(seed)
        src = torch.randint(0, 256, (len(raw),), generator=g, dtype=torch.uint8)
        torch.frombuffer(raw, dtype=torch.uint8).copy_(src)
        return o

    # -- calls (each bounded: a stuck call fails the test, it never hangs the suite) ------
    def run(self, coro: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise Stuck(
                f"{getattr(coro, '__qualname__', 'a coroutine')} did not return in {timeout:.0f} s"
            ) from None

    def put(self, key: Any, obj: Any, timeout: float = CALL_TIMEOUT_S) -> None:
        """Put through LMCache's ``RemoteBackend`` (its serializer takes a reference, its
        connector wrapper drops it), and wait for the put to finish."""
        fut = bounded(self.backend.submit_put_task, key, obj, timeout=timeout, what="submit_put_task")
        try:
            fut.result(timeout)
        except TimeoutError:
            raise Stuck(f"a put did not finish in {timeout:.0f} s") from None

    def batched_put(self, keys: list[Any], objs: list[Any], timeout: float = CALL_TIMEOUT_S) -> None:
        """``RemoteBackend.batched_submit_put_task`` (the connector's ``batched_put`` where it
        supports one, else a put per key), and wait until every key's put has completed."""
        left = [len(keys)]
        lock, done = threading.Lock(), threading.Event()

        def on_complete(_key: Any) -> None:
            with lock:
                left[0] -= 1
                if left[0] <= 0:
                    done.set()

        submit = functools.partial(self.backend.batched_submit_put_task, on_complete_callback=on_complete)
        bounded(submit, keys, objs, timeout=timeout, what="batched_submit_put_task")
        if keys and not done.wait(timeout):
            raise Stuck(f"{left[0]} of {len(keys)} batched puts did not finish in {timeout:.0f} s")

    def contains(self, key: Any) -> bool:
        """``RemoteBackend.contains`` (LMCache waits for the connector without a deadline)."""
        return bool(bounded(self.backend.contains, key, what="contains"))

    def get_blocking(self, key: Any) -> Any:
        return bounded(self.backend.get_blocking, key, what="get_blocking")

    def batched_contains(self, keys: list[Any]) -> int:
        return int(bounded(self.backend.batched_contains, keys, what="batched_contains"))

    def batched_get_blocking(self, keys: list[Any]) -> list[Any]:
        got: list[Any] = bounded(self.backend.batched_get_blocking, keys, what="batched_get_blocking")
        return got

    def close(self, timeout: float = 30.0) -> bool:
        """Close LMCache's backend (and so the connector), then the allocator and the loop;
        whether the backend's close returned within ``timeout``."""
        closed = True
        if self.backend is not None:
            backend, self.backend = self.backend, None
            try:
                bounded(backend.close, timeout=timeout, what="close")
            except Stuck:
                closed = False
            except Exception:
                pass
        with contextlib.suppress(Exception):
            self.cpu.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10 if closed else 1)  # a loop stuck in close is left behind
        return closed


class Timed:
    """An awaitable that drives ``coro`` and records how long each of its synchronous
    steps held the event loop: ``steps`` (seconds each), ``wall`` (first step to result)."""

    def __init__(self, coro: Any) -> None:
        self.coro = coro
        self.steps: list[float] = []
        self.wall = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self.coro.__await__()
        send: Any = None
        exc: BaseException | None = None
        t_start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            try:
                yielded = it.throw(exc) if exc is not None else it.send(send)
            except StopIteration as stop:
                self.steps.append(time.perf_counter() - t0)
                self.wall = time.perf_counter() - t_start
                return stop.value
            except BaseException:
                self.steps.append(time.perf_counter() - t0)
                self.wall = time.perf_counter() - t_start
                raise
            self.steps.append(time.perf_counter() - t0)
            try:
                send, exc = (yield yielded), None
            except BaseException as e:  # thrown in (cancellation): pass it on
                send, exc = None, e
