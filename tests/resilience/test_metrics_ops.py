"""Per-op metrics count exactly from many threads at once; snapshots never show a
half-recorded call or an op never recorded."""

from __future__ import annotations

import bisect
import threading

import pytest

from hicache_sdk.metrics.backend import LATENCY_BUCKETS_S, Metrics


def test_record_counts_exactly_under_threads() -> None:
    m = Metrics()
    assert m.snapshot()["ops"] == {}  # never recorded: not shown
    secs = [0.00005, 0.0001, 0.0003, 0.02, 7.0, 11.0]

    def worker(k: int) -> None:
        for i in range(300):
            s = secs[(i + k) % len(secs)]
            m.record("exists", pages=2, nbytes=10, seconds=s, ok=i % 3 != 0)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    seen: list[dict[str, object]] = []
    for t in ts:
        t.start()
    while any(t.is_alive() for t in ts):  # snapshots taken while recording: each consistent
        op = m.snapshot()["ops"].get("exists")
        if op is not None:
            seen.append(op)
    for t in ts:
        t.join()
    for op in seen:
        assert op["pages"] == 2 * op["calls"] and op["bytes"] == 10 * op["calls"]  # type: ignore[operator]
        assert sum(op["latency_counts"]) == op["calls"]  # type: ignore[arg-type]
    op = m.snapshot()["ops"]["exists"]
    assert op["calls"] == 1200 and op["pages"] == 2400 and op["bytes"] == 12000
    assert op["failures"] == 4 * len([i for i in range(300) if i % 3 == 0])
    want = [0] * (len(LATENCY_BUCKETS_S) + 1)
    for k in range(4):
        for i in range(300):
            want[bisect.bisect_left(LATENCY_BUCKETS_S, secs[(i + k) % len(secs)])] += 1
    assert op["latency_counts"] == want
    assert op["seconds"] == pytest.approx(
        sum(secs[(i + k) % len(secs)] for k in range(4) for i in range(300))
    )


def test_read_and_write_ops_keep_feeding_sglangs_metrics() -> None:
    m = Metrics()
    m.record("get_v1", pages=4, nbytes=4000, seconds=0.001)
    m.record("set_v1", pages=2, nbytes=2000, seconds=0.002)
    m.record("get_v1", pages=0, nbytes=0, seconds=0.001, ok=False)
    d = m.drain_storage_metrics()
    assert d.prefetch_pgs == [4] and d.backup_pgs == [2]
    assert d.prefetch_bandwidth == [pytest.approx(0.004)] and d.backup_bandwidth == [pytest.approx(0.001)]
    assert m.drain_storage_metrics().prefetch_pgs == []
    assert m.snapshot()["ops"]["get_v1"]["calls"] == 2
