#!/usr/bin/env python
"""Benchmark of ``TransportLinker`` on SGLang's CPU device pools (run in the SGLang env:
``.tox/sglang/bin/python scripts/bench_linker.py``).

Per backend (file; mooncake against a local ``mooncake_master`` this script starts and
stops), in one process, runs interleaved ``--runs`` times (medians reported, every run
kept in the JSON):

* **load**: ``load`` + ``start_layer_wise_loading`` + ``finish_layer_wise_loading`` of
  ``--pages`` pages, against a raw transport read of the same page objects into the same
  device memory (``load/raw``: 1.0 means the linker costs nothing over the transport);
* **time to layer 0**: from ``start_layer_wise_loading`` to ``wait_until(0)``, with
  ranged reads (layer by layer) and without (page by page), and their ratio;
* **offload**: ``offload`` until its result pops, in GB/s.

``--docs docs/linker.md`` rewrites the table between the ``linker-bench`` markers there;
``--out FILE`` writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- linker-bench:start -->", "<!-- linker-bench:end -->"


def _sglang() -> None:
    try:
        import triton  # noqa: F401
    except ImportError:  # a CPU machine: SGLang's GPU-only imports need the test stand-ins
        sys.path.insert(0, str(ROOT / "tests" / "sglang"))
        import sglang_standins

        sglang_standins.install()


def _pool(layers: int, page: int, pages: int, seed: int | None) -> Any:
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    pool = MHATokenToKVPool(pages * page, page, torch.bfloat16, 8, 128, layers, "cpu", False)
    gen = torch.Generator().manual_seed(seed or 0)
    for b in [*pool.k_buffer, *pool.v_buffer]:
        raw = b.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen)) if seed else raw.zero_()
    return pool


def _linker(pool: Any, backend: str, cfg: dict[str, Any], model: str, page: int, **extra: Any) -> Any:
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_cache.linker_factory import create_unified_cache_linker

    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool),
        page_size=page,
    )
    config = {
        "linker": "TransportLinker",
        "linker_module_path": "hicache_sdk.sglang.linker",
        "linker_extra_config": {"backend": backend, "backend_config": cfg, **extra},
    }
    return create_unified_cache_linker(
        SimpleNamespace(model_path=model, tp_size=1),
        params,
        backend="dynamic",
        config=config,
        components={ComponentType.FULL},
    )


def _kv(keys: list[str], idx: Any) -> list[Any]:
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer

    return [PoolTransfer(name=PoolName.KV, keys=keys, device_indices=idx)]


def bench_backend(backend: str, cfg: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import hashlib

    import torch

    page, n, layers = args.page_tokens, args.pages, args.layers
    model = f"bench/linker-{uuid.uuid4().hex[:8]}"
    src, dst = _pool(layers, page, n + 1, seed=1), _pool(layers, page, n + 1, seed=None)
    idx = torch.arange(page, (n + 1) * page, dtype=torch.int64)  # page 0 is the padding page
    writer = _linker(src, backend, cfg, model, page, ranged_reads=False)
    ranged = _linker(dst, backend, cfg, model, page, ranged_reads=True)
    whole = _linker(dst, backend, cfg, model, page, ranged_reads=False)
    page_bytes = whole.view.page_segment_sizes()
    nbytes = n * sum(page_bytes)
    runs: list[dict[str, float]] = []
    try:
        for r in range(args.runs):
            keys = [hashlib.sha256(f"{model}-{r}-{i}".encode()).hexdigest() for i in range(n)]
            t0 = time.perf_counter()
            writer.offload(_kv(keys, idx))
            while writer.num_completed_offloads() < 1:
                time.sleep(0.0005)
            assert writer.pop_completed_offload() is True
            offload_s = time.perf_counter() - t0
            # raw: the same objects, read by the transport into the same memory
            kv = whole.store._require_kv("bench")
            from hicache_sdk.hostpool.describe import page_segments

            segs = page_segments(whole.view, kv.layout, idx[::page].tolist())
            objs = [kv.objects(whole.store.scheme, k, s)[0] for k, s in zip(keys, segs)]
            sizes = whole.store.raw_transport.exists([o.name for o in objs])
            t0 = time.perf_counter()
            # the raw read moves the payload and the trailer, as the linker's read does
            trailers = [torch.empty(o.object_size - o.payload_len, dtype=torch.uint8) for o in objs]
            ok = whole.store.raw_transport.read(
                [o.name for o in objs],
                [[*o.segments, (t.data_ptr(), t.numel())] for o, t in zip(objs, trailers)],
            )
            raw_s = time.perf_counter() - t0
            assert all(ok) and all(s is not None for s in sizes)
            row: dict[str, float] = {"offload_s": offload_s, "raw_s": raw_s}
            for label, linker in (("whole", whole), ("ranged", ranged)):
                assert linker.load("b", _kv(keys, idx)) is True
                t0 = time.perf_counter()
                index = linker.start_layer_wise_loading()
                linker.layer_done_counter.set_consumer(index)
                linker.layer_done_counter.wait_until(0)
                t_layer0 = time.perf_counter() - t0
                assert linker.finish_layer_wise_loading(index) is True
                row[f"{label}_load_s"] = time.perf_counter() - t0
                row[f"{label}_layer0_s"] = t_layer0
            runs.append(row)
    finally:
        for linker in (writer, ranged, whole):
            linker.close()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    gbs = lambda s: nbytes / s / 1e9  # noqa: E731
    return {
        "backend": backend,
        "pages": n,
        "page_bytes": sum(page_bytes),
        "layers": layers,
        "runs": runs,
        "raw_gbs": gbs(med["raw_s"]),
        "load_gbs": gbs(med["whole_load_s"]),
        "load_vs_raw": med["raw_s"] / med["whole_load_s"],
        "ranged_load_vs_raw": med["raw_s"] / med["ranged_load_s"],
        "layer0_whole_ms": med["whole_layer0_s"] * 1e3,
        "layer0_ranged_ms": med["ranged_layer0_s"] * 1e3,
        "layer0_ratio": med["ranged_layer0_s"] / med["whole_layer0_s"],
        "offload_gbs": gbs(med["offload_s"]),
    }


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| backend | pages x MiB | raw read GB/s | load GB/s | load / raw | ranged load / raw "
        "| layer 0, page by page (ms) | layer 0, ranged (ms) | ranged / page by page | offload GB/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = [
        f"| {r['backend']} | {r['pages']} x {r['page_bytes'] / 2**20:.1f} | {r['raw_gbs']:.2f} | {r['load_gbs']:.2f} "
        f"| {r['load_vs_raw']:.2f} | {r['ranged_load_vs_raw']:.2f} | {r['layer0_whole_ms']:.1f} "
        f"| {r['layer0_ranged_ms']:.1f} | {r['layer0_ratio']:.2f} | {r['offload_gbs']:.2f} |"
        for r in results
    ]
    return head + "\n".join(rows) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="file,mooncake")
    p.add_argument("--pages", type=int, default=16)
    p.add_argument("--page-tokens", type=int, default=16)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--out", default=None)
    p.add_argument("--docs", default=None)
    args = p.parse_args()
    _sglang()
    import tempfile

    results = []
    for backend in args.backends.split(","):
        if backend == "file":
            with tempfile.TemporaryDirectory(prefix="hicache-linker-bench-") as root:
                results.append(bench_backend("file", {"root": root}, args))
        elif backend == "mooncake":
            sys.path.insert(0, str(ROOT / "backends" / "mooncake" / "tests"))
            from _servers import MooncakeCluster

            cluster = MooncakeCluster(holder_bytes=(args.pages * 4 * args.runs + 64) << 20)
            cluster.start()
            try:
                results.append(bench_backend("mooncake", cluster.config(), args))
            finally:
                cluster.stop()
        else:
            raise SystemExit(f"unknown backend {backend!r} (file, mooncake)")
    text = table(results)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if args.docs:
        page = Path(args.docs)
        doc = page.read_text(encoding="utf-8")
        a, b = doc.index(START) + len(START), doc.index(END)
        page.write_text(doc[:a] + "\n" + text + doc[b:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
