"""Deadlines end to end against a real ``moto_server`` frozen with SIGSTOP: every call of
``S3Storage`` returns within its own timeout (``exists_timeout_s`` for ``batch_exists``,
``transfer_timeout_s`` for get, set and delete) plus 100 ms -- whatever runs around the
transfer (the breaker's half-open probe, the existence check after a failed read,
botocore's retries) counts against the same deadline. Also the first calls of a backend
started while the store is frozen, and a half-open probe that passes slowly before a
transfer that stalls (a proxy delays HEAD and stalls GET / PUT)."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hicache_backend_s3 import S3Storage

torch = pytest.importorskip("torch")

from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _proxy import LatencyProxy  # noqa: E402
from _server import CREDS, MotoServer  # noqa: E402

PAGE = 4
PAGES = 32
BUCKET = "frozen"
MARGIN_S = 0.1
#: Short deadlines keep the test fast; each is shorter than what botocore would spend on
#: its own (a 1 s read timeout, up to 3 attempts, 8 rounds of 4 requests), so the wrapper
#: has to cut every call.
TIMEOUTS = {
    "exists_timeout_s": 0.6,
    "transfer_timeout_s": 1.5,
    "read_timeout_s": 1.0,
    "max_concurrency": 4,
    "breaker_reset_s": 0.3,
}


@pytest.fixture
def server() -> Iterator[MotoServer]:
    srv = MotoServer()
    srv.start()
    srv.make_bucket(BUCKET)
    try:
        yield srv
    finally:
        if srv.proc is not None:
            os.kill(srv.proc.pid, signal.SIGCONT)
        srv.stop()


def _freeze(srv: MotoServer, frozen: bool) -> None:
    assert srv.proc is not None
    os.kill(srv.proc.pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def _hashes(tag: str, n: int = PAGES) -> list[str]:
    return [hashlib.sha256(f"{tag}{i}".encode()).hexdigest() for i in range(n)]


class _Backend:
    def __init__(self, url: str, **extra: Any) -> None:
        cfg = {
            "bucket": BUCKET,
            "endpoint_url": url,
            "access_key_id": CREDS["aws_access_key_id"],
            "secret_access_key": CREDS["aws_secret_access_key"],
            **TIMEOUTS,
            **extra,
        }
        t0 = time.monotonic()
        self.s = S3Storage(HiCacheStorageConfig(model_name="org/model", extra_config=cfg), {})
        self.construct_s = time.monotonic() - t0
        self.s.register_mem_pool_host(
            MHAHostPool(
                PAGES * PAGE, PAGE, 2, 2, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False
            )
        )
        self.idx = torch.arange(PAGES * PAGE, dtype=torch.int64)
        self.stored = _hashes("stored")
        self.calls = 0

    def calls_in_turn(self) -> list[tuple[str, float, Callable[[], object]]]:
        """(name, its deadline, the call) for every kind of call."""
        self.calls += 1
        fresh = _hashes(f"fresh{self.calls}-")
        ex, tr = TIMEOUTS["exists_timeout_s"], TIMEOUTS["transfer_timeout_s"]
        return [
            ("batch_exists", ex, lambda: self.s.batch_exists(self.stored)),
            ("batch_get_v1", tr, lambda: self.s.batch_get_v1(self.stored, self.idx)),
            ("batch_set_v1", tr, lambda: self.s.batch_set_v1(fresh, self.idx)),
            ("batch_delete", tr, lambda: self.s.batch_delete(fresh[:1])),
        ]


def _timed_round(b: _Backend, label: str) -> list[str]:
    """Run every call once; the calls that overran their deadline (with the time taken)."""
    late = []
    for name, limit, call in b.calls_in_turn():
        t0 = time.monotonic()
        call()
        took = time.monotonic() - t0
        if took > limit + MARGIN_S:
            late.append(f"{label}: {name} took {took:.2f}s (deadline {limit}s)")
    return late


def _twice(scenario: Callable[[], list[str]]) -> list[str]:
    """Run a timed scenario; when a call overran, run it once more from the start (a fresh
    backend): a busy machine may stall a thread for a moment once, while a step outside the
    deadline overruns by its own every time. The overruns of the last run."""
    late = scenario()
    return scenario() if late else late


def test_every_call_within_its_deadline_while_the_server_is_frozen(server: MotoServer) -> None:
    def scenario() -> list[str]:
        b = _Backend(server.url)
        try:
            assert b.s.batch_set_v1(b.stored, b.idx) == [True] * PAGES
            _freeze(server, True)
            late: list[str] = []
            for r in range(3):  # closed breaker, then open, then half-open probes
                late += _timed_round(b, f"round {r}")
                time.sleep(TIMEOUTS["breaker_reset_s"])
            assert b.s.batch_get_v1(b.stored, b.idx) == [False] * PAGES
            errors = b.s.metrics.errors()
            assert errors.get("deadline", 0) >= 1 and errors.get("breaker_open", 0) >= 1, errors
            _freeze(server, False)
            deadline = time.monotonic() + 10
            while b.s.batch_exists(b.stored) != PAGES and time.monotonic() < deadline:
                time.sleep(0.1)  # the breaker recovers once the server answers
            assert b.s.batch_get_v1(b.stored, b.idx) == [True] * PAGES
            return late
        finally:
            _freeze(server, False)
            b.s.close()

    assert _twice(scenario) == []


def test_first_calls_of_a_backend_started_while_frozen(server: MotoServer) -> None:
    def scenario() -> list[str]:
        _freeze(server, True)
        try:
            b = _Backend(server.url)
            # construction (not a call, but bounded): the bucket check (one attempt within the
            # exists deadline), the breaker's start probe (also within it), building clients
            late = []
            if b.construct_s > 2 * TIMEOUTS["exists_timeout_s"] + 0.5:
                late.append(f"construction took {b.construct_s:.2f}s")
            late += _timed_round(b, "first")
            time.sleep(TIMEOUTS["breaker_reset_s"])
            late += _timed_round(b, "after the reset")
            b.s.close()
            return late
        finally:
            _freeze(server, False)

    assert _twice(scenario) == []


def test_a_slow_probe_counts_against_the_transfer_deadline(server: MotoServer) -> None:
    """HEAD answers after 0.4 s (the probe passes) while GET and PUT stall: a call that is
    the breaker's half-open probe still returns by its own deadline. Without the probe's
    time taken off the transfer's, it took 0.4 s + 1.5 s."""
    proxy = LatencyProxy(server.port)
    b = _Backend(proxy.url, breaker_failures=1)
    try:
        assert b.s.batch_set_v1(b.stored, b.idx) == [True] * PAGES
        proxy.method_delay = {"HEAD": 0.4, "GET": 60.0, "PUT": 60.0}
        limit = TIMEOUTS["transfer_timeout_s"]
        took = []
        for _ in range(3):
            time.sleep(TIMEOUTS["breaker_reset_s"] + 0.05)  # half-open: this call probes
            t0 = time.monotonic()
            assert b.s.batch_get_v1(b.stored, b.idx) == [False] * PAGES
            took.append(time.monotonic() - t0)
        # every call is a half-open probe: a step outside the deadline overruns each time,
        # a busy machine's stall at most once
        assert sorted(took)[1] <= limit + MARGIN_S, took
        assert b.s.metrics.errors().get("deadline", 0) >= 1
    finally:
        proxy.method_delay = {}
        b.s.close()
        proxy.close()
