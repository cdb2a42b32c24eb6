"""The three hits of ``docs/concepts.md``, shown by the reference read path.

A warm engine serves a 64-token prompt and writes it through to a ``memory`` store. Two
cold engines (empty device and host pools, same store) then serve the same prompt:

* ``cold``: the 64 tokens are in L3, are read into host memory, are loaded back into the
  device pool and committed: prefill computes 0 tokens;
* ``cold, H2D copy fails``: the same L3 hit and the same host fill, but the host-to-device
  copy fails (``DevicePool.fail_copies``): nothing is committed to the device and prefill
  computes all 64 tokens. An L3 hit was only a candidate.

Everything runs on the virtual clock and the step scheduler (deterministic, no threads).
Run it::

    .venv/bin/python docs/examples/three_hits.py
"""

from __future__ import annotations

import uuid

import torch

from hicache_sdk import HiCacheStorageConfig
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.hiradix import CacheState, DevicePool, Engine, ReadPathConfig, StepRunner, VirtualClock

GEOM = {"layer_num": 2, "head_num": 1, "head_dim": 4}
CFG = ReadPathConfig(page_size=4, prefetch_threshold=8)
PROMPT = list(range(64))


def engine(store: str) -> Engine:
    backend = MemoryStorage(HiCacheStorageConfig(model_name="m", extra_config={"store": store}), {})
    host = MHAHostPool(512, CFG.page_size, dtype=torch.float32, pin_memory=False, **GEOM)  # type: ignore[arg-type]
    backend.register_mem_pool_host(host)
    dev = DevicePool(256, CFG.page_size, dtype=torch.float32, device="cpu", **GEOM)
    return Engine(CacheState(CFG, host, dev, backend, clock=VirtualClock(), runner=StepRunner()))


def serve(e: Engine, req: str) -> dict[str, object]:
    e.submit(req, PROMPT)
    for _ in range(50):
        served = e.try_admit(req)
        if served is not None:
            break
        e.s.runner.run_all()  # type: ignore[attr-defined]
    else:
        raise RuntimeError(f"{req} not admitted")
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    assert e.verify(served.nodes)  # every device page holds the right KV
    ex = e.explain(req)
    return {
        "in_l3": ex["in_l3"],
        "filled_into_host": ex["filled_into_host"],
        "committed_to_gpu": ex["committed_to_gpu"],
        "why_not": ex["why_not"],
        "prefill computed tokens": served.computed,
    }


def main() -> dict[str, dict[str, object]]:
    store = f"three-hits-{uuid.uuid4().hex}"
    try:
        out = {"warm": serve(engine(store), "warm"), "cold": serve(engine(store), "cold")}
        failing = engine(store)
        failing.s.dev.fail_copies = 1
        out["cold, H2D copy fails"] = serve(failing, "cold-fail")
    finally:
        drop_store(store)
    for name, values in out.items():
        print(f"[{name}]")
        for k, v in values.items():
            print(f"  {k}: {v}")
    return out


if __name__ == "__main__":
    main()
