"""``hicache bench NAME --engine sglang-linker``: a :class:`~hicache_sdk.sglang.linker.TransportLinker`
over backend ``NAME`` on SGLang's CPU device pools (needs SGLang 0.5.23 or later, importable).

Two real ``MHATokenToKVPool`` pools on the CPU (``layers`` layers, 8 KV heads of 128,
bfloat16, ``tokens_per_page`` tokens a page) and four linkers built by SGLang's own factory
(``dynamic``) under one fresh model name: a writer on the source pool, and three readers on
the destination pool. Each of ``repeats`` timed rounds (after ``warmup`` untimed ones)
offloads ``pages`` pages under fresh keys, then reads them back with every read variant, in a
balanced order that changes every round (see :func:`~hicache_sdk.bench.harness.round_orders`):

* ``linker``: the linker as configured by default (layer by layer through ranged reads where
  the backend's transport reads ranges cheaply, page by page otherwise): ``load``, then
  ``start_layer_wise_loading`` until ``finish_layer_wise_loading`` returns ``True``;
* ``linker, page by page``: the same with ``"ranged_reads": false`` (only where the default
  is layer by layer);
* ``raw read``: the backend's raw transport reading the same objects (payload and trailer)
  into the same device memory, one ``read`` call: what the linker costs nothing over;
* ``raw ranged read`` (only where the default is layer by layer): the raw transport reading
  the same byte ranges into the same memory as the layer-by-layer load, one ranged read
  per layer group for every page, with nothing else: what splitting a page into layer
  groups costs the transport itself.

and times ``offload`` until its result pops, next to ``raw write``: the raw transport
writing the same number of objects of the same size under other fresh names.

Results: ``hicache-bench/1`` documents per backend, the first variant of each *ours*:
``linker-load-NAME`` (``raw read``'s median over ``linker``'s is the load's fraction of the
raw read), ``linker-load-page-by-page-NAME`` (the same for ``"ranged_reads": false``, where
the default is layer by layer; the same ``raw read`` samples), ``linker-layer0-NAME`` (time from ``start_layer_wise_loading`` until
``wait_until(0)`` returns, layer by layer against page by page) and ``linker-offload-NAME``.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .harness import BenchResult, round_orders

__all__ = ["LinkerPlan", "run_linker_bench"]

_HEADS, _HEAD_DIM = 8, 128


@dataclass(frozen=True)
class LinkerPlan:
    """What to measure. ``ValueError`` naming the field for an invalid choice."""

    backend: str
    config: dict[str, Any] = field(default_factory=dict)
    pages: int = 16
    tokens_per_page: int = 16
    layers: int = 32
    repeats: int = 5
    warmup: int = 1

    def __post_init__(self) -> None:
        for name in ("pages", "tokens_per_page", "layers", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")

    def page_bytes(self) -> int:
        return 2 * self.layers * self.tokens_per_page * _HEADS * _HEAD_DIM * 2

    def host_bytes(self) -> int:
        """Memory the run allocates at its peak: two device pools (the padding page
        included) and the raw write's source."""
        return (2 * (self.pages + 1) + self.pages) * self.page_bytes()


def fill_buffers(buffers: list[Any], seed: int | None) -> None:
    """Fill device-pool tensors ``buffers`` with random bytes from ``seed`` (``None``:
    zeros), the same bytes for the same seed and shapes."""
    import torch

    gen = torch.Generator().manual_seed(seed or 0)
    for b in buffers:
        raw = b.view(torch.uint8)
        if seed is None:
            raw.zero_()
        else:
            raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))


def _pool(plan: LinkerPlan, seed: int | None) -> Any:
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    page = plan.tokens_per_page
    pool = MHATokenToKVPool(
        (plan.pages + 1) * page, page, torch.bfloat16, _HEADS, _HEAD_DIM, plan.layers, "cpu", False
    )
    fill_buffers([*pool.k_buffer, *pool.v_buffer], seed)
    return pool


def _linker(pool: Any, plan: LinkerPlan, model: str, **extra: Any) -> Any:
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_cache.linker_factory import create_unified_cache_linker

    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool),
        page_size=plan.tokens_per_page,
    )
    config = {
        "linker": "TransportLinker",
        "linker_module_path": "hicache_sdk.sglang.linker",
        "linker_extra_config": {"backend": plan.backend, "backend_config": dict(plan.config), **extra},
    }
    return create_unified_cache_linker(
        SimpleNamespace(model_path=model, tp_size=1),
        params,
        backend="dynamic",
        config=config,
        components={ComponentType.FULL},
    )


