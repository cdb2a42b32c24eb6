"""What resolving every name beneath the root costs (docs/backends/file.md, Security), in
one run: ``exists`` and warm ``read`` of default-scheme names (five components, fanned
out over 256 directories) against SGLang's flat names (one component, no resolution
needed), through ``openat2`` and through the forced ``O_NOFOLLOW`` walk.

    .venv/bin/python backends/file/bench/bench_resolve.py [--pages 2048] [--read 128] [--repeats 30]

Prints the best of ``--repeats`` timings and each one's ratio to the flat-name figure of
the same operation (ratios are robust to a shared CPU; absolute numbers are not).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable

import numpy as np
from hicache_backend_file import FileConfig, FileTransport, beneath


def best_us(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=2048)
    ap.add_argument("--read", type=int, default=128)
    ap.add_argument("--page-bytes", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hc-bench-resolve-")
    try:
        t = FileTransport(FileConfig(root=f"{tmp}/c", io_threads=1), environ={})
        hs = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(a.pages)]
        fan = [f"_/model/kv-0123456789abcdef/{h[:2]}/{h}" for h in hs]
        flat = [f"{h}_model_0_1.bin" for h in hs]
        src = np.ones(a.page_bytes, np.uint8)
        seg = [(int(src.ctypes.data), a.page_bytes)]
        assert all(t.write(fan, [seg] * a.pages)) and all(t.write(flat, [seg] * a.pages))
        outs = [np.zeros(a.page_bytes, np.uint8) for _ in range(a.read)]
        segs = [[(int(o.ctypes.data), a.page_bytes)] for o in outs]
        modes = [("openat2", True)] if beneath.OPENAT2 else []
        modes.append(("walk", False))
        ex_flat = best_us(lambda: t.exists(flat), a.repeats)
        rd_flat = best_us(lambda: t.read(flat[: a.read], segs), a.repeats)
        print(f"exists {a.pages} flat names        {ex_flat:9.0f} us  1.00")
        for label, on in modes:
            t._fs.openat2 = on
            us = best_us(lambda: t.exists(fan), a.repeats)
            print(f"exists {a.pages} fan-out ({label:7s}) {us:9.0f} us  {us / ex_flat:.2f}")
        print(f"read {a.read} x {a.page_bytes} B flat       {rd_flat:9.0f} us  1.00")
        for label, on in modes:
            t._fs.openat2 = on
            us = best_us(lambda: t.read(fan[: a.read], segs), a.repeats)
            print(f"read {a.read} x {a.page_bytes} B fan-out ({label:7s}) {us:9.0f} us  {us / rd_flat:.2f}")
        t.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
