"""``hicache bench``'s measurement: set / get / exists of any backend, by name, across page
sizes and batch sizes, each timed by the :class:`~hicache_sdk.bench.Harness`.

For every page size, a backend is built by name (``create_backend``; ``HiCacheStorageConfig(
model_name="hicache-bench")`` plus the given config) over a bfloat16 MHA host pool whose page
is exactly that many bytes (1 head, ``head_dim`` 64, ``tokens_per_page`` tokens, as many layers
as the size needs). Then, for every batch size ``b``, one harness run per op:

* ``set``: ``batch_set_v1`` of ``b`` pages under *fresh* keys every call (rewriting a stored
  key is a no-op by contract, which would measure nothing);
* ``get``: ``batch_get_v1`` of ``b`` pages written beforehand (untimed), into other slots;
* ``exists``: ``batch_exists`` over those ``b`` present keys.

A backend without v1 (see :func:`hicache_sdk.sglang.checks.implements_v1`) runs the generic
``batch_set``/``batch_get`` with flat pages instead (``params["api"] == "generic"``). Next
to ``ours``, set and get time ``limit_memcpy``: one single-threaded ``memmove`` of the same
number of bytes between pre-faulted buffers, the machine's memory-copy limit (interleaved with ours, so the ratio ``ours/limit`` is robust to
load). A call that does not report every page stored / read / present counts in
``params["failures"]``. Every key written is deleted at the end when the backend has
``batch_delete`` (or ``delete``). Each result is a plain ``hicache-bench/1`` document.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sglang.checks import implements_v1
from .harness import BenchResult, Harness
from .progress import Progress

__all__ = ["OPS", "BenchPlan", "geometry", "human_bytes", "run_plan"]

OPS = ("set", "get", "exists")
_HEAD_DIM = 64
_KV_BYTES_PER_TOKEN_LAYER = 2 * _HEAD_DIM * 2  # K and V, one head, bfloat16


@dataclass(frozen=True)
class BenchPlan:
    """What to measure. ``ValueError`` (naming the field) for an empty or invalid choice."""

    backend: str
    config: dict[str, Any] = field(default_factory=dict)
    ops: tuple[str, ...] = OPS
    page_bytes: tuple[int, ...] = (64 << 10,)
    batches: tuple[int, ...] = (1, 8, 32)
    tokens_per_page: int = 16
    layout: str = "page_first"
    repeats: int = 10
    warmup: int = 1
    limit: bool = True
    dist: str | None = None

    def __post_init__(self) -> None:
        for name in ("ops", "page_bytes", "batches"):
            if not getattr(self, name):
                raise ValueError(f"{name}: choose at least one")
        bad = [op for op in self.ops if op not in OPS]
        if bad:
            raise ValueError(f"ops: unknown {bad}; choose from {list(OPS)}")
        if any(b < 1 for b in self.batches):
            raise ValueError(f"batches must be >= 1, got {list(self.batches)}")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {self.repeats}, {self.warmup}")
        for pb in self.page_bytes:
            geometry(pb, self.tokens_per_page)

    def host_bytes(self) -> int:
        """Host memory the run allocates at its peak: the host pool of the largest page size
        (two slots per page of the largest batch) and, with the limit variant, its two copy
        buffers of the largest batch."""
        pb, b = max(self.page_bytes), max(self.batches)
        return 2 * b * pb + (2 * b * pb if self.limit else 0)

    def total_calls(self) -> int:
        """Timed plus warm-up calls of the whole plan (the progress bar's total)."""
        per_op = {op: 2 if self.limit and op != "exists" else 1 for op in self.ops}
        calls = sum(per_op.values()) * (self.repeats + self.warmup)
        return calls * len(self.page_bytes) * len(self.batches)


def geometry(page_bytes: int, tokens_per_page: int) -> int:
    """The layer count giving pages of exactly ``page_bytes``; ``ValueError`` when the size
    is not a positive multiple of ``256 * tokens_per_page`` bytes."""
    if tokens_per_page < 1:
        raise ValueError(f"tokens_per_page must be >= 1, got {tokens_per_page}")
    unit = _KV_BYTES_PER_TOKEN_LAYER * tokens_per_page
    if page_bytes < unit or page_bytes % unit:
        raise ValueError(
            f"page size {page_bytes} B: must be a positive multiple of {unit} B "
            f"(256 B per token and layer x {tokens_per_page} tokens per page)"
        )
    return page_bytes // unit


def human_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def _fresh_keys(run: str, n: int, counter: Iterator[int]) -> list[str]:
    return [hashlib.sha256(f"{run}:{next(counter)}".encode()).hexdigest() for _ in range(n)]


def run_plan(plan: BenchPlan, progress: Progress | None = None) -> list[BenchResult]:
    """Measure ``plan``; one :class:`BenchResult` per (page size, batch, op), in that order.
    Backend construction errors propagate (the caller reports them)."""
    import torch

    from ..hostpool import MHAHostPool  # type: ignore[attr-defined]
    from ..registry import create_backend
    from ..spec import HiCacheStorageConfig, PoolName

    bar = progress if progress is not None else Progress(plan.total_calls(), enabled=False)
    results: list[BenchResult] = []
    run_id = uuid.uuid4().hex
    counter = iter(range(1 << 62))
    maxb = max(plan.batches)
    for pb in plan.page_bytes:
        tokens = plan.tokens_per_page
        pool = MHAHostPool(
            2 * maxb * tokens,
            tokens,
            geometry(pb, tokens),
            1,
            _HEAD_DIM,
            layout=plan.layout,
            pin_memory=False,
        )
        raw = pool.kv_buffer.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8))
        sc = HiCacheStorageConfig(
            model_name="hicache-bench", is_page_first_layout=plan.layout == "page_first"
        )
        backend = create_backend(plan.backend, sc, plan.config, dist=plan.dist)
        written: list[str] = []
        try:
            backend.register_mem_pool_host(pool)
            backend.register_mem_host_pool_v2(pool, PoolName.KV)
            backend.on_host_pools_registered()
            v1 = implements_v1(backend)
            for b in plan.batches:
                ctx = _Ctx(plan, backend, pool, torch, pb, b, maxb, v1, run_id, counter, written, bar)
                for op in plan.ops:
                    results.append(ctx.measure(op))
        finally:
            _cleanup(backend, written)
            backend.close()
    bar.close()
    return results


