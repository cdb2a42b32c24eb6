"""Faults against real processes: a master that is not there at construction, a holder
killed under the backend (existence must then report misses, not unreadable hits)."""

from __future__ import annotations

import time

import numpy as np
from _servers import MooncakeCluster, free_port
from hicache_backend_mooncake import MooncakeConfig, MooncakeTransport

from hicache_sdk import TransportError


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
