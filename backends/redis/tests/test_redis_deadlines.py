"""Deadlines end to end against a frozen server: a real ``redis-server`` stopped with
SIGSTOP (connections accepted by the kernel, never answered). Every call returns within its
configured timeout + 100 ms: ``batch_exists`` within ``exists_timeout_s``, ``batch_get_v1``
and ``batch_set_v1`` within ``transfer_timeout_s``, construction within
``connect_timeout_s`` (+ the start probe's ``exists_timeout_s``), and the first call after
it at once (the breaker starts open)."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from _redis_servers import RedisServer
from hicache_backend_redis import RedisStorage

from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig

EXISTS_S = 0.2
TRANSFER_S = 1.0
CONNECT_S = 0.5
SLACK_S = 0.1
PAGES = 4


@pytest.fixture(scope="module")
def pool() -> MHAHostPool:
    p = MHAHostPool(PAGES * 64, 64, 2, 8, 128, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
    p.kv_buffer.view(torch.uint8).random_(0, 256)
    return p


def _storage(url: str, pool: MHAHostPool) -> RedisStorage:
    cfg = {
        "url": url,
        "key_prefix": "dl:",
        "exists_timeout_s": EXISTS_S,
        "transfer_timeout_s": TRANSFER_S,
        "connect_timeout_s": CONNECT_S,
        "socket_timeout_s": 30.0,  # far beyond the deadlines: only they can end a call
    }
    s = RedisStorage(HiCacheStorageConfig(model_name="m", extra_config=cfg), {})
    s.register_mem_pool_host(pool)
    return s


KEYS = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(PAGES)]
IDX = torch.arange(PAGES * 64, dtype=torch.int64)


@pytest.fixture
def frozen(pool: MHAHostPool) -> Iterator[tuple[RedisServer, RedisStorage]]:
    """A server holding the pages, a storage with a warm connection to it, then SIGSTOP."""
    srv = RedisServer()
    srv.start()
    assert srv.proc is not None
    s = _storage(srv.url, pool)
    try:
        assert s.batch_set_v1(KEYS, IDX) == [True] * PAGES
        assert s.batch_exists(KEYS) == PAGES
        os.kill(srv.proc.pid, signal.SIGSTOP)
        yield srv, s
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
        s.close()
        srv.close()


def _timed(fn: Callable[[], Any], bound: float | None = None) -> tuple[float, Any]:
    """(seconds, result) of ``fn()``. With ``bound``: a call over ``bound + SLACK_S`` is
    timed once more (a busy machine may stall a thread for a moment once, while a step
    outside the deadline overruns by its own every time)."""
    t0 = time.monotonic()
    out = fn()
    took = time.monotonic() - t0
    if bound is not None and took > bound + SLACK_S:
        return _timed(fn)
    return took, out


def test_batch_exists_returns_within_its_deadline(frozen: tuple[RedisServer, RedisStorage]) -> None:
    _, s = frozen
    for _ in range(2):  # the second finds the first's connection still blocked
        took, hits = _timed(lambda: s.batch_exists(KEYS), EXISTS_S)
        assert hits == 0 and took <= EXISTS_S + SLACK_S, took


def test_batch_set_v1_returns_within_its_deadline(frozen: tuple[RedisServer, RedisStorage]) -> None:
    _, s = frozen
    other = [hashlib.sha256(f"new{i}".encode()).hexdigest() for i in range(PAGES)]
    for _ in range(2):
        took, got = _timed(lambda: s.batch_set_v1(other, IDX), TRANSFER_S)
        assert got == [False] * PAGES and took <= TRANSFER_S + SLACK_S, took


def test_batch_get_v1_returns_within_its_deadline(frozen: tuple[RedisServer, RedisStorage]) -> None:
    _, s = frozen
    for _ in range(2):
        took, got = _timed(lambda: s.batch_get_v1(KEYS, IDX), TRANSFER_S)
        assert got == [False] * PAGES and took <= TRANSFER_S + SLACK_S, took


def test_the_transport_read_ends_at_the_deadline(frozen: tuple[RedisServer, RedisStorage]) -> None:
    """Below the adapter: the resilience layer's read of the frozen server (cancel token at
    the deadline) returns within the transfer deadline."""
    _, s = frozen
    buf = torch.zeros(256 << 10, dtype=torch.uint8)
    took, got = _timed(lambda: s.transport.read(["x"], [[(buf.data_ptr(), buf.numel())]]), TRANSFER_S)
    assert got == [False] and took <= TRANSFER_S + SLACK_S, took


def test_construction_and_the_first_call_after_it(pool: MHAHostPool) -> None:
    """Against a frozen server construction waits at most ``connect_timeout_s`` for the
    server's answer (then the start probe, under ``exists_timeout_s``), starts with the
    breaker open, and its first calls return at once."""
    srv = RedisServer()
    srv.start()
    assert srv.proc is not None
    os.kill(srv.proc.pid, signal.SIGSTOP)
    s: RedisStorage | None = None
    try:
        took, s = _timed(lambda: _storage(srv.url, pool))
        assert took <= CONNECT_S + EXISTS_S + SLACK_S, took
        for call, bound in (
            (lambda: s.batch_exists(KEYS), EXISTS_S),
            (lambda: s.batch_get_v1(KEYS, IDX), TRANSFER_S),
            (lambda: s.batch_set_v1(KEYS, IDX), TRANSFER_S),
        ):
            took, _ = _timed(call, bound)
            assert took <= bound + SLACK_S, took
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
        if s is not None:
            s.close()
        srv.close()


def test_a_ranged_read_ends_at_the_deadline_and_never_lands_late(
    frozen: tuple[RedisServer, RedisStorage],
) -> None:
    """``read_ranges`` through the resilience layer (what the SGLang linker uses to load
    layer by layer): against the frozen server it is a miss within the transfer deadline;
    when the server answers late, the bytes land in staging, never in the caller's memory."""
    srv, s = frozen
    objs, _ = s._page_objects_nomem(s._require_kv("test"), KEYS[:1])
    buf = torch.full((4096,), 0x5C, dtype=torch.uint8)
    ranges = [(0, [(buf.data_ptr(), 2048)]), (8192, [(buf.data_ptr() + 2048, 2048)])]
    took, got = _timed(lambda: s.transport.read_ranges(objs[0].name, ranges), TRANSFER_S)
    assert got is False and took <= TRANSFER_S + SLACK_S, took
    assert srv.proc is not None
    os.kill(srv.proc.pid, signal.SIGCONT)
    end = time.monotonic() + 10
    while s.metrics.counter("late_completions") == 0 and time.monotonic() < end:
        time.sleep(0.01)
    assert s.metrics.counter("late_completions") >= 1
    assert bool((buf == 0x5C).all()), "a late ranged read wrote into the caller's memory"
