"""RedisTransport against a real redis-server: values, round trips, bounded commands,
create-if-absent, size mismatches, clear, scatter/gather; how a batch is split into parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _redis_servers import RedisServer, call
from hicache_backend_redis import RedisTransport
from hicache_backend_redis.node_io import split_parts
from hypothesis import given
from hypothesis import strategies as st

Make = Callable[..., RedisTransport]


def segs(a: np.ndarray, parts: int = 1) -> list[tuple[int, int]]:
    n = a.nbytes
    cuts = [n * p // parts for p in range(parts + 1)]
    base = int(a.ctypes.data)
    return [(base + cuts[p], cuts[p + 1] - cuts[p]) for p in range(parts)]


def pattern(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def raw(server: RedisServer, *args: bytes | str | int) -> Any:
    """One command on a redis-py connection of its own (out of band)."""
    return call(server.port, *args)


def test_round_trip_values_and_misses(make_transport: Make, request: pytest.FixtureRequest) -> None:
    t = make_transport(key_prefix=f"t:{request.node.name}:")
    pages = [pattern(i, 4096 + i) for i in range(5)]
    keys = [f"k{i}" for i in range(5)]
    assert t.write(keys[:3], [segs(p, 3) for p in pages[:3]]) == [True] * 3
    assert t.exists(keys) == [4096, 4097, 4098, None, None]
    out = [np.zeros_like(p) for p in pages]
    assert t.read(keys, [segs(o, 2) for o in out]) == [True, True, True, False, False]
    for i in range(3):
        assert np.array_equal(out[i], pages[i])


def test_one_round_trip_per_batch(make_transport: Make, request: pytest.FixtureRequest) -> None:
    """With ``write_window = 0`` writes are pipelined whole; reads always are (``exists``
    is redis-py's pipeline: no data connection is used)."""
    t = make_transport(key_prefix=f"t:{request.node.name}:", max_command_bytes=1 << 16, write_window=0)
    pages = [pattern(i, 40000) for i in range(64)]  # 64 x 40 kB: ~40 MGET commands of <= 64 KiB
    keys = [f"k{i}" for i in range(64)]
    t.exists(["warm"])  # open the connection
    before = t.metrics.counter("round_trips")
    assert t.write(keys, [segs(p) for p in pages]) == [True] * 64
    assert t.metrics.counter("round_trips") == before + 1
    assert t.exists(keys) == [40000] * 64
    assert t.metrics.counter("round_trips") == before + 1
    out = [np.zeros_like(p) for p in pages]
    assert t.read(keys, [segs(o) for o in out]) == [True] * 64
    assert t.metrics.counter("round_trips") == before + 2
    assert all(np.array_equal(a, b) for a, b in zip(out, pages))


def test_windowed_writes(
    make_transport: Make, redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    """Values of 32 KiB or more go write_window at a time per connection as SETNX (value
    last), each a round trip of its own; smaller ones stay pipelined as SET NX; with a TTL
    the big ones are SET NX PX. The first writer wins in every form."""
    pfx = f"t:{request.node.name}:"
    t = make_transport(key_prefix=pfx, write_window=2, parallel_connections=1)
    big = [pattern(i, 40000) for i in range(7)]
    small = [pattern(i, 3000) for i in range(7)]
    t.exists(["warm"])
    before, setnx = t.metrics.counter("round_trips"), _calls(redis_server, "setnx")
    assert t.write([f"b{i}" for i in range(7)], [segs(p) for p in big]) == [True] * 7
    assert t.metrics.counter("round_trips") - before == 6  # 2 sent, then 5 more each after a reply
    assert _calls(redis_server, "setnx") - setnx == 7
    before, setc = t.metrics.counter("round_trips"), _calls(redis_server, "set")
    assert t.write([f"s{i}" for i in range(7)], [segs(p) for p in small]) == [True] * 7
    assert t.metrics.counter("round_trips") - before == 1 and _calls(redis_server, "set") - setc == 7
    other = pattern(99, 40000)
    assert t.write(["b3", "new"], [segs(other), segs(other)]) == [True, True]
    out = [np.zeros_like(p) for p in big]
    assert t.read([f"b{i}" for i in range(7)], [segs(o) for o in out]) == [True] * 7
    assert all(np.array_equal(a, b) for a, b in zip(out, big))  # b3 kept its first value
    ttl = make_transport(key_prefix=pfx, write_window=1, ttl_s=100)
    setc = _calls(redis_server, "set")
    assert ttl.write(["t0", "t1"], [segs(big[0]), segs(big[1])]) == [True, True]
    assert _calls(redis_server, "set") - setc == 2
    assert 0 < int(raw(redis_server, "PTTL", pfx + "t1")) <= 100_000


def test_small_windowed_writes_fan_out_over_connections(
    make_transport: Make, redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    """A windowed batch under the split size goes over up to parallel_connections
    connections from the caller's thread (value i on connection i % k): every connection's
    first value leaves in one round trip, so 4 values over 4 connections are 1 round trip
    (4 on one connection), 6 are 2 (connection 0 carries values 0 and 4). Duplicate keys
    are written once, from the first copy, whichever connection it would have gone to."""
    pfx = f"t:{request.node.name}:"
    t = make_transport(key_prefix=pfx, write_window=1, parallel_connections=4)
    one = make_transport(key_prefix=pfx + "one:", write_window=1, parallel_connections=1)
    for n, trips in ((4, 1), (6, 2)):
        vals = [pattern(100 * n + i, 40000) for i in range(n)]
        keys = [f"n{n}-{i}" for i in range(n)]
        before, setnx = t.metrics.counter("round_trips"), _calls(redis_server, "setnx")
        assert t.write(keys, [segs(v) for v in vals]) == [True] * n
        assert t.metrics.counter("round_trips") - before == trips
        assert _calls(redis_server, "setnx") - setnx == n
        out = [np.zeros_like(v) for v in vals]
        assert t.read(keys, [segs(o) for o in out]) == [True] * n
        assert all(np.array_equal(a, b) for a, b in zip(out, vals))
        before = one.metrics.counter("round_trips")
        assert one.write(keys, [segs(v) for v in vals]) == [True] * n
        assert one.metrics.counter("round_trips") - before == n  # the same batch on one connection
    copies = [pattern(900 + c, 40000) for c in range(4)]
    assert t.write(["d", "x", "d", "d"], [segs(c) for c in copies]) == [True] * 4
    got = [np.zeros_like(copies[0]) for _ in range(2)]
    assert t.read(["d", "x"], [segs(g) for g in got]) == [True, True]
    assert np.array_equal(got[0], copies[0]) and np.array_equal(got[1], copies[1])


def _calls(server: RedisServer, name: str) -> int:
    """How many ``name`` commands the server has run (its own ``INFO commandstats``)."""
    stats = raw(server, "INFO", "commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


def test_commands_are_bounded(
    make_transport: Make, redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    """The read of 16 x 64 KiB with max_command_bytes = 128 KiB is 8 MGETs (counted by the
    server's own command statistics), not one."""
    t = make_transport(key_prefix=f"t:{request.node.name}:", max_command_bytes=128 << 10)
    pages = [pattern(i, 64 << 10) for i in range(16)]
    keys = [f"k{i}" for i in range(16)]
    assert t.write(keys, [segs(p) for p in pages]) == [True] * 16

    before = _calls(redis_server, "mget")
    out = [np.zeros_like(p) for p in pages]
    assert t.read(keys, [segs(o) for o in out]) == [True] * 16
    assert _calls(redis_server, "mget") - before == 8
    assert all(np.array_equal(a, b) for a, b in zip(out, pages))


def test_create_if_absent(make_transport: Make, request: pytest.FixtureRequest) -> None:
    t = make_transport(key_prefix=f"t:{request.node.name}:")
    a, b = pattern(1, 1000), pattern(2, 1000)
    assert t.write(["x", "x"], [segs(a), segs(b)]) == [True, True]
    out = np.zeros(1000, np.uint8)
    assert t.read(["x"], [segs(out)]) == [True]
    assert np.array_equal(out, a)  # first writer wins, the second left it untouched


def test_size_mismatch_is_a_miss_and_the_connection_survives(
    make_transport: Make, request: pytest.FixtureRequest
) -> None:
    t = make_transport(key_prefix=f"t:{request.node.name}:", pool_size=1)
    a = pattern(3, 5000)
    assert t.write(["x", "y"], [segs(a), segs(a)]) == [True, True]
    small, big, ok = np.zeros(4000, np.uint8), np.zeros(6000, np.uint8), np.zeros(5000, np.uint8)
    assert t.read(["x", "y", "x"], [segs(small), segs(big), segs(ok)]) == [False, False, True]
    assert np.array_equal(ok, a)


def test_ttl_and_prefix(
    make_transport: Make, redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    prefix = f"t:{request.node.name}:"
    t = make_transport(key_prefix=prefix, ttl_s=100)
    assert t.write(["x"], [segs(pattern(4, 10))]) == [True]
    ttl = raw(redis_server, "PTTL", prefix + "x")
    assert isinstance(ttl, int) and 90_000 < ttl <= 100_000


def test_delete_and_clear_stay_in_prefix(make_transport: Make, request: pytest.FixtureRequest) -> None:
    t = make_transport(key_prefix=f"t:{request.node.name}:[a]*:")  # glob characters are escaped
    other = make_transport(key_prefix=f"t:{request.node.name}:a:")  # what an unescaped pattern matches
    v = segs(pattern(5, 100))
    assert t.write(["n1/a", "n1/b", "n2/a"], [v, v, v]) == [True] * 3
    assert other.write(["n1/a"], [v]) == [True]
    t.delete(["n1/a", "missing"])
    assert t.exists(["n1/a", "n1/b"]) == [None, 100]
    t.clear("n1/")
    assert t.exists(["n1/b", "n2/a"]) == [None, 100]
    t.clear("")
    assert t.exists(["n2/a"]) == [None]
    assert other.exists(["n1/a"]) == [100]


def test_empty_batches_and_health(make_transport: Make) -> None:
    t = make_transport()
    assert t.exists([]) == [] and t.read([], []) == [] and t.write([], []) == []
    assert t.health() is True


@given(st.lists(st.integers(0, 1 << 24), max_size=60), st.integers(1, 9))
def test_batches_split_into_contiguous_parts_of_about_equal_bytes(sizes: list[int], k: int) -> None:
    # the rule: index i goes to part acc * k // total (acc: the bytes before it), the last at most
    total = max(sum(sizes), 1)
    rule: list[list[int]] = [[] for _ in range(k)]
    for i in range(len(sizes)):
        rule[min(k - 1, sum(sizes[:i]) * k // total)].append(i)
    assert split_parts(sizes, k) == [p for p in rule if p]


@pytest.mark.parametrize("native", [True, False], ids=["compiled-reader", "python-reader"])
def test_both_readers_serve_the_transport(
    make_transport: Make, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """The compiled reader is optional: with it switched off (as in a build without a
    compiler) a batch over several connections reads the same bytes, misses included."""
    from hicache_backend_redis import native as compiled

    if native and compiled._bulkread is None:
        pytest.skip("the compiled reader is not built")
    monkeypatch.setattr(compiled, "NATIVE", native)
    t = make_transport(key_prefix=f"t:{request.node.name}:", parallel_connections=3)
    pages = [pattern(50 + i, (1 << 20) + i) for i in range(8)]  # 8 MiB: split over 3 connections
    keys = [f"r{i}" for i in range(8)]
    assert t.write(keys[:6], [segs(p, 3) for p in pages[:6]]) == [True] * 6
    out = [np.zeros_like(p) for p in pages]
    assert t.read(keys, [segs(o, 2) for o in out]) == [True] * 6 + [False] * 2
    assert all(np.array_equal(out[i], pages[i]) for i in range(6))
    assert not out[6].any() and not out[7].any()
