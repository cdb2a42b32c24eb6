"""Benchmark (not a test): page_starts + page_segments for one 128-page batch, against
SGLang-style ``get_page_buffer_meta`` on the same pool. Prints times and the ratio.

Run: ``.venv/bin/python scripts/bench_segments.py``
"""

from __future__ import annotations

import time

import torch

from hicache_sdk.hostpool import (
    MambaHostPool,
    MHAHostPool,
    MLAHostPool,
    describe_pool,
    page_segments,
    page_starts,
)


def _best(fn, reps: int = 200) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def bench(pool, pages: int = 128) -> None:
    layout = describe_pool(pool, "kv")
    idx = pool.alloc(pages * pool.page_size).view(pages, -1)[torch.randperm(pages)].reshape(-1)
    starts = page_starts(idx, pool.page_size, pool.size)
    assert [s for page in page_segments(pool, layout, starts) for s in page] == list(
        zip(*pool.get_page_buffer_meta(idx))
    )
    t_starts = _best(lambda: page_starts(idx, pool.page_size, pool.size))
    t_segs = _best(lambda: page_segments(pool, layout, starts))
    t_meta = _best(lambda: pool.get_page_buffer_meta(idx), reps=20)
    print(
        f"{type(pool).__name__:12s} {pool.layout:18s} segs/page={len(layout.segment_sizes):3d}  "
        f"page_starts {t_starts * 1e6:7.1f} us  page_segments {t_segs * 1e6:7.1f} us  "
        f"get_page_buffer_meta {t_meta * 1e6:8.1f} us  ratio {(t_starts + t_segs) / t_meta:5.2f}"
    )


if __name__ == "__main__":
    for layout in ("page_first", "page_first_direct", "page_head", "layer_first"):
        bench(MHAHostPool(128 * 64, 64, 32, 1, 8, layout=layout))
    for layout in ("page_first", "layer_first"):
        bench(MLAHostPool(128 * 64, 64, 32, 8, 4, layout=layout))
    bench(MambaHostPool(200, (4,), [(2,)], layer_num=4))
