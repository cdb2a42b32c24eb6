"""``hicache check redis`` certifies the backend against a real ``redis-server``, standalone
and a 3-master Cluster, run as docs/backends/redis.md tells a user to: a subprocess, the
default profile and matrix, the JSON report read (not only the exit code)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _redis_servers import RedisClusterServers, RedisServer
from hicache_conformance.run import run_check

#: The levels the command runs here: all but ``stateful``, whose one test (30 hypothesis
#: examples of calls against the reference model) the backend's ``BackendSuite`` class runs
#: on the same kind of server; the two routes collect the same tests
#: (``conformance/tests/test_routes.py``).
LEVELS = ("--level", "L0,L1,L2,L3,L4")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    c = RedisClusterServers()
    c.start()
    try:
        yield c
    finally:
        c.close()


def _certified(res: Any) -> None:
    assert res.ok, (res.failures, res.output[-3000:])
    assert res.summary_line == "redis: PASS (profile strict)"
    assert res.report["profile"] == "strict"
    totals = res.totals
    assert totals["failed"] == 0 and totals["passed"] >= 69, totals
    assert res.report["levels_not_selected"] == ["stateful"], res.report["levels_not_selected"]
    skipped = res.outcomes("skipped")
    # fault injection (3 L4 tests: no hooks from the command line), capacity (Redis's own
    # maxmemory, not a bound of ours), the SGLang naming vectors (the default scheme runs), and
    # ranges of many objects in one call (not offered: one request per object instead)
    assert len(skipped) == 8, skipped
    assert all(
        r.startswith("Skipped: backend does not declare")
        or "default key scheme" in r
        or "does not offer RangedReads (ranges of many objects)" in r
        for r in skipped.values()
    ), skipped
    assert res.report["cleanup"]["status"] == "nothing left", res.report["cleanup"]
    verified = res.report["capabilities"]["verified"]
    for cap in ("persistent", "shared_across_processes", "delete", "zero_copy", "health"):
        assert verified[cap] == "verified", (cap, verified)


def test_redis_standalone_certifies_in_its_default_profile(redis_server: RedisServer) -> None:
    _certified(run_check("redis", {"url": redis_server.url}, *LEVELS))


def test_redis_cluster_certifies_in_its_default_profile(cluster: RedisClusterServers) -> None:
    _certified(run_check("redis", {"url": cluster.url, "cluster": True}, *LEVELS))


def test_a_cluster_node_without_cluster_true_is_refused_in_one_line(cluster: RedisClusterServers) -> None:
    res = run_check("redis", {"url": cluster.url})
    assert res.returncode == 2, res.output[-2000:]
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "set cluster: true" in lines[0], res.output
