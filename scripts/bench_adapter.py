"""Micro-benchmark of the paged adapter over the memory transport.

128 pages of 256 KiB (MHA page_first, bf16: page_size 64, 8 layers, 2 heads, head_dim 64)
through ``batch_set_v1`` / ``batch_get_v1``, against a raw ``ctypes.memmove`` loop over the
same segments (the machine's copy limit for this access pattern). Prints GB/s and ratios
measured in this run; nothing is asserted.

    .venv/bin/python scripts/bench_adapter.py [--reps 10] [--checksum]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import statistics
import time
import uuid

import torch

from hicache_sdk.hostpool import MHAHostPool, page_segments
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.spec import HiCacheStorageConfig

PAGES, PAGE_SIZE, LAYERS, HEADS, HEAD_DIM = 128, 64, 8, 2, 64


def make_pool() -> MHAHostPool:
    pool = MHAHostPool(
        PAGES * PAGE_SIZE, PAGE_SIZE, LAYERS, HEADS, HEAD_DIM, dtype=torch.bfloat16, pin_memory=False
    )
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8))
    return pool


def best_gbps(fn, nbytes: int, reps: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for i in range(reps):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times) / 1e9


def run(reps: int, extra: dict[str, object]) -> dict[str, float]:
    store = f"bench-{uuid.uuid4().hex}"
    src, dst = make_pool(), make_pool()
    sc = HiCacheStorageConfig(model_name="bench", extra_config={"store": store, **extra})
    s, r = MemoryStorage(sc, {}), MemoryStorage(sc, {})
    s.register_mem_pool_host(src)
    r.register_mem_pool_host(dst)
    slots = torch.arange(PAGES * PAGE_SIZE, dtype=torch.int64)
    page_bytes = 2 * PAGE_SIZE * LAYERS * HEADS * HEAD_DIM * 2
    total = PAGES * page_bytes
    key_sets = [
        [hashlib.sha256(f"{rep}-{i}".encode()).hexdigest() for i in range(PAGES)] for rep in range(reps)
    ]

    def put(i: int) -> None:
        assert all(s.batch_set_v1(key_sets[i], slots))

    def get(i: int) -> None:
        assert all(r.batch_get_v1(key_sets[i], slots))

    set_gbps = best_gbps(put, total, reps)
    get_gbps = best_gbps(get, total, reps)
    n = PAGES * PAGE_SIZE  # the padding page beyond is not transferred
    assert torch.equal(src.kv_buffer[:, :n].view(torch.uint8), dst.kv_buffer[:, :n].view(torch.uint8))

    from hicache_sdk.hostpool import describe_pool

    layout = describe_pool(src, "kv")
    s_segs = page_segments(src, layout, list(range(0, PAGES * PAGE_SIZE, PAGE_SIZE)))
    d_segs = page_segments(dst, layout, list(range(0, PAGES * PAGE_SIZE, PAGE_SIZE)))

    def raw(_: int) -> None:
        for a, b in zip(s_segs, d_segs):
            for (sa, n), (da, _n) in zip(a, b):
                ctypes.memmove(da, sa, n)

    raw_gbps = best_gbps(raw, total, reps)
    s.close()
    r.close()
    drop_store(store)
    return {"set_v1": set_gbps, "get_v1": get_gbps, "memmove": raw_gbps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--checksum", action="store_true")
    args = ap.parse_args()
    print(
        f"{PAGES} pages x {2 * PAGE_SIZE * LAYERS * HEADS * HEAD_DIM * 2 // 1024} KiB, median of {args.reps}"
    )
    for label, extra in (
        ("inline (deadlines 0)", {"exists_timeout_s": 0, "transfer_timeout_s": 0}),
        ("default config (deadlines + staging)", {}),
    ):
        if args.checksum:
            extra = {**extra, "checksum": True}
        res = run(args.reps, extra)
        m = res["memmove"]
        print(
            f"{label:38s} set_v1 {res['set_v1']:6.2f} GB/s ({res['set_v1'] / m:4.2f}x memmove)  "
            f"get_v1 {res['get_v1']:6.2f} GB/s ({res['get_v1'] / m:4.2f}x memmove)  memmove {m:6.2f} GB/s"
        )


if __name__ == "__main__":
    main()
