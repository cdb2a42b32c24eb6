"""Benchmark of the file backend against raw file I/O over the same files, in one run.

    python backends/file/bench/bench_file.py --root /var/tmp/hc-bench --out docs/results/file.json
    options: --page-kib 256 8192  --pages 128  --repeats 5  --no-cold  --no-set

Every case is one interleaved harness run (:class:`hicache_sdk.bench.Harness`); the first
variant is ours, and "ours vs this" in the generated table is this variant's median time
over ours (at or above 0.9: ours reaches 90 % of its throughput). Ours is ``FileStorage``
with its default settings (only ``root`` given) on a bfloat16 MHA host pool in SGLang's
default ``page_first`` layout, 64 tokens per page (Llama-3-8B geometry). ``--out`` writes
the run with :func:`hicache_sdk.bench.harness.write_run`.

Variants:
* get warm: ``batch_get_v1`` into the host pool vs an ``open``/``os.preadv``/``close``
  loop over the same files into distinct buffers (the page-cache limit);
* get warm, layer by layer (``--no-layers`` leaves it out): in the same interleaved rounds,
  the raw loop, our file transport alone (``raw_transport.read`` of the same object names
  into the same buffers), the resilience layer over it (``transport.read``: deadline,
  breaker, worker hand-off) and the whole adapter (``batch_get_v1``); printed as the
  per-page time of each and what each layer adds to the one below;
* get cold (the files dropped from the page cache before every call, with
  ``POSIX_FADV_DONTNEED``): ours vs buffered 1 and 4 threads and O_DIRECT 4 and 8 threads
  (page-aligned buffers);
* set: ``batch_set_v1`` (fresh directory each call) vs a raw ``open``/``pwritev``/``close`` loop;
* exists over 1,000 present pages: ``batch_exists`` vs an ``os.stat`` loop, with and
  without the metadata cache;
* checksum on: the same get/set with ``checksum=true``.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import mmap
import os
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from hicache_backend_file import FileStorage

from hicache_sdk.bench import Harness
from hicache_sdk.bench.harness import BenchResult, write_run
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig

TOKENS = 64


def drop_caches(paths: list[str]) -> None:
    """Drop these files (only) from the page cache: written back first, then
    ``POSIX_FADV_DONTNEED`` (the machine's other page-cache contents stay)."""
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def storage(root: str, pool: Any, **extra: Any) -> FileStorage:
    sc = HiCacheStorageConfig(model_name="meta-llama/Llama-3-8B", extra_config={"root": root, **extra})
    s = FileStorage(sc, {})
    s.register_mem_pool_host(pool)
    return s


def page_files(root: str) -> list[str]:
    out = []
    for dp, _dn, fn in os.walk(root):
        out += [os.path.join(dp, f) for f in fn if not f.startswith(".")]
    return sorted(out)


def raw_read(paths: list[str], bufs: list[memoryview], threads: int = 1, direct: bool = False) -> None:
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)

    def one(i: int) -> None:
        fd = os.open(paths[i], flags)
        try:
            os.preadv(fd, [bufs[i]], 0)
        finally:
            os.close(fd)

    if threads == 1:
        for i in range(len(paths)):
            one(i)
    else:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(one, range(len(paths))))


def print_layers(res: BenchResult, pages: int) -> None:
    """Per-page median of each layer and what it adds to the one below (µs per page)."""
    med = res.medians()
    rows = [
        ("raw_preadv", "raw open/preadv/close loop"),
        ("file_transport", "+ file transport"),
        ("resilience", "+ resilience layer"),
        ("ours", "+ paged adapter (batch_get_v1)"),
    ]
    print(f"{res.name}: per-page cost, median of {res.repeats} interleaved rounds of {pages} pages")
    below = None
    for label, what in rows:
        us = med[label] / pages * 1e6
        added = "" if below is None else f"  ({us - below:+8.2f})"
        print(f"  {what:32s} {us:9.2f} µs/page{added}")
        below = us
    print(f"  raw / ours: {med['raw_preadv'] / med['ours']:.2f}")
    if "ours_follow_cpu" in med:
        print(f"  raw / ours with follow_caller_cpu: {med['raw_preadv'] / med['ours_follow_cpu']:.2f}")


