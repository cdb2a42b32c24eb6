"""Sharing of pure Mooncake clients within a process (``hicache_backend_mooncake.clients``):
Mooncake's own ``close()`` stalls the GIL about 1 s, so backends with no segment share one
client per cluster setting, and closing a backend gives the client back instead."""

from __future__ import annotations

import numpy as np
from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeConfig, MooncakeTransport, clients


def _transport(cluster: MooncakeCluster, segment: int = 0, **kw: object) -> MooncakeTransport:
    return MooncakeTransport(MooncakeConfig.from_mapping(cluster.config(**kw), environ={}), segment)


def _seg(a: np.ndarray) -> list[tuple[int, int]]:
    return [(a.ctypes.data, a.nbytes)]


def test_backends_without_segment_share_one_client_and_close_gives_it_back(cluster: MooncakeCluster) -> None:
    t1, t2 = _transport(cluster), _transport(cluster)
    try:
        assert t1._store is not None and t1._store is t2._store
        a = np.arange(4096, dtype=np.uint8)
        assert t1.write(["shared-client-a"], [_seg(a)]) == [True]
        store = t1._store
        t1.close()
        assert not t1.ready
        # the other backend keeps working on the same client: it was not torn down
        b = np.zeros_like(a)
        assert t2._store is store
        assert t2.read(["shared-client-a"], [_seg(b)]) == [True] and bytes(b) == bytes(a)
        t2.close()
        # unused, the client stays cached: a new backend of this cluster reuses it
        t3 = _transport(cluster)
        try:
            assert t3._store is store
            c = np.zeros_like(a)
            assert t3.read(["shared-client-a"], [_seg(c)]) == [True] and bytes(c) == bytes(a)
        finally:
            t3.delete(["shared-client-a"])
            t3.close()
    finally:
        t1.close()
        t2.close()


def test_other_settings_or_a_segment_get_their_own_client(cluster: MooncakeCluster) -> None:
    t1 = _transport(cluster)
    t2 = _transport(cluster, local_buffer_size="8mb")
    t3 = _transport(cluster, 32 << 20)
    try:
        assert t1._store is not None and t2._store is not None and t3._store is not None
        assert t1._store is not t2._store
        assert t3._store is not t1._store and t3._store is not t2._store
    finally:
        for t in (t1, t2, t3):
            t.close()


def test_memory_registered_by_two_backends_stays_until_both_unregister(cluster: MooncakeCluster) -> None:
    t1, t2 = _transport(cluster), _transport(cluster)
    buf = np.zeros(1 << 16, dtype=np.uint8)
    addr = buf.ctypes.data
    try:
        t1.register_memory(addr, buf.nbytes)
        t2.register_memory(addr, buf.nbytes)
        entry = clients._clients[t1._key]
        assert entry.buffers[addr] == [buf.nbytes, 2]
        t1.close()
        assert entry.buffers[addr] == [buf.nbytes, 1]  # still registered for t2
        t2.unregister_memory(addr)
        assert addr not in entry.buffers
    finally:
        t1.close()
        t2.close()


def test_idle_clients_are_bounded(cluster: MooncakeCluster) -> None:
    sizes = [f"{n}mb" for n in range(1, clients.MAX_IDLE + 3)]
    ts = [_transport(cluster, local_buffer_size=s) for s in sizes]
    keys = [t._key for t in ts]
    for t in ts:
        t.close()
    cached = [k for k in keys if k in clients._clients]
    assert cached == keys[-clients.MAX_IDLE :]  # the oldest idle ones were closed
    assert len(clients._idle) <= clients.MAX_IDLE
