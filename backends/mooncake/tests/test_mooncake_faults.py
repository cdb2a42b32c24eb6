"""Faults against real processes: a master that is not there at construction, a failed
``check_server`` probe, a holder killed under the backend (existence must then report
misses, not unreadable hits)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _servers import MooncakeCluster, free_port
from hicache_backend_mooncake import MooncakeConfig, MooncakeStorage, MooncakeTransport

from hicache_sdk import HiCacheStorageConfig, TransportError


def test_construction_with_master_away_is_quick_and_recovers_in_background() -> None:
    c = MooncakeCluster(holder_bytes=64 << 20)
    t0 = time.monotonic()
    t = MooncakeTransport(MooncakeConfig.from_mapping(c.config(), environ={}), 64 << 20)
    try:
        assert time.monotonic() - t0 < 5.0  # never setup()'s ~90 s block
        assert not t.ready and not t.health()
        try:
            t.exists(["k"])
            raise AssertionError("exists must fail while not set up")
        except TransportError as e:
            assert e.reason == "connection"
        c.start_master()
        for _ in range(100):
            if t.ready:
                break
            time.sleep(0.1)
        assert t.ready and t.health()
        a = np.full(4096, 7, dtype=np.uint8)
        assert t.write(["late"], [[(a.ctypes.data, a.nbytes)]]) == [True]
        assert t.exists(["late"]) == [-1]
    finally:
        t.close()
        c.stop()


def test_holder_killed_existence_reports_misses() -> None:
    c = MooncakeCluster(holder_bytes=64 << 20, holder_port=free_port()).start()
    t = MooncakeTransport(MooncakeConfig.from_mapping(c.config(), environ={}), 0)
    try:
        a = np.arange(8192, dtype=np.uint8)
        b = np.zeros_like(a)
        assert t.write(["h0", "h1"], [[(a.ctypes.data, a.nbytes)]] * 2) == [True, True]
        c.stop_holder()
        try:
            got = t.read(["h0"], [[(b.ctypes.data, b.nbytes)]])
            assert got == [False]
        except TransportError as e:  # the whole batch failed: counted by the breaker
            assert e.reason == "transfer"
        assert t.exists(["h0"]) == [None]  # Mooncake still says is_exist=1 here
    finally:
        t.close()
        c.stop()


def test_failed_probe_is_in_the_error_and_the_metrics() -> None:
    """With ``check_server`` the master's /health is probed first (here: a port where
    nothing listens). The reason is in every call's error and counted as ``master_probe``."""
    c = MooncakeCluster(holder_bytes=64 << 20)
    dead = free_port()
    cfg = MooncakeConfig.from_mapping(
        c.config(check_server=True, master_metrics_port=dead, setup_timeout_s=0.3), environ={}
    )
    t = MooncakeTransport(cfg, 0)
    try:
        assert not t.ready
        with pytest.raises(
            TransportError, match=rf"master probe failed: http://127.0.0.1:{dead}/health did not answer"
        ):
            t.exists(["k"])
        assert t.failures.snapshot().get("master_probe", 0) >= 1
    finally:
        t.close()


def test_without_check_server_the_metrics_port_is_never_asked(cluster: MooncakeCluster) -> None:
    """SGLang's default (``check_server`` false): a config without ``master_metrics_port``
    (so 9003, where this master does not listen) sets up and serves at once."""
    assert cluster.metrics_port != 9003
    cfg = MooncakeConfig.from_mapping(cluster.config(), environ={})
    assert cfg.master_metrics_port == 9003 and not cfg.check_server
    t = MooncakeTransport(cfg, 0)
    try:
        assert t.ready and t.health()
        assert t.exists(["never-written-probe"]) == [None]
    finally:
        t.close()


def test_backend_reports_the_failed_probe_in_its_metrics() -> None:
    c = MooncakeCluster(holder_bytes=64 << 20)
    extra = c.config(check_server=True, master_metrics_port=free_port(), setup_timeout_s=0.2)
    st = MooncakeStorage(HiCacheStorageConfig(extra_config=extra), {})
    try:
        assert st.metrics.errors().get("master_probe", 0) >= 1
    finally:
        st.close()
