"""The conformance suite on the redis backend over a 3-master Redis Cluster started here
(default key scheme, pairwise matrix). L4 through the suite's hooks kills every master and
restarts them (they rejoin with their slots, empty); one killed master among live ones is
``test_redis_cluster.py``'s test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from _redis_servers import RedisClusterServers
from hicache_backend_redis import RedisStorage
from hicache_conformance import BackendSuite

_CLUSTER = RedisClusterServers()


@pytest.fixture(scope="module", autouse=True)
def _cluster_for_conformance() -> Iterator[None]:
    _CLUSTER.start()
    try:
        yield
    finally:
        _CLUSTER.close()


class ClusterRawObjects:
    """Objects as keys ``key_prefix + name``, read out of band with redis-py's cluster client."""

    def _client(self) -> Any:
        from redis.cluster import ClusterNode, RedisCluster

        return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", _CLUSTER.nodes[0].port)])

    def names(self, backend: Any) -> list[str]:
        p = str(backend.raw_transport.config.key_prefix)
        c = self._client()
        try:
            return sorted({k.decode()[len(p) :] for k in c.scan_iter(match=p + "*", count=1000)})
        finally:
            c.close()

    def get(self, backend: Any, name: str) -> bytes | None:
        c = self._client()
        try:
            v = c.get(str(backend.raw_transport.config.key_prefix) + name)
            return v if isinstance(v, bytes) else None
        finally:
            c.close()

    def put(self, backend: Any, name: str, data: bytes) -> None:
        c = self._client()
        try:
            c.set(str(backend.raw_transport.config.key_prefix) + name, data)
        finally:
            c.close()

    def delete(self, backend: Any, name: str) -> None:
        c = self._client()
        try:
            c.delete(str(backend.raw_transport.config.key_prefix) + name)
        finally:
            c.close()


class ClusterFaults:
    """``stop`` kills every master (SIGKILL); ``start`` restarts them and waits for
    ``cluster_state:ok``."""

    def stop(self) -> None:
        for n in _CLUSTER.nodes:
            n.stop()

    def start(self) -> None:
        for n in _CLUSTER.nodes:
            n.start()
        _CLUSTER.wait_ok()


class TestRedisClusterBackend(BackendSuite):
    backend = RedisStorage
    declared_capabilities = dataclasses.replace(RedisStorage.capabilities, fault_injection=True)
    call_deadline_s = 3.0
    recovery_s = 10.0
    config = {
        "url": _CLUSTER.url,
        "cluster": True,
        "key_prefix": "conf:",
        "transfer_timeout_s": 2.0,
        "socket_timeout_s": 2.0,
        "connect_timeout_s": 1.0,
    }

    @pytest.fixture
    def fault_hooks(self) -> ClusterFaults:
        return ClusterFaults()

    @pytest.fixture
    def raw_pages(self) -> ClusterRawObjects:
        return ClusterRawObjects()
