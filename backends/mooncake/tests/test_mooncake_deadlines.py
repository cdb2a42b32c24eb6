"""Deadlines end to end: with the master frozen (SIGSTOP: every request to it hangs, as to an
overloaded master), every call of the backend returns within its own timeout + 100 ms,
whatever runs before the transfer (existence checks, the breaker's health probe) included.
On a cluster of its own, thawed (SIGCONT) before it stops."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeStorage

from hicache_sdk import HiCacheStorageConfig
from hicache_sdk.hostpool import MHAHostPool

EXISTS_S, TRANSFER_S, SLACK_S = 0.2, 1.0, 0.1
PAGE = 4


@pytest.fixture(scope="module")
def frozen_cluster() -> Iterator[MooncakeCluster]:
    c = MooncakeCluster(holder_bytes=64 << 20)
    try:
        c.start()
        yield c
    finally:
        if c.master is not None and c.master.poll() is None:
            os.kill(c.master.pid, signal.SIGCONT)
        c.stop()


def _backend(cluster: MooncakeCluster, **kw: Any) -> tuple[MooncakeStorage, MHAHostPool]:
    extra = {  # SGLang's keys only, plus the two deadlines
        "master_server_address": cluster.address,
        "protocol": "tcp",
        "global_segment_size": 0,
        "local_hostname": "127.0.0.1",
        "exists_timeout_s": EXISTS_S,
        "transfer_timeout_s": TRANSFER_S,
        **kw,
    }
    st = MooncakeStorage(HiCacheStorageConfig(model_name="deadline", extra_config=extra), {})
    pool = MHAHostPool(16 * PAGE, PAGE, 2, 2, 8, dtype=torch.bfloat16, layout="page_first")
    st.register_mem_pool_host(pool)
    return st, pool


def test_every_call_returns_within_its_timeout_while_the_master_is_frozen(
    frozen_cluster: MooncakeCluster,
) -> None:
    st, pool = _backend(frozen_cluster)
    keys = [f"{i:064x}" for i in range(4)]
    idx = torch.arange(4 * PAGE, dtype=torch.int64)
    assert st.batch_set_v1(keys, idx) == [True] * 4
    fresh = [f"{i + 100:064x}" for i in range(4)]
    calls: list[tuple[str, float, Callable[[], object]]] = [
        ("batch_exists", EXISTS_S, lambda: st.batch_exists(keys)),
        ("batch_get_v1", TRANSFER_S, lambda: st.batch_get_v1(keys, idx)),
        ("batch_set_v1", TRANSFER_S, lambda: st.batch_set_v1(fresh, idx)),
        ("batch_get", TRANSFER_S, lambda: st.batch_get(keys[:1], [pool.get_dummy_flat_data_page()])),
        ("batch_set", TRANSFER_S, lambda: st.batch_set(fresh[:1], [pool.get_dummy_flat_data_page()])),
        ("batch_delete", TRANSFER_S, lambda: st.batch_delete(fresh[1:2])),
    ]
    assert frozen_cluster.master is not None
    os.kill(frozen_cluster.master.pid, signal.SIGSTOP)
    slow: list[str] = []
    try:
        end = time.monotonic() + 6.0  # past the breaker's opening and two half-open probes
        rounds = 0
        while time.monotonic() < end:
            rounds += 1
            for name, bound, call in calls:
                t0 = time.monotonic()
                call()
                took = time.monotonic() - t0
                if took > bound + SLACK_S:
                    slow.append(f"{name} took {took:.3f} s (bound {bound} s) in round {rounds}")
    finally:
        os.kill(frozen_cluster.master.pid, signal.SIGCONT)
    assert not slow, slow
    st.close()


def test_construction_against_a_frozen_master_is_bounded(frozen_cluster: MooncakeCluster) -> None:
    """A frozen master accepts TCP connections, so the probe passes and Mooncake's setup
    hangs (holding the GIL); the first construction in this process already set up the
    shared client, so this one must not set up again: it returns at once and serves."""
    st, _ = _backend(frozen_cluster)
    st.close()
    assert frozen_cluster.master is not None
    os.kill(frozen_cluster.master.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        st, _ = _backend(frozen_cluster)
        took = time.monotonic() - t0
    finally:
        os.kill(frozen_cluster.master.pid, signal.SIGCONT)
    st.close()
    assert took < 1.0, took
