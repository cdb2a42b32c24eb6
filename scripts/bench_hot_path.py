"""Per-page cost of our own layers (adapter + resilience) over a transport that does nothing.

The transport returns success without touching page memory, so what is measured is the SDK's
own work per page: argument checks, key naming, headers, segment plumbing, the deadline runner
and, when deadlines are on, the staging copy. The transport's own bookkeeping (it keeps each
object's 96-byte trailer, so that reads validate as over a real store) is timed inside it and
subtracted from each call. 128 pages of 256 KiB per call (MHA ``page_first``
bf16 host pool), checksums off, median of ``--reps`` calls, for every key scheme, inline
(deadlines 0) and staged (the default deadline). Printed next to this machine's memcpy of one
page (a contiguous 256 KiB ``torch`` copy, the limit a staged transfer pays once).

Targets (issue 8): inline at most 2 µs per page under every key scheme; staged at most one
memcpy plus 2 µs. Nothing is asserted: the figures go to ``docs/benchmarks.md``.

    .venv/bin/python scripts/bench_hot_path.py [--reps 50] [--pages 128] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from hicache_sdk.capabilities import Capabilities
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.kit.segments import copy_runs
from hicache_sdk.paged.adapter import PagedStorage
from hicache_sdk.paged.header import TRAILER_SIZE
from hicache_sdk.spec import HiCacheStorageConfig
from hicache_sdk.transport import SIZE_UNKNOWN, Segments, Transport

PAGE_SIZE, LAYERS, HEADS, HEAD_DIM = 64, 8, 2, 64  # 256 KiB pages in bf16
SCHEMES = ("default", "sglang-file", "sglang-mooncake")


class NullTransport(Transport):
    """Succeeds at everything and touches no page memory. Under a header scheme it keeps
    each object's trailer (the last segment, 96 bytes) in one array and gives it back on
    read (one native copy per batch), so that reads validate as over a real store."""

    capabilities: ClassVar[Capabilities] = Capabilities(delete=True)

    def __init__(self, config: Any = None) -> None:
        self._slot: dict[str, int] = {}
        self._trailers = np.empty((1 << 16, TRAILER_SIZE), dtype=np.uint8)
        self._base = int(self._trailers.ctypes.data)
        self._headers = getattr(config, "key_scheme", "default") == "default"

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        return [SIZE_UNKNOWN] * len(keys)

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        t0 = CLOCK[0]()
        slot, base = self._slot, self._base
        runs = [
            (b[-1][0] + b[-1][1] - TRAILER_SIZE, base + slot[k] * TRAILER_SIZE, TRAILER_SIZE)
            for k, b in zip(keys, buffers)
            if k in slot
        ]
        if runs:
            copy_runs(runs)
        SPENT[0] += CLOCK[0]() - t0
        return [True] * len(keys)

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        t0 = CLOCK[0]()
        slot, base = self._slot, self._base
        runs = []
        for k, b in zip(keys, buffers):
            addr, n = b[-1]  # the trailer ends the last segment (staged: one segment)
            if self._headers and n >= TRAILER_SIZE:
                i = slot.setdefault(k, len(slot) % (1 << 16))
                runs.append((base + i * TRAILER_SIZE, addr + n - TRAILER_SIZE, TRAILER_SIZE))
        if runs:
            copy_runs(runs)
        SPENT[0] += CLOCK[0]() - t0
        return [True] * len(keys)

    def delete(self, keys: Sequence[str]) -> None:
        pass


class NullStorage(PagedStorage):
    transport_cls = NullTransport
    backend_name: ClassVar[str] = "null"

    def create_transport(self, config: Any) -> Transport:
        return NullTransport(config)


#: The clock: wall time by default; ``--cpu`` uses the process's CPU time (every thread),
#: which a busy shared machine disturbs far less than wall time.
CLOCK: list[Callable[[], float]] = [time.perf_counter]
#: Time spent inside ``NullTransport.read`` / ``write`` (its trailer bookkeeping is the
#: benchmark's stand-in for a store, not our layers): subtracted from each call's time.
SPENT = [0.0]


def median_us(fn: Callable[[int], object], reps: int) -> float:
    fn(0)  # warm up: staging buffers, caches
    clock = CLOCK[0]
    times = []
    for i in range(reps):
        spent = SPENT[0]
        t0 = clock()
        fn(i)
        times.append(clock() - t0 - (SPENT[0] - spent))
    return statistics.median(times) * 1e6


def memcpy_us(page_bytes: int, pages: int, reps: int) -> float:
    """One page's share of a single-threaded copy of a whole call's pages (``pages`` x
    ``page_bytes``, one contiguous ``torch`` copy between two distinct buffers, as large as
    a staged call moves): the machine's memcpy speed at this working set."""
    src = torch.empty(page_bytes * pages, dtype=torch.uint8).random_()
    dst = torch.empty(page_bytes * pages, dtype=torch.uint8)
    return median_us(lambda _: dst.copy_(src), reps) / pages


