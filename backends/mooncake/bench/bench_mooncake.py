"""Benchmark: ours (batch_get_v1 / batch_set_v1 / batch_exists) vs raw Mooncake
(batch_get_into / batch_put_from / batch_is_exist) on the same host-pool buffers and the
same object keys (``sglang-mooncake``: K and V per page), measured in one run.

Starts its own master and holder process on free loopback ports (``--in-process``: no
holder, the client holds the segment). Variants run interleaved (``hicache_sdk.bench``
Harness: a balanced order per repetition, medians), so load on the shared machine hits them
alike. Prints median ms and ratios raw/ours (1.0 = as fast as raw), staged (deadlines on,
the default) and direct (``transfer_timeout_s: 0``), the time of one memcpy of the
batch, and ``staging_copy``: the staging copy alone, as a staged call makes it (the same
slots in the backend's own registered staging memory, the same runs to or from the page
slots, through the same copier), so that the line ``staged - direct`` sets the gap between
the two beside what that copy costs by itself in the same rounds. For ``exists`` it also times the
layers between raw and ours on the same object names: our transport alone, and the
resilience layer over it (deadline runner thread hop), so the rest is the paged adapter;
``ours_inline`` is the whole ``batch_exists`` with ``exists_timeout_s: 0`` (no hop), and
``names+raw`` the raw call on names built from the page hashes (what any caller must add).

    .venv/bin/python backends/mooncake/bench/bench_mooncake.py [--in-process] [--cases 256k] [--json FILE]
    .venv/bin/python backends/mooncake/bench/bench_mooncake.py --record docs/results/mooncake.json

``--record`` writes the run (``hicache_sdk.bench.harness.write_run``) that
``scripts/gen_bench_docs.py`` renders in ``docs/backends/mooncake.md``: per page size, get
and set as ours first (``staged``: the default, deadlines on; ``direct``:
``transfer_timeout_s: 0``) against the raw client measured in the same interleaved rounds,
and ``exists``.

``--sglang`` adds SGLang 0.5.23's own ``MooncakeStore`` (no deadline of its own) on the same
pool and names, and ``sglang_raw``: the raw call through that store's own Mooncake client
(``sglang/own-raw`` = what SGLang's store adds to its client; two clients of one process can
differ by several per cent on the same call). It needs the real SGLang, i.e. the ``tox -e
sglang`` environment::

    .tox/sglang/bin/python backends/mooncake/bench/bench_mooncake.py --sglang
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
os.environ.setdefault("MC_LOG_LEVEL", "ERROR")

from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeStorage

from hicache_sdk import HiCacheStorageConfig
from hicache_sdk.bench import BenchResult, Harness, write_result
from hicache_sdk.bench.harness import write_run
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.kit.segments import copy_runs
from hicache_sdk.resilience import Staging

TOKENS = 64


def report(res: BenchResult, op: str, total: int, json_path: str | None) -> None:
    med = res.medians()
    line = f"  {op:7s} raw {med['raw'] * 1e3:8.3f} ms"
    for k in res.labels[1:]:
        if k in ("memcpy", "staging_copy"):  # copies measured alone, not variants
            line += f" | {k} {med[k] * 1e3:7.3f} ms"
            continue
        line += f" | {k} {med[k] * 1e3:8.3f} ms ratio {med['raw'] / med[k]:.2f}"
    if "sglang_raw" in med:  # SGLang's store against the raw call on its own Mooncake client
        line += f" | sglang/own-raw {med['sglang_raw'] / med['sglang']:.2f}"
    if total:
        line += f" | raw {total / med['raw'] / 1e9:.2f} GB/s"
    print(line)
    if "staging_copy" in med:
        gap = med["staged"] - med["direct"]
        print(
            f"  {op:7s} staged - direct {gap * 1e3:8.3f} ms | the staging copy alone "
            f"{med['staging_copy'] * 1e3:7.3f} ms ({med['staging_copy'] / gap:.2f} of the gap)"
            if gap > 0
            else f"  {op:7s} staged - direct {gap * 1e3:8.3f} ms (no gap to explain)"
        )
    if json_path:
        write_result(res, json_path)


def staging_copy(resilient: Any, ptrs: list[int], sizes: list[int], to_staging: bool) -> Callable[[], None]:
    """The copy a staged call makes, alone: the batch cut in the same chunks and slots of the
    backend's own staging memory, copied to (a set's snapshot) or from (a get's result) the
    page slots by the same copier. No transfer."""
    policy = resilient.policies.staging
    buffers = [[(p, n)] for p, n in zip(ptrs, sizes)]

    def f() -> None:
        for a, b in policy.chunks(sizes):
            offs, need = Staging.slots(sizes[a:b])
            buf = resilient.staging.acquire(need)
            assert buf is not None, "staging exhausted"
            try:
                copy_runs(Staging.runs(to_staging, [buf.address + o for o in offs], buffers[a:b]))
            finally:
                resilient.staging.release(buf)

    return f


def sglang_store(extra: dict[str, object], pool: MHAHostPool) -> Any:
    """SGLang 0.5.23's MooncakeStore on ``pool`` (GPU-only imports stood in)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "sglang"))
    import sglang_standins

    sglang_standins.install()
    from sglang.srt.mem_cache import hicache_storage as sgl
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore

    cfg = sgl.HiCacheStorageConfig(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=False,
        is_page_first_layout=True,
        model_name="bench",
        extra_config=extra,
    )
    store = MooncakeStore(cfg, pool)
    store.register_mem_pool_host(pool)
    return store


def ours_first(res: BenchResult, name: str, labels: list[str]) -> BenchResult:
    """The variants ``labels`` of ``res`` (same interleaved rounds), ours first, as the
    docs' table reads them ("ours vs this" = this variant's time over ours)."""
    return dataclasses.replace(
        res,
        name=name,
        samples={k: res.samples[k] for k in labels},
        nbytes={k: res.nbytes[k] for k in labels},
    )


def recorded(get_res: BenchResult, set_res: BenchResult, ex_res: BenchResult) -> list[BenchResult]:
    out = []
    for op, res in (("get", get_res), ("set", set_res)):
        out.append(ours_first(res, f"mooncake-{op}-staged", ["staged", "raw", "memcpy", "staging_copy"]))
        out.append(ours_first(res, f"mooncake-{op}-direct", ["direct", "raw"]))
    out.append(ours_first(ex_res, "mooncake-exists", ["ours", "raw", "ours_inline"]))
    return out


def run(args: argparse.Namespace, cluster: MooncakeCluster, page_kib: int, n: int) -> list[BenchResult]:
    layers = page_kib * 1024 // (2 * 8 * 128 * 2 * TOKENS)
    pool = MHAHostPool(n * TOKENS, TOKENS, layers, 8, 128, dtype=torch.bfloat16, layout="page_first")
    pool.kv_buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
    )
    idx = torch.arange(n * TOKENS, dtype=torch.int64)
    keys = [f"{page_kib:06x}{i:058x}" for i in range(n)]
    seg = 0 if not args.in_process else segment_bytes(args)
    extra = cluster.config(
        key_scheme="sglang-mooncake",
        global_segment_size=seg,
        staging_bytes=4 * n * page_kib * 1024 + (1 << 20),
    )
    st = MooncakeStorage(HiCacheStorageConfig(model_name="bench", extra_config=extra), {})
    st.register_mem_pool_host(pool)
    raw = st.raw_transport._store  # type: ignore[attr-defined]
    resilient = st.transport
    theirs = sglang_store(extra, pool) if args.sglang else None

    base = resilient.policies  # type: ignore[attr-defined]

    def with_deadline(**kw: float) -> Any:
        return dataclasses.replace(base, deadline=dataclasses.replace(base.deadline, **kw))

    staged_p, direct_p = with_deadline(transfer_s=5.0), with_deadline(transfer_s=0.0)

    def mode(m: str, fn: Callable[[], object]) -> Callable[[], object]:
        # the same backend object, staged (deadline 5 s) or direct (transfer_timeout_s 0)
        def f() -> object:
            resilient.policies = staged_p if m == "staged" else direct_p  # type: ignore[attr-defined]
            return fn()

        return f

    ptrs, sizes = pool.get_page_buffer_meta(idx)  # type: ignore[misc]
    okeys = [f"bench_{k}_0_{kv}" for k in keys for kv in ("k", "v")]
    total = sum(sizes)
    params = {"pages": n, "page_kib": page_kib, "in_process": args.in_process}

    scratch = torch.empty(total, dtype=torch.uint8)
    src_addr, dst_addr = pool.kv_buffer.data_ptr(), scratch.data_ptr()

    def memcpy() -> None:  # one single-threaded copy of the batch: what staging adds
        ctypes.memmove(dst_addr, src_addr, total)

    def wipe() -> None:
        raw.batch_remove(okeys, True)

    r = args.repeats
    h = Harness("mooncake-set", params)
    h.add("raw", lambda: raw.batch_put_from(okeys, ptrs, sizes), nbytes=total)
    h.add("staged", mode("staged", lambda: st.batch_set_v1(keys, idx)), nbytes=total)
    h.add("direct", mode("direct", lambda: st.batch_set_v1(keys, idx)), nbytes=total)
    if theirs is not None:
        h.add("sglang", lambda: theirs.batch_set_v1(keys, idx), nbytes=total)
        h.add("sglang_raw", lambda: theirs.store.batch_put_from(okeys, ptrs, sizes), nbytes=total)
    h.add("memcpy", memcpy, nbytes=total)
    h.add("staging_copy", staging_copy(resilient, ptrs, sizes, True), nbytes=total)
    set_res = h.run(repeats=r, warmup=1, setup=wipe)
    assert raw.batch_put_from(okeys, ptrs, sizes) == [0] * len(okeys)
    assert st.batch_exists(keys) == n, "object names differ from SGLang's"

    h = Harness("mooncake-get", params)
    h.add("raw", lambda: raw.batch_get_into(okeys, ptrs, sizes), nbytes=total)
    h.add("staged", mode("staged", lambda: st.batch_get_v1(keys, idx)), nbytes=total)
    h.add("direct", mode("direct", lambda: st.batch_get_v1(keys, idx)), nbytes=total)
    if theirs is not None:
        h.add("sglang", lambda: theirs.batch_get_v1(keys, idx), nbytes=total)
        h.add("sglang_raw", lambda: theirs.store.batch_get_into(okeys, ptrs, sizes), nbytes=total)
    h.add("memcpy", memcpy, nbytes=total)
    h.add("staging_copy", staging_copy(resilient, ptrs, sizes, False), nbytes=total)
    get_res = h.run(repeats=r, warmup=1)

    resilient.policies = base  # type: ignore[attr-defined]
    inline_p = with_deadline(exists_s=0.0)

    def ours_exists_inline() -> object:  # the same backend object with exists_timeout_s 0
        resilient.policies = inline_p  # type: ignore[attr-defined]
        try:
            return st.batch_exists(keys)
        finally:
            resilient.policies = base  # type: ignore[attr-defined]

    names = [spec.name for k in keys for spec in st.scheme.page_objects(k, st._kv.layout)]  # type: ignore[attr-defined]
    assert sorted(names) == sorted(okeys), "object names differ from SGLang's"

    h = Harness("mooncake-exists", params)
    h.add("raw", lambda: raw.batch_is_exist(okeys))
    # the names from the page hashes, then the raw call: no layers at all
    layout = st._kv.layout  # type: ignore[attr-defined]

    def names_then_raw() -> object:
        cols = st.scheme.page_columns(keys, layout) or []
        return raw.batch_is_exist([n for names, _ in cols for n in names])

    h.add("names+raw", names_then_raw)
    h.add("transport", lambda: st.raw_transport.exists(okeys))
    h.add("resilient", lambda: resilient.exists(okeys))
    h.add("ours", lambda: st.batch_exists(keys))
    h.add("ours_inline", ours_exists_inline)
    if theirs is not None:
        h.add("sglang", lambda: theirs.batch_exists(keys))
        h.add("sglang_raw", lambda: theirs.store.batch_is_exist(okeys))
    ex_res = h.run(repeats=r * args.exists_factor, warmup=5)

    where = "in-process segment" if args.in_process else "holder in another process"
    print(f"\n{n} pages x {page_kib} KiB ({where}), {total / 2**20:.0f} MiB per batch, median of {r}")
    report(get_res, "get", total, args.json)
    report(set_res, "set", total, args.json)
    report(ex_res, "exists", 0, args.json)
    assert st.batch_get_v1(keys, idx) == [True] * n
    wipe()
    st.close()
    return recorded(get_res, set_res, ex_res)