def bench_page(args: argparse.Namespace, page_kib: int) -> list[Any]:
    layers = page_kib * 1024 // (2 * 8 * 128 * 2 * TOKENS)
    n = args.pages
    pool = MHAHostPool(
        n * TOKENS, TOKENS, layers, 8, 128, dtype=torch.bfloat16, layout="page_first", pin_memory=False
    )
    pool.kv_buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
    )
    idx = torch.arange(n * TOKENS, dtype=torch.int64)
    # sorted: ours and the raw loop (sorted paths) then visit the files in the same order
    keys = sorted(hashlib.sha256(f"{page_kib}-{i}".encode()).hexdigest() for i in range(n))
    root = os.path.join(args.root, f"p{page_kib}")
    shutil.rmtree(root, ignore_errors=True)
    s = storage(root, pool)
    s_ck = storage(root + "-ck", pool, checksum=True)
    s_follow = storage(root, pool, follow_caller_cpu=True)
    assert s.batch_set_v1(keys, idx) == [True] * n
    assert s_ck.batch_set_v1(keys, idx) == [True] * n
    paths = page_files(root)
    size = os.path.getsize(paths[0])
    total = size * n
    aligned = (size + 4095) // 4096 * 4096
    arena = mmap.mmap(-1, aligned * n)
    bufs = [memoryview(arena)[i * aligned : i * aligned + size] for i in range(n)]
    dbufs = [memoryview(arena)[i * aligned : (i + 1) * aligned] for i in range(n)]
    params = {
        "pages": n,
        "page_bytes": size,
        "model": "Llama-3-8B MHA bf16, 64 tok/page",
        "layers": layers,
        "thread_repinning": "off (the default; ours_follow_cpu: on)",
    }

    def get(st: FileStorage) -> Callable[[], None]:
        def f() -> None:
            assert st.batch_get_v1(keys, idx) == [True] * n

        return f

    results = []
    h = Harness(f"file-get-warm-{page_kib}KiB", params)
    h.add("ours", get(s), nbytes=total)
    h.add("raw_preadv", lambda: raw_read(paths, bufs), nbytes=total)
    h.add("ours_checksum", get(s_ck), nbytes=total)
    results.append(h.run(repeats=args.repeats, warmup=1))

    if args.layers:
        # the same files and buffers, each layer of ours alone: the transport reads the
        # objects by name, the resilience layer adds its deadline and worker hand-off, the
        # adapter its names, pool slots and header checks
        names = [os.path.relpath(p, root) for p in paths]
        base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
        segs = [[(base + i * aligned, size)] for i in range(n)]
        t, rt = s.raw_transport, s.transport

        def layer(read: Callable[..., list[bool]]) -> Callable[[], None]:
            def f() -> None:
                assert read(names, segs) == [True] * n

            return f

        h = Harness(f"file-get-layers-{page_kib}KiB", params)
        h.add("ours", get(s), nbytes=total)
        h.add("raw_preadv", lambda: raw_read(paths, bufs), nbytes=total)
        h.add("file_transport", layer(t.read), nbytes=total)
        h.add("resilience", layer(rt.read), nbytes=total)
        # the same adapter with the opt-in thread re-pinning (follow_caller_cpu: the worker
        # woken on the caller's CPU): the figure it buys
        h.add("ours_follow_cpu", get(s_follow), nbytes=total)
        res = h.run(repeats=args.repeats, warmup=1)
        results.append(res)
        print_layers(res, n)

    if args.cold:
        all_paths = paths + page_files(root + "-ck")
        h = Harness(f"file-get-cold-{page_kib}KiB", params)
        h.add("ours", get(s), nbytes=total)
        h.add("raw_buffered_1t", lambda: raw_read(paths, bufs), nbytes=total)
        h.add("raw_buffered_4t", lambda: raw_read(paths, bufs, 4), nbytes=total)
        h.add("raw_odirect_4t", lambda: raw_read(paths, dbufs, 4, True), nbytes=total)
        h.add("raw_odirect_8t", lambda: raw_read(paths, dbufs, 8, True), nbytes=total)
        results.append(
            h.run(repeats=max(2, args.repeats // 2), warmup=0, setup=lambda: drop_caches(all_paths))
        )

    s.close()
    s_ck.close()
    for d in (root, root + "-ck"):  # disk: the set tables need room for three more copies
        shutil.rmtree(d, ignore_errors=True)
    if args.set:
        wroot = os.path.join(args.root, f"w{page_kib}")
        rawdir = os.path.join(args.root, f"raw{page_kib}")

        def reset() -> None:
            for d in (wroot, wroot + "-ck", rawdir):
                shutil.rmtree(d, ignore_errors=True)
            os.makedirs(rawdir, mode=0o700)

        reset()
        ws, ws_ck = storage(wroot, pool), storage(wroot + "-ck", pool, checksum=True)

        def put(st: FileStorage) -> Callable[[], None]:
            def f() -> None:
                assert st.batch_set_v1(keys, idx) == [True] * n

            return f

        def raw_write() -> None:
            for i in range(n):
                fd = os.open(os.path.join(rawdir, keys[i]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.pwritev(fd, [bufs[i]], 0)
                finally:
                    os.close(fd)

        def setup() -> None:
            ws.clear()
            ws_ck.clear()
            for f in os.listdir(rawdir):
                os.unlink(os.path.join(rawdir, f))

        h = Harness(f"file-set-{page_kib}KiB", params)
        h.add("ours", put(ws), nbytes=total)
        h.add("raw_pwritev", raw_write, nbytes=total)
        h.add("ours_checksum", put(ws_ck), nbytes=total)
        results.append(h.run(repeats=max(2, args.repeats // 2), warmup=1, setup=setup))
        ws.close()
        ws_ck.close()
        reset()
    return results


def bench_exists(args: argparse.Namespace) -> Any:
    n = 1000
    pool = MHAHostPool(n * 4, 4, 1, 1, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
    idx = torch.arange(n * 4, dtype=torch.int64)
    keys = [hashlib.sha256(f"e{i}".encode()).hexdigest() for i in range(n)]
    root = os.path.join(args.root, "exists")
    shutil.rmtree(root, ignore_errors=True)
    s = storage(root, pool)
    s_mc = storage(root, pool, enable_metadata_cache=True, metadata_ttl=-1)
    assert s.batch_set_v1(keys, idx) == [True] * n
    paths = page_files(root)
    assert len(paths) == n

    def raw() -> None:
        for p in paths:
            os.stat(p)

    names = [os.path.relpath(p, root) for p in paths]
    t = s.raw_transport
    h = Harness("file-exists-1000", {"pages": n})
    h.add("ours", lambda: s.batch_exists(keys) == n or sys.exit("exists failed"))
    h.add("raw_stat", raw)
    h.add("transport_exists", lambda: None not in t.exists(names) or sys.exit("exists failed"))
    h.add("ours_metadata_cache", lambda: s_mc.batch_exists(keys) == n or sys.exit("exists failed"))
    res = h.run(repeats=max(5, args.repeats), warmup=1)
    s.close()
    s_mc.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="/var/tmp/hicache-bench")
    ap.add_argument("--page-kib", type=int, nargs="+", default=[256, 8192])
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-cold", dest="cold", action="store_false")
    ap.add_argument("--no-set", dest="set", action="store_false")
    ap.add_argument("--no-layers", dest="layers", action="store_false")
    ap.add_argument("--out", default="", help="write the run here (hicache-bench-run/1)")
    args = ap.parse_args()
    os.makedirs(args.root, mode=0o700, exist_ok=True)
    results: list[BenchResult] = [bench_exists(args)]
    for kib in args.page_kib:
        results += bench_page(args, kib)
    for r in results:
        r.print_table()
        print()
    if args.out:
        write_run(
            results,
            args.out,
            notes=(
                "128-page batches into a bfloat16 MHA host pool (page_first, 64 tokens per page); "
                "ours is FileStorage with its default settings. Raw references: the same files "
                "read with an open/os.preadv/close loop (warm), buffered and O_DIRECT loops on "
                "1-8 threads after the files were dropped from the page cache (cold), an "
                "open/os.pwritev/close loop (set), an os.stat loop (exists)."
            ),
        )
    shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
