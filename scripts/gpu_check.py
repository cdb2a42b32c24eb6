"""GPU check for the read path (run by scripts/gpu_check.sh).

Without CUDA: says so, exits 0. With CUDA, in one run:
1. contiguous: load-back of N pages from the SDK's pinned host pool into the device pool
   (``DevicePool.load_from_host``) vs torch's own pinned-host -> device ``copy_`` of the
   same bytes; ratio must be >= 0.9;
2. scattered: 128 pages of 256 KiB at scattered host slots, same comparison;
3. the demo with the device pool on the GPU (byte checks inside the demo).
Prints one JSON line with the figures and exits 1 when a ratio is below 0.9.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch


def _time(fn, reps: int = 10) -> float:  # type: ignore[no-untyped-def]
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing measured (exit 0)")
        return 0
    from hicache_sdk.hiradix import DevicePool
    from hicache_sdk.hostpool import MHAHostPool

    # one page = 2 (K,V) x page_size x L x H x D x 2 bytes = 256 KiB with these numbers
    ps, L, H, D = 64, 8, 4, 64
    pages = 128
    geom = {"layer_num": L, "head_num": H, "head_dim": D}
    host = MHAHostPool(pages * 4 * ps, ps, dtype=torch.bfloat16, pin_memory=True, **geom)  # type: ignore[arg-type]
    dev = DevicePool(pages * ps, ps, dtype=torch.bfloat16, device="cuda", **geom)
    page_bytes = 2 * ps * L * H * D * 2
    nbytes = pages * page_bytes
    ref_src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    ref_dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    t_ref = _time(lambda: ref_dst.copy_(ref_src, non_blocking=True))
    dev_idx = torch.arange(pages * ps)
    contig = torch.arange(pages * ps)
    t_contig = _time(lambda: dev.load_from_host(host.kv_buffer, contig, dev_idx))
    perm = torch.randperm(pages * 4)[:pages]
    scattered = (perm[:, None] * ps + torch.arange(ps)[None, :]).reshape(-1)
    t_scat = _time(lambda: dev.load_from_host(host.kv_buffer, scattered, dev_idx))
    out = {
        "device": torch.cuda.get_device_name(0),
        "bytes": nbytes,
        "torch_pinned_contiguous_GBps": round(nbytes / t_ref / 1e9, 2),
        "sdk_contiguous_GBps": round(nbytes / t_contig / 1e9, 2),
        "sdk_scattered_128x256KiB_GBps": round(nbytes / t_scat / 1e9, 2),
        "ratio_contiguous": round(t_ref / t_contig, 3),
        "ratio_scattered": round(t_ref / t_scat, 3),
    }
    hicache = os.path.join(os.path.dirname(sys.executable), "hicache")
    demo = subprocess.run(
        [hicache, "demo", "--device", "cuda", "--json"], capture_output=True, text=True, timeout=300
    )
    out["demo_rc"] = demo.returncode
    print(json.dumps(out))
    return (
        0 if out["ratio_contiguous"] >= 0.9 and out["ratio_scattered"] >= 0.9 and demo.returncode == 0 else 1
    )


if __name__ == "__main__":
    sys.exit(main())