def segment_bytes(args: argparse.Namespace) -> int:
    """A segment that holds the largest batch of the run once, plus a quarter."""
    largest = max(args.pages_256k * (256 << 10), args.pages_8m * (8 << 20))
    return max(384 << 20, largest * 5 // 4 + (64 << 20))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--exists-factor", type=int, default=10, help="exists repetitions = repeats * this")
    ap.add_argument("--pages-256k", type=int, default=128)
    ap.add_argument("--pages-8m", type=int, default=128)
    ap.add_argument("--cases", default="256k,8m", help="which page sizes to run: 256k, 8m or both (comma)")
    ap.add_argument("--sglang", action="store_true", help="add SGLang's MooncakeStore (tox -e sglang env)")
    ap.add_argument("--json", default=None, help="append hicache-bench/1 documents to this file")
    ap.add_argument("--record", default=None, help="write the run for the docs here (write_run)")
    args = ap.parse_args()
    results: list[BenchResult] = []
    c = MooncakeCluster(holder_bytes=segment_bytes(args))
    try:
        c.start_master()
        if not args.in_process:
            c.start_holder()
        cases = {x.strip() for x in args.cases.split(",")}
        if not cases <= {"256k", "8m"}:
            ap.error(f"--cases: expected 256k and/or 8m, got {args.cases!r}")
        if "256k" in cases:
            results += run(args, c, 256, args.pages_256k)
        if "8m" in cases:
            results += run(args, c, 8192, args.pages_8m)
    finally:
        c.stop()
    if args.record:
        where = "a client with its own segment" if args.in_process else "a separate holder process"
        write_run(
            results,
            args.record,
            notes=(
                f"Pages live in {where}; every transfer crosses loopback TCP. Mooncake busy-polls a "
                "core per transfer (the caller's thread, its receiving thread and the holder's), on a "
                f"machine with {os.cpu_count()} CPUs. staged: deadlines on (the default, reads land in "
                "registered staging memory and are copied once); direct: transfer_timeout_s 0 (no copy)."
            ),
        )


if __name__ == "__main__":
    main()
