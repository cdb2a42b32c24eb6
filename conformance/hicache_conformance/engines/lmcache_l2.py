"""LMCache's multiprocess L2 adapters, built and driven the way LMCache does it.

* :func:`adapter_spec` turns a target into the ``--l2-adapter`` JSON ``lmcache server``
  takes: a hicache-sdk backend name (or ``module:Class`` of one) becomes our
  ``hicache_sdk.lmcache.L2Adapter`` over it; ``module:Class`` of an ``L2AdapterInterface``
  subclass is loaded as LMCache's ``plugin`` type with the config as its
  ``adapter_params``; ``lmcache:TYPE`` is one of LMCache's built-in types (``lmcache:fs``)
  with the config as its keys.
* :func:`build` builds it through LMCache's own parser and factory (the
  ``lmcache server --l2-adapter`` path), so an error LMCache would only log fails here.
* :class:`Driver` submits, waits on the task's event fd with a deadline, and collects the
  result once: ``None`` means the task did not complete in time.
* :func:`make_key` / :func:`make_obj`: LMCache ``ObjectKey`` and CPU ``TensorMemoryObj``.

:func:`unavailable` says why LMCache cannot be used here (``None`` when it can).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import select
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "Driver",
    "adapter_spec",
    "build",
    "is_l2_class",
    "make_key",
    "make_obj",
    "obj_bytes",
    "unavailable",
]

#: The module and class of our binding.
OURS = ("hicache_sdk.lmcache", "L2Adapter")


def unavailable() -> str | None:
    """Why LMCache's L2 adapters cannot be built here, or ``None``."""
    try:
        importlib.import_module("lmcache.v1.distributed.l2_adapters")
    except Exception as e:
        return f"LMCache is not importable ({type(e).__name__}: {e}): pip install 'hicache-sdk[lmcache]'"
    return None


def _l2_class(target: str) -> Any:
    """The ``L2AdapterInterface`` subclass ``target`` names, or ``None``."""
    if ":" not in target:
        return None
    module, _, name = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module), name)
    except Exception:
        return None
    from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface

    return obj if isinstance(obj, type) and issubclass(obj, L2AdapterInterface) else None


def is_l2_class(target: str) -> bool:
    """Whether ``target`` is ``module:Class`` of an LMCache ``L2AdapterInterface`` subclass."""
    return _l2_class(target) is not None


def adapter_spec(target: str, config: Mapping[str, Any] | None = None, **params: Any) -> dict[str, Any]:
    """The ``--l2-adapter`` JSON object for ``target`` (see the module docs). ``params``
    are more ``adapter_params`` of our binding (``workers``, ``task_timeout_s``)."""
    config = dict(config or {})
    if target.startswith("lmcache:"):
        return {"type": target.partition(":")[2], **config}
    cls = _l2_class(target)
    if cls is not None:
        return {
            "type": "plugin",
            "module_path": cls.__module__,
            "class_name": cls.__name__,
            "adapter_params": config,
        }
    module, name = OURS
    return {
        "type": "plugin",
        "module_path": module,
        "class_name": name,
        "adapter_params": {"backend": target, "backend_config": config, **params},
    }


def build(spec: Mapping[str, Any], l1_memory_desc: Any = None) -> Any:
    """Build the adapter as ``lmcache server --l2-adapter JSON`` does (parser, then
    factory); every error propagates."""
    from lmcache.v1.distributed.l2_adapters import create_l2_adapter
    from lmcache.v1.distributed.l2_adapters.config import (
        add_l2_adapters_args,
        parse_args_to_l2_adapters_config,
    )

    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    args = parser.parse_args(["--l2-adapter", json.dumps(dict(spec))])
    (cfg,) = parse_args_to_l2_adapters_config(args).adapters
    return create_l2_adapter(cfg, l1_memory_desc=l1_memory_desc)


