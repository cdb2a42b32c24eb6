"""sgl-project/sglang#7158 (https://github.com/sgl-project/sglang/issues/7158): a hang with DP
attention, where the all-reduce ran on the TP group. Four gloo ranks form two DP replicas of
two attention-TP ranks each; each replica serves its own requests.

* Ours: the MIN-reduce runs on each replica's attention-TP group
  (:meth:`GlooGroup.attention_tp`): replica 0 agrees on its full L3 hit while replica 1,
  whose rank 3 has a backend that never returns, agrees on a miss (``io_timeout_s`` abandons
  the call; the rank contributes 0). Every rank serves every request; none hangs.
* Broken, the bug put back: the reduction on the whole TP group (the replicas' collectives
  mix, or wait for ones the other replica never issues), or no ``io_timeout_s`` (rank 3
  never reaches the collective its peer waits in). Collectives time out after 3 s here
  instead of hanging; the same assertions then fail.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp

HERE = os.path.dirname(__file__)
COLLECTIVE_TIMEOUT_S = 3.0
NEVER_S = 6.0  # "never returns": longer than a collective may wait


def _rank_main(rank: int, init_file: str, out_dir: str, mode: str) -> None:
    sys.path.insert(0, HERE)
    import threading
    from datetime import timedelta

    import torch.distributed as dist
    from hiradix_helpers import Flaky, make_engine, make_storage, settle, warm

    from hicache_sdk.hiradix import GlooGroup, ReadPathConfig, StepRunner

    timeout = timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=4, timeout=timeout
    )
    out: dict[str, Any] = {"rank": rank, "served": [], "error": None}
    release = threading.Event()
    try:
        group = GlooGroup(None) if mode == "world_group" else GlooGroup.attention_tp(2, timeout=timeout)
        replica = rank // 2
        base = ReadPathConfig(
            page_size=4, prefetch_threshold=8, load_back_threshold=1, prefetch_policy="wait_complete"
        )
        io = None if mode == "no_io_timeout" else 0.5
        cfg = ReadPathConfig(
            page_size=4,
            prefetch_threshold=8,
            load_back_threshold=1,
            prefetch_policy="wait_complete",
            io_timeout_s=io,
        )
        prompts = [list(range(1000 * (10 * replica + i), 1000 * (10 * replica + i) + 64)) for i in range(2)]
        store = f"dp-rank{rank}"
        for p in prompts:  # every rank holds its replica's prompts in its own store
            warm(base, store, p)
        storage: Any = make_storage(store)
        if rank == 3:
            storage = Flaky(storage)

            def never(keys: list[str], extra_info: Any = None) -> int:
                release.wait(NEVER_S)
                return 0

            storage.batch_exists = never
        e = make_engine(cfg, runner=StepRunner(), ranks=group, storage=storage)
        for i, p in enumerate(prompts):
            e.submit(f"req{i}", p)
            r = settle(e, f"req{i}")
            e.s.runner.run_all()  # type: ignore[attr-defined]  # the write-through backups
            e.writer.drain()
            out["served"].append({"storage_hit": r.storage_hit, "bytes_ok": e.verify(r.nodes)})
        release.set()
        e.s.close()
    except Exception as ex:  # a collective that timed out: the hang, bounded
        out["error"] = f"{type(ex).__name__}: {ex}"[:300]
    finally:
        release.set()
        Path(out_dir, f"{rank}.json").write_text(json.dumps(out))
    os._exit(0)  # never wait in the teardown of a broken process group


def _run(mode: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "init")
        mp.start_processes(_rank_main, args=(init, d, mode), nprocs=4, join=True, start_method="spawn")
        return [json.loads(Path(d, f"{i}.json").read_text()) for i in range(4)]


def _check(results: list[dict[str, Any]]) -> None:
    for r in results:
        assert r["error"] is None, f"rank {r['rank']}: {r['error']}"
        assert len(r["served"]) == 2 and all(s["bytes_ok"] for s in r["served"])
    # replica 0 agrees on its full hit: nothing from replica 1 leaked into its MIN
    assert [s["storage_hit"] for r in results[:2] for s in r["served"]] == [64] * 4
    # replica 1 agrees on a miss: rank 3's backend never answered, its call was abandoned
    assert [s["storage_hit"] for r in results[2:] for s in r["served"]] == [0] * 4


def test_7158_dp_replicas_reduce_on_their_own_group() -> None:
    _check(_run("ours"))


@pytest.mark.parametrize("mode", ["world_group", "no_io_timeout"])
def test_7158_broken(mode: str) -> None:
    results = _run(mode)
    with pytest.raises(AssertionError):
        _check(results)
    if mode == "no_io_timeout":  # replica 0 is unaffected: only rank 3's peer waits
        assert results[0]["error"] is None and results[1]["error"] is None
        assert results[2]["error"] is not None
