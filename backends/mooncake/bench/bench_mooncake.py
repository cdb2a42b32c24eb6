"""Benchmark: ours (batch_get_v1 / batch_set_v1 / batch_exists) vs raw Mooncake
(batch_get_into / batch_put_from / batch_is_exist) on the same host-pool buffers and the
same object keys (``sglang-mooncake``: K and V per page), measured in one run.

Starts its own master and holder process on free loopback ports (``--in-process``: no
holder, the client holds the segment). Prints GB/s and ratios ours/raw, staged (deadlines
on, the default) and direct (``transfer_timeout_s: 0``). Best of ``--repeats``.

    .venv/bin/python backends/mooncake/bench/bench_mooncake.py [--in-process]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
os.environ.setdefault("MC_LOG_LEVEL", "ERROR")

from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeStorage

from hicache_sdk import HiCacheStorageConfig
from hicache_sdk.hostpool import MHAHostPool

TOKENS = 64


def best(fn: Callable[[], None], before: Callable[[], None], repeats: int) -> float:
    out = float("inf")
    for _ in range(repeats):
        before()
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def run(args: argparse.Namespace, cluster: MooncakeCluster, page_kib: int, n: int) -> None:
    layers = page_kib * 1024 // (2 * 8 * 128 * 2 * TOKENS)
    pool = MHAHostPool(n * TOKENS, TOKENS, layers, 8, 128, dtype=torch.bfloat16, layout="page_first")
    pool.kv_buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
    )
    idx = torch.arange(n * TOKENS, dtype=torch.int64)
    keys = [f"{page_kib:06x}{i:058x}" for i in range(n)]
    seg = 0 if not args.in_process else 384 << 20
    extra = cluster.config(
        key_scheme="sglang-mooncake",
        global_segment_size=seg,
        staging_bytes=4 * n * page_kib * 1024 + (1 << 20),
    )
    st = MooncakeStorage(HiCacheStorageConfig(model_name="bench", extra_config=extra), {})
    st.register_mem_pool_host(pool)
    raw = st.raw_transport._store  # type: ignore[attr-defined]

    def mode(m: str) -> Callable[[], None]:
        # the same backend object, staged (deadline 5 s) or direct (transfer_timeout_s 0)
        def f() -> None:
            st.transport._transfer_s = 5.0 if m == "staged" else 0.0  # type: ignore[attr-defined]

        return f

    stores = {"staged": mode("staged"), "direct": mode("direct")}
    ptrs, sizes = pool.get_page_buffer_meta(idx)  # type: ignore[misc]
    okeys = [f"bench_{k}_0_{kv}" for k in keys for kv in ("k", "v")]
    total = sum(sizes)

    def wipe() -> None:
        raw.batch_remove(okeys, True)

    def fill() -> None:
        if raw.batch_is_exist(okeys) != [1] * len(okeys):
            assert raw.batch_put_from(okeys, ptrs, sizes) == [0] * len(okeys)

    def nothing() -> None:
        pass

    res: dict[str, float] = {}
    r = args.repeats
    res["raw_put"] = best(lambda: raw.batch_put_from(okeys, ptrs, sizes), wipe, r)
    for m, use in stores.items():
        use()
        res[f"{m}_set"] = best(lambda: st.batch_set_v1(keys, idx), wipe, r)
    fill()
    assert st.batch_exists(keys) == n, "object names differ from SGLang's"
    res["raw_get"] = best(lambda: raw.batch_get_into(okeys, ptrs, sizes), nothing, r)
    res["raw_exists"] = best(lambda: raw.batch_is_exist(okeys), nothing, r)
    for m, use in stores.items():
        use()
        res[f"{m}_get"] = best(lambda: st.batch_get_v1(keys, idx), nothing, r)
        res[f"{m}_exists"] = best(lambda: st.batch_exists(keys), nothing, r)
    where = "in-process segment" if args.in_process else "holder in another process"
    print(f"\n{n} pages x {page_kib} KiB ({where}), {total / 2**20:.0f} MiB per batch, best of {r}")
    for op, raw_key in (("get", "raw_get"), ("set", "raw_put"), ("exists", "raw_exists")):
        line = f"  {op:7s} raw {res[raw_key] * 1e3:8.2f} ms"
        for m in stores:
            t = res[f"{m}_{op}"]
            line += f" | {m} {t * 1e3:8.2f} ms ratio {res[raw_key] / t:.2f}"
        if op != "exists":
            line += f" | raw {total / res[raw_key] / 1e9:.2f} GB/s"
        print(line)
    assert st.batch_get_v1(keys, idx) == [True] * n
    wipe()
    st.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pages-256k", type=int, default=128)
    ap.add_argument("--pages-8m", type=int, default=8)
    args = ap.parse_args()
    c = MooncakeCluster(holder_bytes=384 << 20)
    try:
        c.start_master()
        if not args.in_process:
            c.start_holder()
        run(args, c, 256, args.pages_256k)
        run(args, c, 8192, args.pages_8m)
    finally:
        c.stop()


if __name__ == "__main__":
    main()
