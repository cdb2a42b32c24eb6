"""Redis Cluster (3 masters started here, killed by PID): per-node split, results in key
order, MOVED and ASK while a slot migrates, a killed master's keys miss while the others
serve, recovery after its restart."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _redis_servers import RedisClusterServers, RedisServer
from hicache_backend_redis import RedisConfig
from hicache_backend_redis.cluster_transport import RedisClusterTransport
from redis.crc import key_slot


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    c = RedisClusterServers(extra=["--enable-debug-command", "local"])  # DEBUG SLEEP: a slow node
    c.start()
    try:
        yield c
    finally:
        c.close()


def _segs(a: np.ndarray) -> list[tuple[int, int]]:
    return [(int(a.ctypes.data), a.nbytes)]


def _make(cluster: RedisClusterServers, prefix: str, **kw: Any) -> RedisClusterTransport:
    others = [f"127.0.0.1:{n.port}" for n in cluster.nodes[1:]]
    return RedisClusterTransport(
        RedisConfig(url=cluster.url, cluster=True, startup_nodes=tuple(others), key_prefix=prefix,
                    **{"connect_timeout_s": 0.5, "socket_timeout_s": 2.0, **kw})
    )  # fmt: skip


def _owner(cluster: RedisClusterServers, name: str) -> RedisServer:
    slot = key_slot(name.encode())
    for line in cluster.cli(cluster.nodes[0], "cluster", "nodes").splitlines():
        f = line.split()
        port = int(f[1].split(":")[1].split("@")[0])
        for r in f[8:]:
            lo, _, hi = r.partition("-")
            if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                return next(n for n in cluster.nodes if n.port == port)
    raise AssertionError(f"no owner for slot {slot}")


def _node_id(cluster: RedisClusterServers, node: RedisServer) -> str:
    return cluster.cli(node, "cluster", "myid").strip()


def test_batches_split_per_node_in_key_order(cluster: RedisClusterServers) -> None:
    t = _make(cluster, "c1:")
    try:
        pages = [np.full(10_000 + i, i, np.uint8) for i in range(60)]
        keys = [f"k{i}" for i in range(60)]
        owners = {_owner(cluster, "c1:" + k).port for k in keys}
        assert len(owners) == 3  # the batch really spans every master
        before = t.metrics.counter("round_trips")
        assert t.write(keys, [_segs(p) for p in pages]) == [True] * 60
        assert t.metrics.counter("round_trips") - before == 3  # one pipelined round trip per node
        assert t.exists([*keys, "none"]) == [10_000 + i for i in range(60)] + [None]
        out = [np.zeros_like(p) for p in pages]
        assert t.read(keys, [_segs(o) for o in out]) == [True] * 60
        assert all(np.array_equal(a, b) for a, b in zip(out, pages))
        t.clear("")
        assert t.exists(keys) == [None] * 60
    finally:
        t.close()


def test_moved_and_ask_while_a_slot_migrates(cluster: RedisClusterServers) -> None:
    t = _make(cluster, "c2:")
    try:
        key = "mig"
        name = "c2:" + key
        slot = key_slot(name.encode())
        src = _owner(cluster, name)
        dst = next(n for n in cluster.nodes if n is not src)
        a = np.arange(5000, dtype=np.uint16).view(np.uint8)
        assert t.write([key], [_segs(a)]) == [True]
        src_id, dst_id = _node_id(cluster, src), _node_id(cluster, dst)
        cluster.cli(dst, "cluster", "setslot", str(slot), "importing", src_id)
        cluster.cli(src, "cluster", "setslot", str(slot), "migrating", dst_id)
        cluster.cli(src, "migrate", "127.0.0.1", str(dst.port), "", "0", "5000", "keys", name)
        # Mid-migration: the source answers ASK for the moved key.
        out = np.zeros_like(a)
        assert t.read([key], [_segs(out)]) == [True]
        assert np.array_equal(out, a)
        assert t.exists([key]) == [a.nbytes]
        for n in cluster.nodes:
            cluster.cli(n, "cluster", "setslot", str(slot), "node", dst_id)
        # Done: the source answers MOVED; the map is refreshed and the key read from dst.
        out[:] = 0
        assert t.read([key], [_segs(out)]) == [True]
        assert np.array_equal(out, a)
        assert _owner(cluster, name) is dst
    finally:
        t.close()


def test_killed_master_misses_while_others_serve_then_recovers(cluster: RedisClusterServers) -> None:
    t = _make(cluster, "c3:")
    try:
        keys = [f"k{i}" for i in range(30)]
        pages = [np.full(2000, i, np.uint8) for i in range(30)]
        assert t.write(keys, [_segs(p) for p in pages]) == [True] * 30
        victim = cluster.nodes[2]
        lost = [_owner(cluster, "c3:" + k) is victim for k in keys]
        assert any(lost) and not all(lost)
        victim.stop()
        out = [np.zeros_like(p) for p in pages]
        got = t.read(keys, [_segs(o) for o in out])
        assert got == [not x for x in lost]
        assert all(np.array_equal(out[i], pages[i]) for i in range(30) if got[i])
        assert t.exists(keys) == [None if x else 2000 for x in lost]
        victim.start()  # empty, rejoins with its slots (nodes.conf kept in its dir)
        cluster.wait_ok()
        assert t.exists(keys) == [None if x else 2000 for x in lost]
        assert t.write(keys, [_segs(p) for p in pages]) == [True] * 30
        assert t.read(keys, [_segs(o) for o in out]) == [True] * 30
    finally:
        t.close()


def _calls(cluster: RedisClusterServers, name: str) -> int:
    """How many ``name`` commands the masters have run (their ``INFO commandstats``)."""
    total = 0
    for node in cluster.nodes:
        for line in cluster.cli(node, "info", "commandstats").splitlines():
            if line.startswith(f"cmdstat_{name}:"):
                total += int(line.split("calls=")[1].split(",")[0])
    return total


def test_write_window_applies_on_every_master(cluster: RedisClusterServers) -> None:
    """Big values go ``write_window`` at a time per connection as ``SETNX`` (one round trip
    each after the first window), as on a standalone server; ``write_window = 0`` pipelines
    them as ``SET ... NX``, one round trip per master."""
    keys = [f"w{i}" for i in range(12)]
    per_node: dict[int, int] = {}
    for k in keys:
        port = _owner(cluster, "c5:" + k).port
        per_node[port] = per_node.get(port, 0) + 1
    assert len(per_node) == 3
    pages = [np.full(40_000, i, np.uint8) for i in range(12)]
    windowed = _make(cluster, "c5:", write_window=2, parallel_connections=1)
    piped = _make(cluster, "c6:", write_window=0, parallel_connections=1)
    try:
        setnx, set_, before = (
            _calls(cluster, "setnx"),
            _calls(cluster, "set"),
            windowed.metrics.counter("round_trips"),
        )
        assert windowed.write(keys, [_segs(p) for p in pages]) == [True] * 12
        assert _calls(cluster, "setnx") - setnx == 12 and _calls(cluster, "set") == set_
        trips = sum(1 + max(0, n - 2) for n in per_node.values())
        assert windowed.metrics.counter("round_trips") - before == trips
        setnx, set_ = _calls(cluster, "setnx"), _calls(cluster, "set")
        assert piped.write(keys, [_segs(p) for p in pages]) == [True] * 12
        assert _calls(cluster, "set") - set_ == 12 and _calls(cluster, "setnx") == setnx
        assert piped.metrics.counter("round_trips") == 3
        for t in (windowed, piped):
            out = [np.zeros_like(p) for p in pages]
            assert t.read(keys, [_segs(o) for o in out]) == [True] * 12
            assert all(np.array_equal(a, b) for a, b in zip(out, pages))
    finally:
        windowed.close()
        piped.close()


def test_parallel_connections_split_a_masters_large_batch(cluster: RedisClusterServers) -> None:
    """6 MiB for one master (one hash tag: one slot) is 3 parts with
    ``parallel_connections = 3``: three data connections to that master carry the write
    and the read, concurrently (the write's first part is two values one at a time: two
    round trips; the read one)."""
    keys = [f"{{tag}}p{i}" for i in range(6)]
    owner = _owner(cluster, "c7:" + keys[0])
    pages = [np.full(1 << 20, 7 + i, np.uint8) for i in range(6)]
    t = _make(cluster, "c7:", parallel_connections=3, pool_size=8)
    try:
        assert t.write(keys, [_segs(p) for p in pages]) == [True] * 6
        out = [np.zeros_like(p) for p in pages]
        assert t.read(keys, [_segs(o) for o in out]) == [True] * 6
        assert all(np.array_equal(a, b) for a, b in zip(out, pages))
        clients = cluster.cli(owner, "client", "list").splitlines()
        assert sum(" cmd=mget " in line for line in clients) == 3
        assert t.metrics.counter("round_trips") == 2 + 1
    finally:
        t.close()


def test_cancel_stops_a_cluster_read_waiting_on_slow_nodes(cluster: RedisClusterServers) -> None:
    """The cluster transport is cancellable: a read whose nodes are all asleep stops at the
    token's cancel (not when they wake), nothing lands in caller memory, the interrupted
    connections are discarded and the next read gets every page whole."""
    import threading
    import time

    from hicache_sdk.errors import Cancelled
    from hicache_sdk.kit import CancelToken

    # the read after the cancel reconnects to every node: on a loaded machine that can take
    # longer than the other tests' 0.5 s connect timeout
    t = _make(cluster, "c4:", connect_timeout_s=3.0, socket_timeout_s=5.0)
    try:
        pages = [np.full(200_000, i + 1, np.uint8) for i in range(30)]
        keys = [f"k{i}" for i in range(30)]
        assert len({_owner(cluster, "c4:" + k).port for k in keys}) == 3
        assert t.write(keys, [_segs(p) for p in pages]) == [True] * 30
        out = [np.zeros_like(p) for p in pages]
        sleepers = [
            threading.Thread(target=cluster.cli, args=(n, "debug", "sleep", "2")) for n in cluster.nodes
        ]
        for s in sleepers:
            s.start()
        time.sleep(0.3)  # every master is asleep: the read's commands wait in their sockets
        tok = CancelToken()
        threading.Timer(0.3, tok.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(Cancelled):
            t.read(keys, [_segs(o) for o in out], tok)
        took = time.monotonic() - t0
        for s in sleepers:
            s.join(10)
        assert took < 1.2  # stopped at the cancel (0.3 s), not when the nodes woke (~1.7 s)
        assert not any(o.any() for o in out)  # not one byte landed
        assert t.read(keys, [_segs(o) for o in out]) == [True] * 30
        assert all(np.array_equal(a, b) for a, b in zip(out, pages))
        t.clear("")
    finally:
        t.close()
