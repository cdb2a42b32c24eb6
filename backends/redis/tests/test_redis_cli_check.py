"""``hicache check redis`` certifies the backend against a real ``redis-server``, standalone
and a 3-master Cluster, run as docs/backends/redis.md tells a user to: a subprocess, the
default profile (levels L0 to L2 on the minimal matrix, see ``LEVELS``), the JSON report read (not only the exit code)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _redis_servers import RedisClusterServers, RedisServer
from hicache_conformance.run import run_check

#: What the command runs here: L0 to L2 on the minimal host-pool matrix. The backend's
#: ``BackendSuite`` classes run every level, L3 (concurrency), L4 (faults) and stateful
#: included, on the pairwise matrix against the same kind of server, and the two routes
#: collect the same tests and give them the same outcomes (``conformance/tests/test_routes.py``).
LEVELS = ("--level", "L0,L1,L2", "--matrix", "minimal")


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
    assert totals["failed"] == 0 and totals["passed"] >= 60, totals
    assert res.report["levels_not_selected"] == ["L3-concurrency", "L4-faults", "stateful"], res.report[
        "levels_not_selected"
    ]
    skipped = res.outcomes("skipped")
    # capacity (Redis's own
    # maxmemory, not a bound of ours), the SGLang naming vectors (the default scheme runs), and
    # ranges of many objects in one call (not offered: one request per object instead)
    assert len(skipped) == 5, skipped
    assert all(
        r.startswith("Skipped: backend does not declare")
        or "default key scheme" in r
        or "does not offer RangedReads (ranges of many objects)" in r
        for r in skipped.values()
    ), skipped
    assert res.report["cleanup"]["status"] == "nothing left", res.report["cleanup"]
    verified = res.report["capabilities"]["verified"]
    # shared_across_processes: its test is L3 (not selected here)
    assert verified["shared_across_processes"] == "untested", verified
    for cap in ("persistent", "delete", "zero_copy", "health"):
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
