"""Over Mooncake, chunks in LMCache's registered L1 arena move in place (no staging copy),
while memory outside it keeps the staging guarantee; a task with an in-place transfer is
reported only once that transfer has ended (so LMCache never reuses memory it may touch).

Real ``mooncake_master`` and holder (``mooncake_cluster``); adapters built through LMCache's
own factory with an ``L1MemoryDesc``, as ``lmcache server`` builds them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import torch
from hicache_conformance.engines.lmcache_l2 import Driver, adapter_spec, build, make_key, make_obj, obj_bytes
from lmcache.v1.distributed.internal_api import L1MemoryDesc
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj

CHUNK = 32 << 20
COUNTERS = ("staging_copies_out", "staging_copies_in", "held_writes", "held_reads")


class Arena:
    """A stand-in for LMCache's L1 arena: one buffer, its ``L1MemoryDesc``, and memory
    objects that are views into it."""

    def __init__(self, nbytes: int) -> None:
        self.buf = torch.zeros(nbytes, dtype=torch.uint8)
        self.desc = L1MemoryDesc(ptr=self.buf.data_ptr(), size=nbytes, align_bytes=4096)

    def obj(self, offset: int, nbytes: int, seed: int | None = None) -> Any:
        raw = self.buf[offset : offset + nbytes]
        if seed is not None:
            g = torch.Generator().manual_seed(seed)
            raw.copy_(torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8))
        view = raw.view(torch.float16)
        meta = MemoryObjMetadata(
            shape=torch.Size([nbytes // 2]),
            dtype=torch.float16,
            address=view.data_ptr(),
            phy_size=nbytes,
            fmt=MemoryFormat.KV_2LTD,
            ref_count=1,
        )
        return TensorMemoryObj(view, meta, parent_allocator=None)


def _counters(adapter: Any) -> tuple[int, ...]:
    c = adapter.metrics.snapshot().get("counters", {})
    return tuple(int(c.get(k, 0)) for k in COUNTERS)


def _mooncake(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any], arena: Arena, **params: Any
) -> Any:
    cfg = backend_config("mooncake")
    assert cfg.get("transfer_timeout_s", 5.0) > 0  # deadlines on: staging unless in place
    a = build(adapter_spec("mooncake", cfg, **params), l1_memory_desc=arena.desc)
    adapters.append(a)
    return a


def test_32_mib_store_and_load_in_the_l1_arena_make_no_staging_copy(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any]
) -> None:
    arena = Arena(2 * CHUNK)
    a = _mooncake(backend_config, adapters, arena)
    assert a.in_place_region == (arena.desc.ptr, arena.desc.size)
    d = Driver(a, 60.0)
    src, dst = arena.obj(0, CHUNK, seed=7), arena.obj(CHUNK, CHUNK)
    assert d.store([make_key("big")], [src]).is_successful()
    assert d.load([make_key("big")], [dst]) == [True]
    assert obj_bytes(dst) == obj_bytes(src)
    assert _counters(a) == (0, 0, 1, 1)


def test_memory_outside_the_arena_is_staged_as_before(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any]
) -> None:
    arena = Arena(1 << 20)
    a = _mooncake(backend_config, adapters, arena)
    d = Driver(a, 60.0)
    src, dst = make_obj(CHUNK // 2, seed=3), make_obj(CHUNK // 2, fill=0)  # not in the arena
    assert d.store([make_key("outside")], [src]).is_successful()
    assert d.load([make_key("outside")], [dst]) == [True]
    assert obj_bytes(dst) == obj_bytes(src)
    assert _counters(a) == (1, 1, 0, 0)
    # in_place: false keeps staging for arena memory too
    b = _mooncake(backend_config, adapters, arena, in_place=False)
    assert b.in_place_region is None
    one, back = arena.obj(0, 1 << 19, seed=4), arena.obj(1 << 19, 1 << 19)
    assert Driver(b, 60.0).store([make_key("flag")], [one]).is_successful()
    assert Driver(b, 60.0).load([make_key("flag")], [back]) == [True]
    assert obj_bytes(back) == obj_bytes(one)
    assert _counters(b) == (1, 1, 0, 0)


def test_an_abandoned_in_place_load_is_reported_only_after_its_transfer_ends(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any], mooncake_cluster: Any
) -> None:
    arena = Arena(2 << 20)
    cfg = {**backend_config("mooncake"), "transfer_timeout_s": 0.3}
    a = build(adapter_spec("mooncake", cfg), l1_memory_desc=arena.desc)
    adapters.append(a)
    d = Driver(a, 30.0)
    src, dst = arena.obj(0, 1 << 20, seed=5), arena.obj(1 << 20, 1 << 20)
    assert d.store([make_key("slow")], [src]).is_successful()
    holder = mooncake_cluster.holder
    os.kill(holder.pid, signal.SIGSTOP)  # the transfer from the holder stalls
    try:
        tid = a.submit_load_task([make_key("slow")], [dst])
        time.sleep(1.5)  # well past the 0.3 s deadline
        m = a.metrics
        early = a.query_load_result(tid)
        abandoned, late = m.counter("abandoned_reads"), m.counter("late_completions")
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    if abandoned:  # the read outlived its deadline: no result before its transfer ended
        assert early is None or late >= 1
        until = time.monotonic() + 30
        got = early
        while got is None and time.monotonic() < until:
            got = a.query_load_result(tid)
            time.sleep(0.02)
        assert got is not None and not got.test(0)  # a late transfer is a miss ...
        assert m.counter("late_completions") >= 1  # ... reported once it ended
    else:  # Mooncake failed the read in time itself: a plain miss
        assert early is not None and not early.test(0)
    assert _counters(a)[:2] == (0, 0)


def test_only_a_transport_that_registers_memory_moves_l1_in_place(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any]
) -> None:
    arena = Arena(1 << 20)
    for name in ("file", "redis"):  # no registration (file: no deadline; redis: cancellable)
        a = build(adapter_spec(name, backend_config(name)), l1_memory_desc=arena.desc)
        adapters.append(a)
        assert a.in_place_region is None


def test_tasks_under_a_frozen_master(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any], mooncake_cluster: Any
) -> None:
    # The master frozen (SIGSTOP): lookups and loads end within their deadlines (a load's
    # size query comes first, and fails in time); a staged store ends at its deadline; an
    # in-place store cannot be reported before its native call returns (LMCache would reuse
    # memory Mooncake may still read), so it ends once the master answers again.
    arena = Arena(4 << 20)
    cfg = {**backend_config("mooncake"), "exists_timeout_s": 0.3, "transfer_timeout_s": 0.5}
    a = build(adapter_spec("mooncake", cfg, task_timeout_s=2.0), l1_memory_desc=arena.desc)
    adapters.append(a)
    d = Driver(a, 30.0)
    assert d.store([make_key("fz0")], [arena.obj(0, 1 << 20, seed=6)]).is_successful()
    master = mooncake_cluster.master
    os.kill(master.pid, signal.SIGSTOP)
    thaw = time.monotonic() + 4.0
    t0 = time.monotonic()
    ended: dict[str, float] = {}
    try:
        tasks = {
            "lookup": (a.submit_lookup_and_lock_task([make_key("fz0")], {}), a.query_lookup_and_lock_result),
            "load staged": (a.submit_load_task([make_key("fz0")], [make_obj(1 << 19, fill=0)]), a.query_load_result),
            "load in place": (a.submit_load_task([make_key("fz0")], [arena.obj(1 << 20, 1 << 20)]), a.query_load_result),
            "store staged": (a.submit_store_task([make_key("fz1")], [make_obj(1 << 19, seed=1)]), None),
            "store in place": (a.submit_store_task([make_key("fz2")], [arena.obj(2 << 20, 1 << 20, seed=2)]), None),
        }  # fmt: skip
        stores: dict[int, Any] = {}
        while len(ended) < len(tasks) and time.monotonic() < thaw:
            stores.update(a.pop_completed_store_tasks())
            for name, (tid, query) in tasks.items():
                if name not in ended and (tid in stores if query is None else query(tid) is not None):
                    ended[name] = time.monotonic() - t0
            time.sleep(0.02)
    finally:
        os.kill(master.pid, signal.SIGCONT)
    until = time.monotonic() + 30
    while "store in place" not in ended and time.monotonic() < until:
        if tasks["store in place"][0] in a.pop_completed_store_tasks():
            ended["store in place"] = time.monotonic() - t0
        time.sleep(0.02)
    print("task end times with the master frozen for 4 s:", ended)
    for name in ("lookup", "load staged", "load in place", "store staged"):
        assert ended.get(name, 99.0) < 2.5, (name, ended)
    assert "store in place" in ended, ended
