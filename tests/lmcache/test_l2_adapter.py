"""``hicache_sdk.lmcache.L2Adapter`` inside LMCache 0.5.x, over real backends (file, redis,
s3 on moto_server).

Every adapter is built through LMCache's own parser and factory (the ``lmcache server
--l2-adapter`` path) and driven through its event fds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hicache_conformance.engines.lmcache_l2 import Driver, adapter_spec, build, make_key, make_obj, obj_bytes

from hicache_sdk.lmcache import L2Adapter

BACKENDS = ["file", "redis", "s3"]
N = 4096  # float16 elements: 8 KiB chunks


def _adapter(adapters: list[Any], backend: str, config: dict[str, Any], **params: Any) -> Any:
    a = build(adapter_spec(backend, config, **params))
    adapters.append(a)
    return a


@pytest.fixture(params=BACKENDS)
def made(
    request: pytest.FixtureRequest, backend_config: Callable[[str], dict[str, Any]], adapters: list[Any]
) -> tuple[Any, Driver]:
    a = _adapter(adapters, request.param, backend_config(request.param))
    return a, Driver(a, 30.0)


def test_built_by_lmcache_is_ours(made: tuple[Any, Driver]) -> None:
    a, _ = made
    assert isinstance(a, L2Adapter)
    fds = {a.get_store_event_fd(), a.get_lookup_and_lock_event_fd(), a.get_load_event_fd()}
    assert len(fds) == 3 and all(fd >= 0 for fd in fds)


def test_round_trip_per_key_bits_and_exactly_once(made: tuple[Any, Driver]) -> None:
    a, d = made
    keys = [make_key(i) for i in range(4)]
    src = [make_obj(N, seed=i) for i in range(4)]
    res = d.store([keys[0], keys[2]], [src[0], src[2]])
    assert res is not None and res.is_successful() and res.bytes_transferred() == 2 * N * 2
    assert d.lookup(keys) == [True, False, True, False]  # per key, not a prefix
    dst = [make_obj(N, fill=0) for _ in range(4)]
    assert d.load(keys, dst) == [True, False, True, False]
    assert obj_bytes(dst[0]) == obj_bytes(src[0]) and obj_bytes(dst[2]) == obj_bytes(src[2])
    assert obj_bytes(dst[1]) == bytes(N * 2)
    # each result is answered once
    tid = a.submit_lookup_and_lock_task(keys, {})
    deadline = time.monotonic() + 10
    while (bm := a.query_lookup_and_lock_result(tid)) is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert bm is not None and bm.popcount() == 2
    assert a.query_lookup_and_lock_result(tid) is None
    assert a.pop_completed_store_tasks() == {}
    a.submit_unlock(keys)
    a.submit_unlock([])


def test_store_again_creates_nothing_and_usage_counts_once(made: tuple[Any, Driver]) -> None:
    a, d = made
    keys = [make_key(i) for i in range(3)]
    objs = [make_obj(N, seed=i) for i in range(3)]
    assert d.store(keys[:2], objs[:2]).bytes_transferred() == 2 * N * 2
    again = d.store(keys, objs)
    assert again.is_successful() and again.bytes_transferred() == N * 2  # only keys[2] is new
    assert a.get_usage().total_bytes_used == 3 * N * 2
    a.delete(keys[:1])
    assert d.lookup(keys) == [False, True, True]
    assert a.get_usage().total_bytes_used == 2 * N * 2


def test_two_adapters_on_one_redis_count_a_chunk_once(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any]
) -> None:
    cfg = backend_config("redis")
    a1, a2 = _adapter(adapters, "redis", cfg), _adapter(adapters, "redis", cfg)
    key, obj = make_key("shared"), make_obj(N, seed=7)
    r1 = Driver(a1).store([key], [obj])
    r2 = Driver(a2).store([key], [obj])
    assert (r1.bytes_transferred(), r2.bytes_transferred()) == (N * 2, 0)
    assert r2.is_successful()
    assert a1.get_usage().total_bytes_used + a2.get_usage().total_bytes_used == N * 2
    dst = make_obj(N, fill=0)
    assert Driver(a2).load([key], [dst]) == [True] and obj_bytes(dst) == obj_bytes(obj)


def test_wrong_size_and_wrong_layout_load_as_misses(made: tuple[Any, Driver]) -> None:
    _, d = made
    key = make_key("bf16")
    src = make_obj(N, dtype=torch.bfloat16, seed=3)
    assert d.store([key], [src]).is_successful()
    assert d.load([key], [make_obj(N, dtype=torch.float16, fill=0)]) == [False]  # same size, other dtype
    assert d.load([key], [make_obj(N + 8, dtype=torch.bfloat16, fill=0)]) == [False]
    assert d.load([key], [make_obj(N - 8, dtype=torch.bfloat16, fill=0)]) == [False]
    dst = make_obj(N, dtype=torch.bfloat16, fill=0)
    assert d.load([key], [dst]) == [True] and obj_bytes(dst) == obj_bytes(src)  # the object is kept


def test_layout_hint_sizes_the_lookup(made: tuple[Any, Driver]) -> None:
    from lmcache.v1.distributed.api import MemoryLayoutDesc

    _, d = made
    key = make_key("hint", group=1)
    assert d.store([key], [make_obj(N, seed=1)]).is_successful()
    right = {1: MemoryLayoutDesc([torch.Size([N])], [torch.float16])}
    wrong = {1: MemoryLayoutDesc([torch.Size([N * 2])], [torch.float16])}
    other_group = {0: MemoryLayoutDesc([torch.Size([N * 2])], [torch.float16])}
    assert d.lookup([key], right) == [True]
    assert d.lookup([key], wrong) == [False]
    assert d.lookup([key], other_group) == [True]


@pytest.mark.parametrize(
    "other",
    [
        {"model": "conformance/other"},
        {"rank": 1},
        {"group": 1},
        {"salt": "tenant-b"},
    ],
)
def test_every_key_field_isolates(made: tuple[Any, Driver], other: dict[str, Any]) -> None:
    _, d = made
    assert d.store([make_key("iso")], [make_obj(N, seed=2)]).is_successful()
    assert d.lookup([make_key("iso"), make_key("iso", **other)]) == [True, False]
    assert d.load([make_key("iso", **other)], [make_obj(N, fill=0)]) == [False]


def test_bad_input_is_refused_before_io(made: tuple[Any, Driver]) -> None:
    a, _ = made
    with pytest.raises(ValueError, match="objects"):
        a.submit_store_task([make_key(1)], [])
    with pytest.raises(ValueError, match="objects"):
        a.submit_load_task([make_key(1), make_key(2)], [make_obj(8)])


def test_close_closes_the_fds_and_status(made: tuple[Any, Driver]) -> None:
    a, _ = made
    status = a.report_status()
    assert status["is_healthy"] is True and status["backend"] in BACKENDS and status["key_scheme"] == "lmc1"
    fds = [a.get_store_event_fd(), a.get_lookup_and_lock_event_fd(), a.get_load_event_fd()]
    a.close()
    a.close()
    assert [a.get_store_event_fd(), a.get_lookup_and_lock_event_fd(), a.get_load_event_fd()] == [-1, -1, -1]
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    assert a.report_status()["is_healthy"] is False


def test_construction_errors_propagate_through_lmcache(adapters: list[Any], tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"rooot|unknown"):
        _adapter(adapters, "file", {"rooot": str(tmp_path)})
    with pytest.raises(Exception, match="no-such-backend"):
        _adapter(adapters, "no-such-backend", {})


def test_every_task_completes_while_redis_is_frozen(
    backend_config: Callable[[str], dict[str, Any]], adapters: list[Any], redis_server: Any
) -> None:
    cfg = {**backend_config("redis"), "exists_timeout_s": 0.3, "transfer_timeout_s": 0.5}
    a = _adapter(adapters, "redis", cfg, task_timeout_s=2.0, workers=2)
    d = Driver(a, 10.0)
    keys = [make_key(i) for i in range(3)]
    assert d.store(keys[:1], [make_obj(N, seed=1)]).is_successful()
    os.kill(redis_server.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        tids = [a.submit_store_task([k], [make_obj(N, seed=9)]) for k in keys[1:]]
        assert d.lookup(keys, timeout_s=5.0) == [False, False, False]
        assert d.load(keys[:1], [make_obj(N, fill=0)], timeout_s=5.0) == [False]
        deadline = time.monotonic() + 5.0
        done: dict[int, Any] = {}
        while len(done) < len(tids) and time.monotonic() < deadline:
            done.update(a.pop_completed_store_tasks())
            time.sleep(0.01)
        assert sorted(done) == sorted(tids) and not any(r.is_successful() for r in done.values())
        assert time.monotonic() - t0 < 6.0
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