def _kv(keys: list[str], idx: Any) -> list[Any]:
    from ..spec import PoolName, PoolTransfer

    return [PoolTransfer(name=PoolName.KV, keys=keys, device_indices=idx)]


class _Bench:
    """The linkers and pools of one run, and one timed call per variant."""

    def __init__(self, plan: LinkerPlan) -> None:
        import torch

        self.plan = plan
        page, n = plan.tokens_per_page, plan.pages
        self.model = f"hicache-bench/linker-{uuid.uuid4().hex[:8]}"
        self.src, self.dst = _pool(plan, seed=1), _pool(plan, seed=None)
        self.idx = torch.arange(page, (n + 1) * page, dtype=torch.int64)  # page 0: the padding page
        self.made: list[Any] = []
        self.writer = self._make(self.src)
        self.reader = self._make(self.dst)
        self.ranged = self.reader._ranged is not None
        self.whole = self._make(self.dst, ranged_reads=False) if self.ranged else self.reader
        self.keys: list[str] = []
        self.round = 0
        from ..hostpool.describe import page_segments

        kv = self.reader.store._require_kv("bench")
        segs = page_segments(self.reader.view, kv.layout, self.idx[::page].tolist())
        self._segments = segs
        self._kv = kv
        obj = kv.objects(self.reader.store.scheme, "0" * 64, segs[0])
        self.object_size = sum(o.object_size for o in obj)
        self.nbytes = n * sum(self.reader.view.page_segment_sizes())
        self._trailers = [
            torch.empty(o.object_size - o.payload_len, dtype=torch.uint8) for o in obj for _ in range(n)
        ]
        self._write_src = torch.randint(0, 256, (n, self.object_size), dtype=torch.uint8)

    def _make(self, pool: Any, **extra: Any) -> Any:
        linker = _linker(pool, self.plan, self.model, **extra)
        self.made.append(linker)
        return linker

    def close(self) -> None:
        for linker in self.made:
            linker.close()

    def fresh_keys(self) -> None:
        self.round += 1
        self.keys = [
            hashlib.sha256(f"{self.model}-{self.round}-{i}".encode()).hexdigest()
            for i in range(self.plan.pages)
        ]

    # -- timed calls ----------------------------------------------------------------------
    def offload(self) -> float:
        t0 = time.perf_counter()
        if not self.writer.offload(_kv(self.keys, self.idx)):
            raise RuntimeError("offload was refused")
        while self.writer.num_completed_offloads() < 1:
            time.sleep(0.0002)
        dt = time.perf_counter() - t0
        if self.writer.pop_completed_offload() is not True:
            raise RuntimeError("offload failed: not every page was stored")
        return dt

    def raw_write(self) -> float:
        base = self._write_src.data_ptr()
        scheme = self.reader.store.scheme
        names = [  # object names of pages under fresh keys, as the scheme names them
            self._kv.objects(scheme, hashlib.sha256(k.encode()).hexdigest(), s)[0].name
            for k, s in zip(self.keys, self._segments)
        ]
        bufs = [[(base + i * self.object_size, self.object_size)] for i in range(self.plan.pages)]
        t0 = time.perf_counter()
        ok = self.reader.store.raw_transport.write(names, bufs)
        dt = time.perf_counter() - t0
        if not all(ok):
            raise RuntimeError("raw write: not every object was written")
        return dt

    def raw_read(self) -> float:
        store = self.reader.store
        objs = [self._kv.objects(store.scheme, k, s)[0] for k, s in zip(self.keys, self._segments)]
        names = [o.name for o in objs]
        bufs = [[*o.segments, (t.data_ptr(), t.numel())] for o, t in zip(objs, self._trailers)]
        t0 = time.perf_counter()
        ok = store.raw_transport.read(names, bufs)
        dt = time.perf_counter() - t0
        if not all(ok):
            raise RuntimeError("raw read: not every object was read")
        return dt

    def raw_ranged_read(self) -> float:
        """The raw transport reading the same pages into the same memory as the linker's
        layer-by-layer load does: one ranged read per layer group for every page (layer
        0's with each page's trailer), in group order, with no check and no layer counter."""
        from ..sglang.linker.view import layer_groups
        from ..transport import RangedReads

        loader = self.reader._ranged
        raw = self.reader.store.raw_transport
        pages = loader._pages(self.keys, self.idx[:: self.plan.tokens_per_page].tolist())
        names = [p.name for p in pages]
        batches = []
        for g, group in enumerate(layer_groups(len(loader.layers))):
            batch = []
            for page in pages:
                ranges = loader._group_ranges(page, group)
                if g == 0:
                    ranges.append((page.obj.payload_len, [(page.trailer, len(self._trailers[0]))]))
                batch.append(ranges)
            batches.append(batch)
        many = raw.offers(RangedReads)
        t0 = time.perf_counter()
        for batch in batches:
            if many is not None:
                ok = many.read_ranges_batch(names, batch)
            else:
                ok = [raw.read_ranges(n, r) for n, r in zip(names, batch)]
            if not all(ok):
                raise RuntimeError("raw ranged read: not every object was read")
        return time.perf_counter() - t0

    def load(self, linker: Any) -> tuple[float, float]:
        """(seconds until the batch finished, seconds until layer 0 landed)."""
        if linker.load("bench", _kv(self.keys, self.idx)) is not True:
            raise RuntimeError("load was refused")
        t0 = time.perf_counter()
        index = linker.start_layer_wise_loading()
        linker.layer_done_counter.set_consumer(index)
        linker.layer_done_counter.wait_until(0)
        t_layer0 = time.perf_counter() - t0
        ok = linker.finish_layer_wise_loading(index)
        dt = time.perf_counter() - t0
        if ok is not True:
            raise RuntimeError("load failed: finish_layer_wise_loading returned False")
        return dt, t_layer0


