#!/usr/bin/env python
"""GPU check of the linker's host staging ring (``hicache_sdk.sglang.linker.staging``):
needs only torch and hicache_sdk (no SGLang), runs in well under 5 minutes.

On a CUDA device pool shaped like SGLang's ``MHATokenToKVPool`` (per-layer K and V
buffers; 32 layers, 8 heads of 128, bfloat16, 16 tokens a page), with the in-process
``memory`` backend as the store:

* offload pages through the ring (device to pinned host, then write), zero the device
  rows, load them back through the ring: every layer's bytes are on the device at the
  moment the layer is marked complete (its copy event has fired), and all of them at the
  end (``layers_ok``, ``bytes_ok``);
* load time against a pinned host-to-device copy of the same bytes (``load_vs_copy``;
  target >= 0.9), medians of ``--runs``.

Prints one JSON object; exit 0 when the bytes are right. ``--device cpu`` runs the same
code on the CPU (a smoke test where no GPU is present).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hicache_sdk.memory import MemoryStorage
from hicache_sdk.sglang.linker.staging import StagingRing
from hicache_sdk.sglang.linker.view import DeviceKVView
from hicache_sdk.spec import HiCacheStorageConfig

LAYERS, HEADS, DIM, PAGE = 32, 8, 128, 16


def _pool(device: str, pages: int) -> Any:
    rows = (pages + 1) * PAGE

    def buf() -> torch.Tensor:
        return torch.randint(-100, 100, (rows, HEADS, DIM), device=device).to(torch.bfloat16)

    return SimpleNamespace(
        k_buffer=[buf() for _ in range(LAYERS)],
        v_buffer=[buf() for _ in range(LAYERS)],
        dtype=torch.bfloat16,
        layer_num=LAYERS,
        head_num=HEADS,
        head_dim=DIM,
        v_head_dim=DIM,
    )


class _Counter:
    """Records, when a layer is marked complete, whether its bytes are on the device."""

    def __init__(self, pool: Any, want: list[tuple[torch.Tensor, torch.Tensor]], rows: torch.Tensor) -> None:
        self.pool, self.want, self.rows = pool, want, rows
        self.order: list[int] = []
        self.bad: list[int] = []

    def complete(self, index: int, layer: int) -> None:
        k, v = self.want[layer]
        dev_rows = self.rows.to(self.pool.k_buffer[layer].device)
        if not (
            torch.equal(self.pool.k_buffer[layer].index_select(0, dev_rows), k)
            and torch.equal(self.pool.v_buffer[layer].index_select(0, dev_rows), v)
        ):
            self.bad.append(layer)
        self.order.append(layer)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--pages", type=int, default=64)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 2
    n = args.pages
    pool = _pool(args.device, n)
    view = DeviceKVView(pool, PAGE)
    ring = StagingRing(pool, view, pages=n)
    store = MemoryStorage(HiCacheStorageConfig(model_name="gpu-check"), {"store": "gpu-check"})
    store.register_mem_pool_host(ring.mirror)
    rows = torch.arange(PAGE, (n + 1) * PAGE, dtype=torch.int64)
    keys = [hashlib.sha256(f"gpu-check-{i}".encode()).hexdigest() for i in range(n)]
    dev_rows = rows.to(args.device)
    want = [
        (k.index_select(0, dev_rows).clone(), v.index_select(0, dev_rows).clone()) for k, v in view.layers
    ]
    assert ring.offload(store, keys, rows, None), "offload through the ring failed"
    nbytes = n * sum(view.page_segment_sizes())
    load_s, copy_s, layers_ok = [], [], True
    pin = args.device == "cuda"
    pinned = [w.to("cpu").pin_memory() if pin else w.to("cpu") for kv in want for w in kv]
    scratch = [torch.empty_like(w) for kv in want for w in kv]
    for _ in range(args.runs):
        for k, v in view.layers:
            k.index_fill_(0, dev_rows, 0)
            v.index_fill_(0, dev_rows, 0)
        counter = _Counter(pool, want, rows)
        if args.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        ring.load(store, counter, 0, keys, rows)
        load_s.append(time.perf_counter() - t0)
        layers_ok &= not counter.bad and counter.order == list(range(LAYERS))
        # the baseline: a pinned host-to-device copy of the same bytes (K and V of every layer)
        t0 = time.perf_counter()
        for dst, src in zip(scratch, pinned):
            dst.copy_(src, non_blocking=True)
        if args.device == "cuda":
            torch.cuda.synchronize()
        copy_s.append(time.perf_counter() - t0)
    bytes_ok = all(
        torch.equal(k.index_select(0, dev_rows), wk) and torch.equal(v.index_select(0, dev_rows), wv)
        for (k, v), (wk, wv) in zip(view.layers, want)
    )
    out = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "pages": n,
        "page_bytes": sum(view.page_segment_sizes()),
        "layers_ok": bool(layers_ok),
        "bytes_ok": bool(bytes_ok),
        "load_gbs": nbytes / statistics.median(load_s) / 1e9,
        "copy_gbs": nbytes / statistics.median(copy_s) / 1e9,
        "load_vs_copy": statistics.median(copy_s) / statistics.median(load_s),
        "load_s": load_s,
        "copy_s": copy_s,
    }
    print(json.dumps(out, indent=2))
    store.close()
    return 0 if layers_ok and bytes_ok else 1


if __name__ == "__main__":
    sys.exit(main())
