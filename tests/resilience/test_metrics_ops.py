"""Per-op metrics: the C totals (``_hotpath.OpStats``) and the pure-Python stand-in count
alike, from many threads at once, through ``record()`` and the hot-path recorder
``op()``; snapshots never show a half-recorded call or an op never recorded."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

import pytest

import hicache_sdk.metrics.backend as metrics_mod
from hicache_sdk._ext import hotpath
from hicache_sdk.metrics.backend import LATENCY_BUCKETS_S, Metrics

IMPLS = [pytest.param(None, id="python")]
if hotpath is not None:
    IMPLS.insert(0, pytest.param(hotpath.OpStats, id="native"))


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.setattr(metrics_mod, "_OpStats", request.param)
    yield request.param


def test_record_and_recorder_count_alike_under_threads(impl: object) -> None:
    m = Metrics()
    rec = m.op("exists")
    assert m.snapshot()["ops"] == {}  # fetched, never recorded: not shown
    secs = [0.00005, 0.0001, 0.0003, 0.02, 7.0, 11.0]

    def worker(k: int) -> None:
        for i in range(300):
            s = secs[(i + k) % len(secs)]
            if i % 2:
                rec(2, 10, s, i % 3 != 0)
            else:
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


def test_read_and_write_ops_keep_feeding_sglangs_metrics(impl: object) -> None:
    m = Metrics()
    m.record("get_v1", pages=4, nbytes=4000, seconds=0.001)
    m.record("set_v1", pages=2, nbytes=2000, seconds=0.002)
    m.record("get_v1", pages=0, nbytes=0, seconds=0.001, ok=False)
    d = m.drain_storage_metrics()
    assert d.prefetch_pgs == [4] and d.backup_pgs == [2]
    assert d.prefetch_bandwidth == [pytest.approx(0.004)] and d.backup_bandwidth == [pytest.approx(0.001)]
    assert m.drain_storage_metrics().prefetch_pgs == []
    for op in ("get", "get_v1", "set_v2"):
        with pytest.raises(ValueError, match="drain_storage_metrics"):
            m.op(op)
    assert m.snapshot()["ops"]["get_v1"]["calls"] == 2


@pytest.mark.skipif(hotpath is None, reason="hicache_sdk._hotpath was not compiled")
def test_native_opstats_checks_its_arguments() -> None:
    st = hotpath.OpStats((0.1, 1.0))
    with pytest.raises(TypeError, match="takes 4 arguments"):
        st.record(1, 2, 0.1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        st.record("1", 2, 0.1, True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ascending"):
        hotpath.OpStats((1.0, 0.5))
    st.record(1, 2, 0.1, True)
    st.record(1, 2, 0.5, False)
    st.record(1, 2, 5.0, True)
    assert st.totals() == (3, 1, 3, 6, pytest.approx(5.6), [1, 1, 1])
