#!/usr/bin/env python3
"""The negative cache against stale "exists" hits (sgl-project/sglang#31315), through the
reference read path.

A store reports one object present whose read takes 5 s and fails (a stale Mooncake entry).
Requests alternate between a prompt whose 4th page is that object and a healthy prompt of
the same length; each request is served by a cold engine (empty device and host pools) over
one shared backend, with the ``timeout`` prefetch policy and the backend's transfer deadline
(``transfer_timeout_s``, 0.25 s) abandoning the stale read. Variants:

* ``negative cache``: ``negative_cache_ttl_s`` = ``--ttl`` (the breaker as by default);
* ``off``: no negative cache (the circuit breaker as by default: it opens after 5 failed
  transfers and then hides every page, healthy ones too, for 1 s at a time);
* ``off, no breaker``: no negative cache and a breaker that never opens.

Per variant: the stale page's timed-out gets (reads started), the most of them that start
within any one TTL, the healthy prompt's L3 hit tokens, and every request's wait from
arrival to admission (the timed samples). Writes ``docs/results/negative_cache.json``::

    flock /work/bench.lock .venv/bin/python scripts/bench_negative_cache.py
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import torch

from hicache_sdk import HiCacheStorageConfig
from hicache_sdk.bench.harness import SCHEMA, write_run
from hicache_sdk.hiradix import (
    CacheState,
    DevicePool,
    Engine,
    MonotonicClock,
    RadixTree,
    ReadPathConfig,
    ThreadRunner,
)
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.memory import MemoryStorage, MemoryTransport, drop_store

PAGE = 16
PAGES = 16
GEOM = {"layer_num": 2, "head_num": 1, "head_dim": 8}
STALL_S = 5.0
TRANSFER_TIMEOUT_S = 0.25


class StaleTransport(MemoryTransport):
    """Stale objects: reported present; a read that touches one takes ``STALL_S`` and fails."""

    def __init__(self, store: str = "default", capacity_bytes: int = 0) -> None:
        super().__init__(store, capacity_bytes)
        self.stale: set[str] = set()
        self.release = threading.Event()
        self.starts: list[float] = []

    def read(self, keys: Sequence[str], buffers: Any) -> list[bool]:
        bad = [k in self.stale for k in keys]
        if any(bad):
            self.starts.append(time.monotonic())
            self.release.wait(STALL_S)
        return [ok and not b for ok, b in zip(super().read(keys, buffers), bad)]


class StaleStorage(MemoryStorage):
    def create_transport(self, config: Any) -> Any:
        return StaleTransport(store=config.store, capacity_bytes=config.capacity_bytes)


def engine(cfg: ReadPathConfig, storage: Any) -> Engine:
    host = MHAHostPool(PAGE * PAGES * 4, PAGE, dtype=torch.float32, pin_memory=False, **GEOM)  # type: ignore[arg-type]
    storage.register_mem_pool_host(host)
    dev = DevicePool(PAGE * PAGES * 4, PAGE, dtype=torch.float32, device="cpu", **GEOM)
    return Engine(CacheState(cfg, host, dev, storage, clock=MonotonicClock(), runner=ThreadRunner()))


def fill(store: str, prompts: list[list[int]]) -> None:
    cfg = ReadPathConfig(page_size=PAGE, prefetch_policy="wait_complete")
    backend = MemoryStorage(HiCacheStorageConfig(model_name="m", extra_config={"store": store}), {})
    e = engine(cfg, backend)
    for i, p in enumerate(prompts):
        e.serve(f"w{i}", p)
    e.flush()
    e.s.close()
    backend.close()


def max_in_window(starts: list[float], window: float) -> int:
    best = 0
    for i, t in enumerate(starts):
        best = max(best, bisect.bisect_left(starts, t + window) - i)
    return best


def run_variant(
    label: str, store: str, prompts: list[list[int]], extra: dict[str, Any], args: Any
) -> dict[str, Any]:
    cfg_extra = {"store": store, "transfer_timeout_s": TRANSFER_TIMEOUT_S, **extra}
    backend = StaleStorage(HiCacheStorageConfig(model_name="m", extra_config=cfg_extra), {})
    stale = backend.raw_transport
    assert isinstance(stale, StaleTransport)
    page3 = RadixTree(PAGE).hashes(prompts[0], None)[3]
    stale.stale.update(n for n in list(stale._store.objects) if page3 in n)
    assert len(stale.stale) == 1
    cfg = ReadPathConfig(page_size=PAGE, prefetch_policy="timeout", write_policy="write_back")
    waits: list[float] = []
    healthy_hit = 0
    t0 = time.monotonic()
    try:
        for i in range(args.requests):
            e = engine(cfg, backend)
            try:
                t = time.perf_counter()
                r = e.serve(f"r{i}", prompts[i % 2])
                waits.append(time.perf_counter() - t)
                if i % 2:
                    healthy_hit += r.storage_hit
            finally:
                e.s.close()
    finally:
        span = time.monotonic() - t0
        stale.release.set()
        backend.close()
    starts = sorted(stale.starts)
    counts = {
        "requests": args.requests,
        "timed_out_gets": len(starts),
        "max_per_ttl": max_in_window(starts, args.ttl),
        "healthy_hit_tokens": healthy_hit,
        "healthy_tokens": (args.requests // 2) * PAGE * PAGES,
        "span_s": round(span, 2),
    }
    print(f"{label:<18} {counts}  median wait {statistics.median(waits) * 1e3:.1f} ms")
    return {"samples": waits, "counts": counts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--ttl", type=float, default=1.0, help="negative_cache_ttl_s (1.0)")
    ap.add_argument("--out", default="docs/results/negative_cache.json")
    args = ap.parse_args()
    prompts = [[(9973 * s + 7 * i) % 32000 for i in range(PAGE * PAGES)] for s in range(2)]
    variants = {
        "negative cache": {"negative_cache_ttl_s": args.ttl},
        "off": {},
        "off, no breaker": {"breaker_failures": 1_000_000, "max_abandoned": 100_000},
    }
    results: dict[str, Any] = {}
    for label, extra in variants.items():
        store = f"bench-neg-{uuid.uuid4().hex}"
        try:
            fill(store, prompts)
            results[label] = run_variant(label, store, prompts, extra, args)
        finally:
            drop_store(store)
    doc = {
        "schema": SCHEMA,
        "name": "stale exists hit",
        "params": {"requests": args.requests, "ttl_s": args.ttl, "transfer_timeout_s": TRANSFER_TIMEOUT_S},
        "repeats": args.requests,
        "results": {
            label: {
                "median_s": statistics.median(r["samples"]),
                "min_s": min(r["samples"]),
                "max_s": max(r["samples"]),
                "samples_s": r["samples"],
                "nbytes": 0,
                "gbps": 0.0,
                "counts": r["counts"],
            }
            for label, r in results.items()
        },
    }
    notes = (
        "Each request's wait from arrival to admission, on a cold engine; counts: the stale "
        "page's timed-out gets, the most of them starting within one TTL, and the healthy "
        "prompt's L3 hit tokens (of `healthy_tokens`)."
    )
    write_run([doc], args.out, notes=notes)


if __name__ == "__main__":
    main()