class _Ctx:
    """One (page size, batch) cell: slots, pre-written keys, the limit buffers."""

    def __init__(
        self,
        plan: BenchPlan,
        backend: Any,
        pool: Any,
        torch: Any,
        page_bytes: int,
        batch: int,
        maxb: int,
        v1: bool,
        run_id: str,
        counter: Iterator[int],
        written: list[str],
        bar: Progress,
    ) -> None:
        self.plan, self.backend, self.pool, self.torch = plan, backend, pool, torch
        self.pb, self.b, self.v1 = page_bytes, batch, v1
        self.run_id, self.counter, self.written, self.bar = run_id, counter, written, bar
        t = plan.tokens_per_page
        self.src = torch.arange(0, batch * t, dtype=torch.int64)
        self.dst = torch.arange(maxb * t, (maxb + batch) * t, dtype=torch.int64)
        self.src_pages = [pool.get_data_page(i * t, flat=True) for i in range(batch)]
        self.dst_pages = [pool.get_data_page((maxb + i) * t, flat=True) for i in range(batch)]
        self.present = self.keys(batch)
        if not all(self._set(self.present)):
            raise RuntimeError(f"{plan.backend}: could not write the {batch} pages that get/exists read")

    def keys(self, n: int) -> list[str]:
        ks = _fresh_keys(self.run_id, n, self.counter)
        self.written.extend(ks)
        return ks

    def _set(self, keys: list[str]) -> list[bool]:
        if self.v1:
            return list(self.backend.batch_set_v1(keys, self.src))
        return [bool(self.backend.batch_set(keys, self.src_pages))] * len(keys)

    def _get(self) -> list[bool]:
        if self.v1:
            return list(self.backend.batch_get_v1(self.present, self.dst))
        got = self.backend.batch_get(self.present, self.dst_pages)
        return [p is not None for p in got] if isinstance(got, list) else [False] * self.b

    def measure(self, op: str) -> BenchResult:
        plan, b, pb = self.plan, self.b, self.pb
        failures = [0]
        nbytes = 0 if op == "exists" else b * pb
        fn: Callable[[], object]
        if op == "set":
            fresh = [self.keys(b) for _ in range(plan.repeats + plan.warmup)]
            it = iter(fresh)

            def fn() -> None:
                if not all(self._set(next(it))):
                    failures[0] += 1

        elif op == "get":

            def fn() -> None:
                if not all(self._get()):
                    failures[0] += 1

        else:

            def fn() -> None:
                if self.backend.batch_exists(self.present) != b:
                    failures[0] += 1

        params = {
            "backend": plan.backend,
            "op": op,
            "page_bytes": pb,
            "batch": b,
            "tokens_per_page": plan.tokens_per_page,
            "layout": plan.layout,
            "api": "v1" if self.v1 else "generic",
        }
        self.bar.describe(f"{op} {human_bytes(pb)} x{b}")
        h = Harness(f"{plan.backend}-{op}-{human_bytes(pb)}-b{b}", params)
        h.add("ours", fn, nbytes=nbytes)
        if plan.limit and op != "exists":
            # one single-threaded memmove between pre-faulted buffers (torch's copy_ would
            # fan out to its thread pool, whose wake-ups dominate small copies on a busy host)
            a = np.ones(b * pb, dtype=np.uint8)
            c = np.zeros(b * pb, dtype=np.uint8)
            h.add("limit_memcpy", lambda: ctypes.memmove(c.ctypes.data, a.ctypes.data, b * pb), nbytes=nbytes)
        res = h.run(repeats=plan.repeats, warmup=plan.warmup, setup=self.bar.tick)
        return dataclasses.replace(res, params={**res.params, "failures": failures[0]})


def _cleanup(backend: Any, keys: Sequence[str]) -> None:
    """Delete the pages written, when the backend can; failures are ignored (best effort)."""
    try:
        if callable(getattr(backend, "batch_delete", None)):
            for i in range(0, len(keys), 1024):
                backend.batch_delete(list(keys[i : i + 1024]))
        elif callable(getattr(backend, "delete", None)):
            for k in keys:
                backend.delete(k)
    except Exception:  # best effort; the bench result stands
        pass
