"""What SGLang 0.5.23 does with a storage backend: which I/O path it calls, which host
layouts it hands the backend, in which batch shapes, and how it uses the results.

The ``contract`` profile certifies exactly this (see ``docs/conformance.md``, where every
rule cites the SGLang source it comes from). :class:`Route` says which paths and layouts
apply to a backend; :class:`Controller` drives a backend the way SGLang's
``HiCacheController`` does, call by call: with SGLang installed it *is* SGLang's code (a
controller instance whose ``_page_backup`` / ``_page_transfer`` /
``_generic_page_get`` / ``_generic_page_set`` / ``_page_get_zero_copy`` /
``_page_set_zero_copy`` run unchanged); without SGLang, the suite's own mirror of them.
Every backend call is recorded (:attr:`Controller.calls`), so a failing test can name the
call that went wrong.

SGLang facts (0.5.23):

* ``srt/managers/cache_controller.py`` ``HiCacheController.attach_storage_backend``: the
  built-in backends ``hf3fs``, ``mooncake``, ``npu_memcache``, ``eic``, ``nixl``, ``simm``,
  ``mori``, ``tensorcast`` and ``seaweedfs`` always use the zero-copy v1 methods; every
  other backend (``file``, ``dynamic``, ...) the generic path (``batch_get`` /
  ``batch_set`` on flat page tensors), except ``dynamic`` with
  ``extra_config["interface_v1"]`` set, which uses v1. The operator chooses that flag, so a
  ``dynamic`` backend is certified on the generic path always and on v1 too when it
  implements v1.
* ``_page_backup``: writes go in batches of at most ``STORAGE_BATCH_SIZE`` (128) pages; a
  batch whose write is not a success (``batch_set``'s bool, or ``all()`` of
  ``batch_set_v1``'s list) stops the rest of the backup.
* ``_page_transfer`` / ``_page_transfer_kv_batch``: reads go in batches of at most 128
  pages; a batch commits the leading run of hits (``_generic_page_get``: the leading run of
  non-``None`` tensors, each copied into the host pool with ``set_from_flat_data_page``;
  ``_page_get_zero_copy``: the leading run of ``True``), clamped to the KV-derived sidecar
  pools' leading runs (``count_pool_hits`` of ``batch_get_v2``); a batch that is not fully
  hit, or that raises (counted as 0), ends the prefetch.
* ``_storage_hit_query``: ``batch_exists`` in batches of 128 with the leading run
  (``HybridCacheController._storage_hit_query`` sends the request's whole span to
  ``batch_exists`` / ``batch_exists_v2`` in one call).
* ``srt/arg_groups/hicache_hook.py`` ``resolve_storage_layout_compatibility``: for the
  built-in ``mooncake`` and ``npu_memcache`` a ``layer_first`` host layout is rewritten to
  ``page_first`` (``kernel`` I/O) or ``page_first_direct`` (``direct`` I/O), except with
  ``dcp_size > 1``; never for ``dynamic``. ``resolve_layout_io_compatibility``: ``direct``
  I/O turns ``page_first`` into ``page_first_direct``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hicache_sdk.spec import (
    STORAGE_BATCH_SIZE,
    HiCacheStorageExtraInfo,
    PoolName,
    PoolTransfer,
    count_pool_hits,
)

__all__ = [
    "ZERO_COPY_BACKENDS",
    "PAGE_FIRST_REWRITE",
    "HOST_LAYOUTS",
    "IO_PATHS",
    "Route",
    "Call",
    "Controller",
    "sglang_controller_available",
]

#: Built-in backends SGLang 0.5.23 always drives through v1 (cache_controller.py,
#: ``attach_storage_backend``).
ZERO_COPY_BACKENDS = frozenset(
    {"hf3fs", "mooncake", "npu_memcache", "eic", "nixl", "simm", "mori", "tensorcast", "seaweedfs"}
)
#: Built-in backends whose ``layer_first`` host layout SGLang rewrites (hicache_hook.py).
PAGE_FIRST_REWRITE = frozenset({"mooncake", "npu_memcache"})
#: The host layouts the suite's pool matrix covers (``page_head`` is MHA-only).
HOST_LAYOUTS: tuple[str, ...] = ("layer_first", "page_first", "page_first_direct")
#: ``generic``: ``batch_get`` / ``batch_set`` on flat page tensors; ``v1``: ``batch_get_v1``
#: / ``batch_set_v1`` on host indices.
IO_PATHS: tuple[str, ...] = ("generic", "v1")


@dataclass(frozen=True)
class Route:
    """How SGLang is told to load the backend: ``storage_backend`` (``--hicache-storage-backend``:
    ``dynamic`` for anything loaded by class, or a built-in name) and ``io_backend``
    (``--hicache-io-backend``: ``kernel`` or ``direct``)."""

    storage_backend: str = "dynamic"
    io_backend: str = "kernel"

    def __post_init__(self) -> None:
        if not self.storage_backend or not isinstance(self.storage_backend, str):
            raise ValueError(f"storage_backend must be a backend name, got {self.storage_backend!r}")
        if self.io_backend not in ("kernel", "direct"):
            raise ValueError(f"io_backend must be 'kernel' or 'direct', got {self.io_backend!r}")

    def io_paths(self, implements_v1: bool) -> tuple[str, ...]:
        """The paths SGLang may take: v1 only for the zero-copy built-ins; the generic path
        for everything else, plus v1 for ``dynamic`` when the backend implements it."""
        if self.storage_backend in ZERO_COPY_BACKENDS:
            return ("v1",)
        if self.storage_backend == "dynamic" and implements_v1:
            return IO_PATHS
        return ("generic",)

    def layouts(self) -> tuple[str, ...]:
        """The host layouts SGLang hands this backend."""
        if self.storage_backend in PAGE_FIRST_REWRITE:
            return (
                ("page_first_direct",) if self.io_backend == "direct" else ("page_first", "page_first_direct")
            )
        if self.io_backend == "direct":
            return ("layer_first", "page_first_direct")
        return HOST_LAYOUTS

    def describe(self, implements_v1: bool) -> dict[str, Any]:
        return {
            "storage_backend": self.storage_backend,
            "io_backend": self.io_backend,
            "io_paths": list(self.io_paths(implements_v1)),
            "layouts": list(self.layouts()),
        }


@dataclass
class Call:
    """One backend call the controller made: method, number of keys, a short summary of
    the result, or the exception it raised."""

    method: str
    keys: int
    result: str = ""
    error: BaseException | None = None

    def __str__(self) -> str:
        out = f"{self.method}({self.keys} keys)"
        if self.error is not None:
            return f"{out} raised {type(self.error).__name__}: {self.error}"
        return f"{out} -> {self.result}"


_RECORDED = frozenset(
    {
        "batch_get",
        "batch_set",
        "batch_get_v1",
        "batch_set_v1",
        "batch_exists",
        "batch_exists_v2",
        "batch_get_v2",
        "batch_set_v2",
    }
)


def _summary(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, bool) for v in value):
            return "[" + ", ".join("T" if v else "F" for v in value) + "]"
        return (
            "["
            + ", ".join(
                "None" if v is None else "page" if isinstance(v, torch.Tensor) else repr(v) for v in value
            )
            + "]"
        )
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_summary(v)}" for k, v in value.items()) + "}"
    return repr(value)


class _Recording:
    """Forwards everything to ``backend``; records the batch calls in ``calls``."""

    def __init__(self, backend: Any, calls: list[Call]) -> None:
        self._backend = backend
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if name not in _RECORDED or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            n = len(args[0]) if args and isinstance(args[0], (list, tuple)) else 0
            if name.endswith("_v2") and name != "batch_exists_v2" and args:
                n = sum(len(getattr(t, "keys", None) or []) for t in args[0])
            try:
                result = attr(*args, **kwargs)
            except BaseException as e:
                self._calls.append(Call(name, n, error=e))
                raise
            self._calls.append(Call(name, n, _summary(result)))
            return result

        return call


_SGLANG: dict[str, Any] = {}


def sglang_controller_available() -> tuple[bool, str]:
    """(whether SGLang's ``HiCacheController`` imports here, why not / which version)."""
    if "ok" not in _SGLANG:
        from .sglang_pools import sglang_version

        version = sglang_version()
        if version is None:
            _SGLANG.update(ok=False, why="SGLang is not installed")
        else:
            try:
                from sglang.srt.managers import cache_controller as cc
            except Exception as e:
                _SGLANG.update(
                    ok=False,
                    why=f"SGLang {version} is installed but its controller does not import: {type(e).__name__}: {e}",
                )
            else:
                _SGLANG.update(ok=True, why=f"SGLang {version}", module=cc)
    return bool(_SGLANG["ok"]), str(_SGLANG["why"])


class _CaptureErrors(logging.Handler):
    """Collects the exceptions SGLang's controller logs (and swallows) while it runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])


class Controller:
    """SGLang's storage controller over one backend and its KV host pool, on ``path``
    (``"generic"`` or ``"v1"``). ``use_sglang``: ``None`` picks SGLang's own controller
    code when it imports, else the suite's mirror; ``source`` says which ran.

    Page ``i`` of the pool is slot range ``i * page_size``; ``first_page`` places a batch.
    Nothing here asserts: results come back, and :attr:`calls` records every backend call
    with its result or exception (the exceptions SGLang's controller swallows are recorded
    too, in :attr:`swallowed`)."""

    def __init__(self, backend: Any, kv_pool: Any, path: str, *, use_sglang: bool | None = None) -> None:
        if path not in IO_PATHS:
            raise ValueError(f"path must be one of {', '.join(IO_PATHS)}, got {path!r}")
        self.path = path
        self.pool = kv_pool
        self.page_size = int(kv_pool.page_size)
        self.calls: list[Call] = []
        self.swallowed: list[BaseException] = []
        self.backend = _Recording(backend, self.calls)
        ok, why = sglang_controller_available()
        self.use_sglang = ok if use_sglang is None else use_sglang and ok
        self.source = f"sglang ({why})" if self.use_sglang else "hicache-conformance (SGLang 0.5.23's rules)"
        self._sglang: Any = None
        if self.use_sglang:
            self._sglang = self._build_sglang()

    # -- SGLang's own controller ------------------------------------------------------------
    def _build_sglang(self) -> Any:
        import queue

        cc = _SGLANG["module"]
        ctl = object.__new__(cc.HiCacheController)  # no devices, threads or process groups
        ctl.storage_backend = self.backend
        ctl.storage_host_pool = self.pool
        ctl.mem_pool_host = self.pool
        ctl.page_size = self.page_size
        ctl.prefetch_sync_queue = queue.Queue()
        if self.path == "v1":
            ctl.page_get_func, ctl.page_set_func = ctl._page_get_zero_copy, ctl._page_set_zero_copy
        else:
            ctl.page_get_func, ctl.page_set_func = ctl._generic_page_get, ctl._generic_page_set
        return ctl

    def _captured(self, fn: Callable[[], Any]) -> Any:
        handler = _CaptureErrors()
        log = logging.getLogger(_SGLANG["module"].__name__)
        log.addHandler(handler)
        try:
            return fn()
        finally:
            log.removeHandler(handler)
            self.swallowed += handler.errors

    # -- the operations ---------------------------------------------------------------------
    def indices(self, first_page: int, n_pages: int) -> torch.Tensor:
        ps = self.page_size
        return torch.arange(first_page * ps, (first_page + n_pages) * ps, dtype=torch.int64)

    def backup(self, keys: Sequence[str], first_page: int) -> int:
        """Write ``keys`` from pages ``first_page..`` as SGLang's ``_page_backup`` does;
        the number of pages it completed (it stops at the first batch that fails)."""
        keys = list(keys)
        host = self.indices(first_page, len(keys))
        if self._sglang is not None:
            cc = _SGLANG["module"]
            op = cc.StorageOperation(host, [], hash_value=keys)
            try:
                self._captured(lambda: self._sglang._page_backup(op))
            except Exception as e:  # _page_backup_or_log logs and drops it
                self.swallowed.append(e)
            return int(op.completed_tokens) // self.page_size
        done = 0
        for i in range(0, len(keys), STORAGE_BATCH_SIZE):
            batch = keys[i : i + STORAGE_BATCH_SIZE]
            idx = host[i * self.page_size : (i + len(batch)) * self.page_size]
            try:
                ok = self._page_set(batch, idx)
            except Exception as e:
                self.swallowed.append(e)
                break
            if not ok:
                break
            done += len(batch)
        return done

    def _page_set(self, keys: list[str], idx: torch.Tensor) -> bool:
        info = HiCacheStorageExtraInfo(prefix_keys=None)
        if self.path == "v1":
            return all(self.backend.batch_set_v1(keys, idx, info))
        pages = [self.pool.get_data_page(idx[i * self.page_size]) for i in range(len(keys))]
        return bool(self.backend.batch_set(keys, pages))

    def prefetch(self, keys: Sequence[str], first_page: int, kv_derived: Sequence[str] = ()) -> int:
        """Read ``keys`` into pages ``first_page..`` as SGLang's ``_page_transfer`` does
        (with the KV-derived sidecar pools named in ``kv_derived`` read through
        ``batch_get_v2`` and clamped); the number of pages it committed."""
        keys = list(keys)
        host = self.indices(first_page, len(keys))
        transfers = [PoolTransfer(name=PoolName(n), indices_from_pool=PoolName.KV) for n in kv_derived]
        if self._sglang is not None:
            cc = _SGLANG["module"]
            op = cc.PrefetchOperation("hicache-conformance", [])
            op.hash_value, op.host_indices = keys, host
            if transfers:
                from sglang.srt.mem_cache.hicache_storage import PoolName as SPoolName
                from sglang.srt.mem_cache.hicache_storage import PoolTransfer as SPoolTransfer

                op.pool_transfers = [
                    SPoolTransfer(name=SPoolName(n), indices_from_pool=SPoolName.KV) for n in kv_derived
                ]
            return int(self._captured(lambda: self._sglang._page_transfer(op)))
        done = 0
        for i in range(0, len(keys), STORAGE_BATCH_SIZE):
            batch = keys[i : i + STORAGE_BATCH_SIZE]
            idx = host[i * self.page_size : (i + len(batch)) * self.page_size]
            try:
                hits = self._page_get(batch, idx)
                if transfers:
                    side = [PoolTransfer(name=t.name, host_indices=idx, keys=batch) for t in transfers]
                    counts = count_pool_hits(
                        self.backend.batch_get_v2(side, extra_info=HiCacheStorageExtraInfo())
                    )
                    hits = min([hits, *counts.values()])
            except Exception as e:
                self.swallowed.append(e)
                hits = 0
            done += hits
            if hits != len(batch):
                break
        return done

    def _page_get(self, keys: list[str], idx: torch.Tensor) -> int:
        info = HiCacheStorageExtraInfo(prefix_keys=None)
        if self.path == "v1":
            results = self.backend.batch_get_v1(keys, idx, info)
            n = 0
            while n < len(keys) and results[n]:
                n += 1
            return n
        targets = [self.pool.get_dummy_flat_data_page() for _ in keys]
        data = self.backend.batch_get(keys, targets)
        if data is None:
            return 0
        n = 0
        for i in range(len(keys)):
            if data[i] is None:
                break
            self.pool.set_from_flat_data_page(idx[i * self.page_size], data[i])
            n += 1
        return n

    def hit_query(self, keys: Sequence[str]) -> int:
        """Pages SGLang's ``_storage_hit_query`` counts as stored: ``batch_exists`` in
        batches of 128, the leading run."""
        keys = list(keys)
        hit = 0
        for i in range(0, len(keys), STORAGE_BATCH_SIZE):
            batch = keys[i : i + STORAGE_BATCH_SIZE]
            n = int(self.backend.batch_exists(batch, HiCacheStorageExtraInfo(prefix_keys=None)))
            hit += n
            if n < len(batch):
                break
        return hit

    def story(self, last: int = 6) -> str:
        """The last ``last`` backend calls (and swallowed exceptions), one per line."""
        lines = [f"  {c}" for c in self.calls[-last:]]
        lines += [f"  (swallowed by the controller) {type(e).__name__}: {e}" for e in self.swallowed[-3:]]
        return "\n".join(lines) if lines else "  (no backend call)"
