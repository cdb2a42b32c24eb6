"""Two ranks over torch.distributed (gloo, CPU): diverging stores agree on the MIN hit, a
failed read on one rank leaves both at the same completed count, only the writer rank
writes while both acknowledge, and the TRAILING-pool flag vectors intersect -- also inside a
hybrid (Mamba) prefetch whose ranks stored states at different endpoints."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp

HERE = os.path.dirname(__file__)


def _rank_main(rank: int, init_file: str, out_dir: str) -> None:
    sys.path.insert(0, HERE)
    import json

    import torch.distributed as dist
    from hiradix_helpers import Flaky, make_engine, make_storage, settle

    from hicache_sdk.hiradix import GlooGroup, ReadPathConfig, StepRunner, agreed_endpoint

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    group = GlooGroup()
    cfg = ReadPathConfig(
        page_size=4, prefetch_threshold=8, load_back_threshold=1, prefetch_policy="wait_complete"
    )
    toks = list(range(64))
    res: dict[str, Any] = {}
    # diverging stores: rank 0 holds 12 pages of the prefix, rank 1 holds 7
    store = f"rank{rank}"
    warm = make_engine(cfg, store)
    warm.submit("w", toks[: (12 if rank == 0 else 7) * 4])
    settle(warm, "w")
    warm.s.runner.run_all()  # type: ignore[attr-defined]
    warm.writer.drain()
    e = make_engine(cfg, store, runner=StepRunner(), ranks=group)
    e.submit("r", toks)
    r = settle(e, "r")
    res["agreed_hit"] = r.storage_hit
    res["bytes_ok"] = e.verify(r.nodes)
    # a failed read on rank 1 only: both ranks complete the same (zero) tokens, neither hangs
    flaky = Flaky(make_storage(store))
    e2 = make_engine(cfg, runner=StepRunner(), ranks=group, storage=flaky)
    if rank == 1:
        flaky.fail_get = 1
    e2.submit("r", toks)
    r2 = settle(e2, "r")
    res["after_failed_read"] = r2.storage_hit
    # a stalled backend on rank 1 (each call returns late): both ranks still agree, none hangs
    slow = Flaky(make_storage(store))
    if rank == 1:
        import time

        inner_get = slow.batch_get_v1

        def stalled(keys: list[str], idx: Any, extra_info: Any = None) -> list[bool]:
            time.sleep(0.3)
            return inner_get(keys, idx)

        slow.batch_get_v1 = stalled  # type: ignore[method-assign]
    e3 = make_engine(cfg, runner=StepRunner(), ranks=group, storage=slow)
    e3.submit("r", toks)
    res["stalled_rank_hit"] = settle(e3, "r").storage_hit
    # write path: only rank 0 writes, both post one ack per chunk
    writes = make_engine(cfg, f"w{rank}", runner=StepRunner(), ranks=group)
    writes.submit("x", list(range(500, 500 + 40)))
    settle(writes, "x")
    writes.s.runner.run_all()  # type: ignore[attr-defined]
    writes.writer.drain()
    res["pages_written"] = writes.writer.pages_written
    # hybrid (Mamba, TRAILING): rank 0 stores states at pages 8 and 12, rank 1 at 8 and 10
    # (KV for all 12 pages on both): only the intersection {8} is restorable everywhere
    hy = f"hy{rank}"
    ends = [8, 12] if rank == 0 else [8, 10]
    for n in ends:
        hw = make_engine(cfg, hy, sidecars=("mamba",))
        hw.submit("w", toks[: n * 4])
        settle(hw, "w")
        hw.s.runner.run_all()  # type: ignore[attr-defined]
        hw.writer.drain()
    if rank == 1:
        warm_kv = make_engine(cfg, hy)  # KV pages 11..12, no state
        warm_kv.submit("w", toks[:48])
        settle(warm_kv, "w")
        warm_kv.s.runner.run_all()  # type: ignore[attr-defined]
        warm_kv.writer.drain()
    he = make_engine(cfg, hy, runner=StepRunner(), ranks=group, sidecars=("mamba",))
    he.submit("r", toks[:48])
    hr = settle(he, "r")
    res["hybrid_hit"] = hr.storage_hit
    res["hybrid_ok"] = he.verify(hr.nodes) and he.verify_sidecars() and "mamba" in hr.nodes[7].side
    res["hybrid_aborts"] = he.explain("r")["why_not"]
    res["endpoint"] = agreed_endpoint(group, 8, 6 if rank == 0 else 8, [2, 4, 6] if rank == 0 else [3, 4, 8])
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def test_two_ranks_agree() -> None:
    import json

    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "init")
        mp.start_processes(_rank_main, args=(init, d), nprocs=2, join=True, start_method="spawn")
        r0, r1 = (json.loads(Path(d, f"{i}.json").read_text()) for i in range(2))
    assert r0["agreed_hit"] == r1["agreed_hit"] == 7 * 4
    assert r0["bytes_ok"] and r1["bytes_ok"]
    assert r0["after_failed_read"] == r1["after_failed_read"] == 0
    assert r0["stalled_rank_hit"] == r1["stalled_rank_hit"] == 7 * 4
    assert (r0["pages_written"], r1["pages_written"]) == (10, 0)
    assert r0["endpoint"] == r1["endpoint"] == 4
    assert r0["hybrid_hit"] == r1["hybrid_hit"] == 8 * 4
    assert r0["hybrid_ok"] and r1["hybrid_ok"]
    assert r0["hybrid_aborts"] == r1["hybrid_aborts"] == []