def make_key(
    i: int | bytes, model: str = "conformance/model", rank: int = 0, group: int = 0, salt: str = ""
) -> Any:
    """An ``ObjectKey``: chunk hash sha256(str(i)) (or ``i`` itself when bytes)."""
    from lmcache.v1.distributed.api import ObjectKey

    h = i if isinstance(i, bytes) else hashlib.sha256(str(i).encode()).digest()
    return ObjectKey(chunk_hash=h, model_name=model, kv_rank=rank, object_group_id=group, cache_salt=salt)


def make_obj(numel: int, dtype: Any = None, fill: int | None = None, seed: int = 0) -> Any:
    """A CPU ``TensorMemoryObj`` of ``numel`` elements of ``dtype`` (float16 by default):
    filled with ``fill``, or with bytes from ``seed`` when ``fill`` is ``None``."""
    import torch
    from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj

    dtype = dtype or torch.float16
    raw = torch.empty(numel, dtype=dtype)
    if fill is None:
        g = torch.Generator().manual_seed(seed)
        raw.view(torch.uint8).copy_(
            torch.randint(0, 256, (raw.numel() * raw.element_size(),), generator=g, dtype=torch.uint8)
        )
    else:
        raw.view(torch.uint8).fill_(fill)
    meta = MemoryObjMetadata(
        shape=torch.Size([numel]),
        dtype=dtype,
        address=raw.data_ptr(),
        phy_size=raw.numel() * raw.element_size(),
        fmt=MemoryFormat.KV_2LTD,
        ref_count=1,
    )
    return TensorMemoryObj(raw, meta, parent_allocator=None)


def obj_bytes(obj: Any) -> bytes:
    """The payload bytes of a memory object."""
    return bytes(obj.byte_array)


def _wait(fd: int, until: float) -> bool:
    left = until - time.monotonic()
    if left <= 0:
        return False
    return bool(select.select([fd], [], [], left)[0])


def _drain(fd: int) -> None:
    import os

    try:
        os.eventfd_read(fd)
    except (BlockingIOError, OSError):
        pass


class Driver:
    """Submit a task, wait for its fd (at most ``timeout_s``), collect its result once."""

    def __init__(self, adapter: Any, timeout_s: float = 30.0) -> None:
        self.adapter = adapter
        self.timeout_s = timeout_s

    def _until(self, timeout_s: float | None) -> float:
        return time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)

    def store(self, keys: Sequence[Any], objs: Sequence[Any], timeout_s: float | None = None) -> Any:
        """The task's ``L2StoreResult``, or ``None`` when it did not complete in time."""
        a = self.adapter
        fd = a.get_store_event_fd()
        tid = a.submit_store_task(list(keys), list(objs))
        until = self._until(timeout_s)
        got: dict[int, Any] = {}
        while tid not in got:
            if not _wait(fd, until):
                got.update(a.pop_completed_store_tasks())
                return got.get(tid)
            _drain(fd)
            got.update(a.pop_completed_store_tasks())
        return got[tid]

    def _bits(self, fd: int, query: Any, tid: int, n: int, until: float) -> list[bool] | None:
        while True:
            bm = query(tid)
            if bm is not None:
                return [bool(bm.test(i)) for i in range(n)]
            if not _wait(fd, until):
                bm = query(tid)
                return None if bm is None else [bool(bm.test(i)) for i in range(n)]
            _drain(fd)

    def lookup(
        self, keys: Sequence[Any], descs: Mapping[int, Any] | None = None, timeout_s: float | None = None
    ) -> list[bool] | None:
        """One bool per key, or ``None`` when the task did not complete in time."""
        a = self.adapter
        tid = a.submit_lookup_and_lock_task(list(keys), dict(descs or {}))
        return self._bits(
            a.get_lookup_and_lock_event_fd(),
            a.query_lookup_and_lock_result,
            tid,
            len(keys),
            self._until(timeout_s),
        )

    def load(
        self, keys: Sequence[Any], objs: Sequence[Any], timeout_s: float | None = None
    ) -> list[bool] | None:
        """One bool per key, or ``None`` when the task did not complete in time."""
        a = self.adapter
        tid = a.submit_load_task(list(keys), list(objs))
        return self._bits(a.get_load_event_fd(), a.query_load_result, tid, len(keys), self._until(timeout_s))