def run_linker_bench(plan: LinkerPlan, tick: Callable[[], None] | None = None) -> list[BenchResult]:
    """Run ``plan`` (see the module docs); ``tick()`` after every round. Raises
    ``RuntimeError`` when a call did not move every page."""
    b = _Bench(plan)
    try:
        reads: dict[str, Callable[[], tuple[float, float]]] = {"linker": lambda: b.load(b.reader)}
        if b.ranged:
            reads["linker, page by page"] = lambda: b.load(b.whole)
        reads["raw read"] = lambda: (b.raw_read(), 0.0)
        if b.ranged:
            reads["raw ranged read"] = lambda: (b.raw_ranged_read(), 0.0)
        labels = list(reads)
        orders = round_orders(len(labels))
        load: dict[str, list[float]] = {k: [] for k in labels}
        layer0: dict[str, list[float]] = {k: [] for k in labels if k.startswith("linker")}
        offload: dict[str, list[float]] = {"linker": [], "raw write": []}
        for rnd in range(plan.warmup + plan.repeats):
            b.fresh_keys()
            timed = rnd >= plan.warmup
            writes = [("linker", b.offload), ("raw write", b.raw_write)]
            for label, fn in writes if rnd % 2 == 0 else writes[::-1]:
                dt = fn()
                if timed:
                    offload[label].append(dt)
            for i in orders[rnd % len(orders)]:
                label = labels[i]
                dt, t0 = reads[label]()
                if timed:
                    load[label].append(dt)
                    if label in layer0:
                        layer0[label].append(t0)
            if tick is not None:
                tick()
    finally:
        b.close()
    params = {
        "pages": plan.pages,
        "page_bytes": sum(b.reader.view.page_segment_sizes()),
        "layers": plan.layers,
        "tokens_per_page": plan.tokens_per_page,
    }
    n, write_bytes = b.nbytes, plan.pages * b.object_size

    def result(name: str, samples: dict[str, list[float]], nbytes: dict[str, int]) -> BenchResult:
        return BenchResult(
            name=f"{name}-{plan.backend}",
            params=params,
            repeats=plan.repeats,
            samples={k: tuple(v) for k, v in samples.items()},
            nbytes=nbytes,
        )

    raw = {"raw read": load.pop("raw read")}
    if "raw ranged read" in load:
        raw["raw ranged read"] = load.pop("raw ranged read")
    out = [result("linker-load", {"linker": load["linker"], **raw}, {"linker": n, **{k: n for k in raw}})]
    if b.ranged:
        pages = {"linker, page by page": load["linker, page by page"], "raw read": raw["raw read"]}
        out.append(result("linker-load-page-by-page", pages, {k: n for k in pages}))
    if b.ranged:
        out.append(
            result(
                "linker-layer0",
                {"layer by layer": layer0["linker"], "page by page": layer0["linker, page by page"]},
                {"layer by layer": 0, "page by page": 0},
            )
        )
    else:
        out.append(result("linker-layer0", {"page by page": layer0["linker"]}, {"page by page": 0}))
    out.append(result("linker-offload", offload, {"linker": n, "raw write": write_bytes}))
    return out
