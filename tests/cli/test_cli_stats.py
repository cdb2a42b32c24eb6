"""The Prometheus exporter (``hicache_sdk.metrics.prometheus``), the bridge's ``metrics_port`` and
``hicache stats`` reading a real endpoint."""

from __future__ import annotations

import json
import math
import socket
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from hicache_sdk._extras import MissingExtraError
from hicache_sdk.cli import main
from hicache_sdk.cli.stats import endpoint_url, parse_exposition, quantile, summarize
from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.memory import drop_store
from hicache_sdk.metrics.backend import Metrics
from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG, HiCacheSDKStorage
from hicache_sdk.spec import HiCacheStorageConfig

prometheus_client = pytest.importorskip("prometheus_client")

from hicache_sdk.metrics.prometheus import PrometheusExporter, rank_label, stop_all  # noqa: E402


@pytest.fixture(autouse=True)
def _stop_servers() -> Iterator[None]:
    yield
    stop_all()


@pytest.fixture
def store() -> Iterator[str]:
    name = f"stats-{uuid.uuid4().hex}"
    yield name
    drop_store(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bridge(store: str, port: int, **cfg: Any) -> HiCacheSDKStorage:
    extra = {
        **BRIDGE_EXTRA_CONFIG,
        "backend": "memory",
        "backend_config": {"store": store},
        "metrics_port": port,
    }
    return HiCacheSDKStorage(HiCacheStorageConfig(extra_config=extra, **cfg), {})


def _traffic(bridge: HiCacheSDKStorage) -> None:
    pool = MHAHostPool(16, 4, 2, 2, 8, layout="page_first")
    bridge.register_mem_pool_host(pool)
    bridge.on_host_pools_registered()
    keys = [uuid.uuid4().hex * 2 for _ in range(2)]
    assert bridge.batch_set_v1(keys, torch.arange(0, 8)) == [True, True]
    assert bridge.batch_get_v1(keys, torch.arange(8, 16)) == [True, True]
    assert bridge.batch_exists(keys) == 2


def test_exporter_text_carries_histograms_errors_and_breaker_state() -> None:
    m = Metrics()
    m.record("get_v1", pages=2, nbytes=4096, seconds=0.003)
    m.record("get_v1", pages=0, seconds=0.2, ok=False)
    m.error("connection", 3)
    m.count("breaker_rejected", 4)
    m.gauge("breaker_state", "open")
    m.gauge("staging_bytes_in_use", 512)
    exp = PrometheusExporter()
    exp.add(m, backend="redis", rank="tp1")
    samples = parse_exposition(exp.text())
    got = {(n, tuple(sorted(lb.items()))): v for n, lb, v in samples}
    base = (("backend", "redis"), ("op", "get_v1"), ("rank", "tp1"))
    assert got[("hicache_op_latency_seconds_count", base)] == 2
    assert got[("hicache_op_latency_seconds_sum", base)] == pytest.approx(0.203)
    assert got[("hicache_op_latency_seconds_bucket", tuple(sorted((*base, ("le", "0.005")))))] == 1
    assert got[("hicache_op_latency_seconds_bucket", tuple(sorted((*base, ("le", "0.25")))))] == 2
    assert got[("hicache_op_failures_total", base)] == 1
    assert got[("hicache_op_pages_total", base)] == 2 and got[("hicache_op_bytes_total", base)] == 4096
    rb = (("backend", "redis"), ("rank", "tp1"))
    assert got[("hicache_errors_total", (*rb[:1], rb[1], ("reason", "connection")))] == 3
    states = {dict(k[1])["state"]: v for k, v in got.items() if k[0] == "hicache_breaker_state"}
    assert states == {"closed": 0, "open": 1, "half_open": 0}
    assert got[("hicache_events_total", (rb[0], ("name", "breaker_rejected"), rb[1]))] == 4
    assert got[("hicache_gauge", (rb[0], ("name", "staging_bytes_in_use"), rb[1]))] == 512
    exp.remove(m)
    assert not [s for s in parse_exposition(exp.text()) if s[0] == "hicache_op_pages_total"]


def test_rank_label() -> None:
    assert rank_label(HiCacheStorageConfig(tp_rank=3, tp_size=4)) == "tp3"
    assert rank_label(HiCacheStorageConfig(tp_rank=1, pp_rank=1, pp_size=2, dp_rank=2)) == "tp1-pp1-dp2"


def test_quantile_interpolates_like_histogram_quantile() -> None:
    bs = [(0.001, 0.0), (0.01, 50.0), (0.1, 100.0), (math.inf, 100.0)]
    assert quantile(0.5, bs) == pytest.approx(0.01)
    assert quantile(0.25, bs) == pytest.approx(0.0055)
    assert quantile(0.9, bs) == pytest.approx(0.082)
    assert quantile(0.99, [(0.1, 1.0), (math.inf, 10.0)]) == 0.1  # unbounded bucket: last bound
    assert quantile(0.5, [(math.inf, 0.0)]) is None


def test_bridge_serves_metrics_and_hicache_stats_reads_them(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bridge = _bridge(store, 0)
    assert bridge.metrics_url is not None and bridge.metrics_url.endswith("/metrics")
    assert "metrics_port" not in bridge.inner.storage_config.extra_config  # bridge-only key
    _traffic(bridge)
    port = bridge.metrics_url.split(":")[-1].split("/")[0]
    assert main(["stats", port, "--json"]) == 0
    views = json.loads(capsys.readouterr().out)
    v = views["memory tp0"]
    assert v["breaker"] == "closed"
    assert v["ops"]["set_v1"]["calls"] == 1 and v["ops"]["set_v1"]["pages"] == 2
    assert v["ops"]["get_v1"]["calls"] == 1 and v["ops"]["get_v1"]["failures"] == 0
    assert v["ops"]["exists"]["pages"] == 2
    get = v["ops"]["get_v1"]
    assert 0 < get["p50_s"] <= get["p90_s"] <= get["p99_s"] <= 10.0
    assert get["mean_s"] == pytest.approx(get["seconds"])
    assert main(["stats", bridge.metrics_url]) == 0
    out = capsys.readouterr().out
    assert "memory tp0  breaker closed" in out
    row = next(ln.split() for ln in out.splitlines() if ln.strip().startswith("set_v1"))
    assert row[1:4] == ["1", "0", "2"]  # calls, failures, pages
    bridge.close()


def test_rank_offsets_the_port_and_reattach_reuses_the_server(store: str) -> None:
    base = _free_port() - 1  # rank 1 of tp 2 listens on base + 1
    first = _bridge(store, base, tp_rank=1, tp_size=2)
    assert first.metrics_url == f"http://127.0.0.1:{base + 1}/metrics"
    exporter = first._metrics_endpoint.exporter  # type: ignore[union-attr]
    assert exporter.sources() == 1
    first.close()  # detach: the source goes, the server stays
    first.close()
    assert exporter.sources() == 0
    second = _bridge(store, base, tp_rank=1, tp_size=2)  # re-attach on the same port
    assert second._metrics_endpoint.exporter is exporter  # type: ignore[union-attr]
    body = urllib.request.urlopen(second.metrics_url, timeout=5).read().decode()
    assert 'rank="tp1"' in body
    second.close()


@pytest.mark.parametrize("port", [-1, 70000, "9400", True])
def test_bad_metrics_port_is_a_value_error(store: str, port: Any) -> None:
    with pytest.raises(ValueError, match="metrics_port"):
        _bridge(store, port)


def test_missing_prometheus_client_names_the_extra(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'hicache-sdk\[prometheus\]'"):
        _bridge(store, 0)
    with pytest.raises(ImportError, match="hicache-sdk"):
        PrometheusExporter()


def test_stats_of_an_unreachable_endpoint_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    assert main(["stats", f"127.0.0.1:{port}", "--timeout", "2"]) == 1
    assert f"cannot read http://127.0.0.1:{port}/metrics" in capsys.readouterr().err


def test_endpoint_url_and_parser_edge_cases() -> None:
    assert endpoint_url("9400") == "http://127.0.0.1:9400/metrics"
    assert endpoint_url("h:1") == "http://h:1/metrics"
    assert endpoint_url("http://h:1") == "http://h:1/metrics"
    assert endpoint_url("http://h:1/x") == "http://h:1/x"
    text = '# HELP x\nhicache_errors_total{backend="a\\"b",rank="tp0",reason="r"} 2\ngarbage line here\n'
    assert parse_exposition(text) == [
        ("hicache_errors_total", {"backend": 'a"b', "rank": "tp0", "reason": "r"}, 2.0)
    ]
    assert summarize(parse_exposition(text))['a"b tp0']["errors"] == {"r": 2}