def measure(scheme: str, staged: bool, pages: int, reps: int) -> dict[str, float]:
    pool = MHAHostPool(pages * PAGE_SIZE, PAGE_SIZE, LAYERS, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    extra: dict[str, Any] = {"key_scheme": scheme, "checksum": False}
    if not staged:
        extra.update(exists_timeout_s=0, transfer_timeout_s=0)
    sc = HiCacheStorageConfig(model_name="bench", extra_config=extra)
    st = NullStorage(sc, {})
    st.register_mem_pool_host(pool)
    slots = torch.arange(pages * PAGE_SIZE, dtype=torch.int64)
    keys = [[hashlib.sha256(f"{r}-{i}".encode()).hexdigest() for i in range(pages)] for r in range(reps + 1)]
    try:
        return {
            "set_v1": median_us(lambda i: st.batch_set_v1(keys[i], slots), reps) / pages,
            "get_v1": median_us(lambda i: st.batch_get_v1(keys[i], slots), reps) / pages,
            "exists": median_us(lambda i: st.batch_exists(keys[i]), reps) / pages,
        }
    finally:
        st.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--cpu", action="store_true", help="time with process CPU time instead of wall time")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated key schemes")
    args = ap.parse_args()
    if args.cpu:
        CLOCK[0] = time.process_time
    torch.set_num_threads(1)
    page_bytes = 2 * PAGE_SIZE * LAYERS * HEADS * HEAD_DIM * 2
    copy = memcpy_us(page_bytes, args.pages, args.reps)
    rows = []
    for staged in (False, True):
        for scheme in args.schemes.split(","):
            r = measure(scheme, staged, args.pages, args.reps)
            rows.append({"mode": "staged" if staged else "inline", "scheme": scheme, **r})
    if args.json:
        print(json.dumps({"page_bytes": page_bytes, "memcpy_us": copy, "rows": rows}, indent=1))
        return
    print(
        f"{args.pages} pages x {page_bytes >> 10} KiB per call, median of {args.reps} "
        f"({'process CPU' if args.cpu else 'wall'} time); "
        f"memcpy per page: {copy:.1f} us ({page_bytes / copy / 1e3:.1f} GB/s, one {args.pages}-page copy)"
    )
    print("targets: inline <= 2 us/page; staged <= memcpy + 2 us/page (get/set)")
    print(f"{'mode':7s} {'scheme':16s} {'get_v1':>9s} {'set_v1':>9s} {'exists':>9s}   (us per page)")
    for r in rows:
        over = ""
        if r["mode"] == "staged":
            over = f"   over memcpy: get {r['get_v1'] - copy:+.1f}, set {r['set_v1'] - copy:+.1f}"
        print(
            f"{r['mode']:7s} {r['scheme']:16s} {r['get_v1']:9.2f} {r['set_v1']:9.2f} {r['exists']:9.2f}{over}"
        )


if __name__ == "__main__":
    main()
