"""``clear()`` removes exactly this instance's pages, on a standalone server and on a
3-master Cluster: never a neighbouring model's (``m`` / ``m_x`` / ``m/x`` / the empty model),
another key prefix's (``p:`` / ``p2:``, and ``p[1]:`` whose glob characters would match
``p1:`` unescaped), nor keys under the same prefix that the key scheme did not name."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import torch
from _redis_servers import RedisClusterServers, RedisServer
from hicache_backend_redis import RedisStorage
from redis.cluster import ClusterNode, RedisCluster

from hicache_sdk import ConfigError
from hicache_sdk.errors import ClearRefusedError
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig

#: (key_prefix, model) of neighbours that share one server.
NEIGHBOURS = [
    ("p:", "m"),
    ("p:", "m_x"),
    ("p:", "m/x"),
    ("p:", ""),
    ("p2:", "m"),
    ("p[1]:", "m"),
    ("p1:", "m"),
]
#: Keys under the same prefixes that no key scheme of ours names (another application's).
FOREIGN = [b"p:x", b"p:m", b"p2:x", b"p1:m/x", b"p:m/"]
PAGES = 2


@pytest.fixture(scope="module", params=["standalone", "cluster"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, Any], Any]]:
    """``(config, redis-py client)`` for a standalone server or a 3-master cluster."""
    if request.param == "standalone":
        srv = RedisServer()
        srv.start()
        r: Any = redis.Redis(host="127.0.0.1", port=srv.port)
        try:
            yield {"url": srv.url}, r
        finally:
            r.close()
            srv.close()
    else:
        c = RedisClusterServers()
        c.start()
        r = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", c.nodes[0].port)])
        try:
            yield {"url": c.url, "cluster": True}, r
        finally:
            r.close()
            c.close()


@pytest.fixture(scope="module")
def pool() -> MHAHostPool:
    return MHAHostPool(PAGES * 64, 64, 1, 2, 64, dtype=torch.bfloat16, layout="page_first", pin_memory=False)


def _storage(
    cfg: dict[str, Any], pool: MHAHostPool, key_prefix: str, model: str, **extra: Any
) -> RedisStorage:
    sc = HiCacheStorageConfig(model_name=model, extra_config={**cfg, "key_prefix": key_prefix, **extra})
    s = RedisStorage(sc, {})
    s.register_mem_pool_host(pool)
    return s


KEYS = [hashlib.sha256(f"page{i}".encode()).hexdigest() for i in range(PAGES)]
IDX = torch.arange(PAGES * 64, dtype=torch.int64)


@pytest.mark.parametrize(
    "victim", range(len(NEIGHBOURS)), ids=[f"{p}{m or '<empty>'}" for p, m in NEIGHBOURS]
)
def test_clear_removes_exactly_this_instance_pages(
    server: tuple[dict[str, Any], Any], pool: MHAHostPool, victim: int
) -> None:
    cfg, r = server
    ns = {"namespace": uuid.uuid4().hex[:8]}
    stores = [_storage(cfg, pool, p, m, **ns) for p, m in NEIGHBOURS]
    try:
        for s in stores:
            assert s.batch_set_v1(KEYS, IDX) == [True] * PAGES
        for k in FOREIGN:
            r.set(k, b"foreign")
        assert [s.batch_exists(KEYS) for s in stores] == [PAGES] * len(stores)
        stores[victim].clear()
        assert [s.batch_exists(KEYS) for s in stores] == [
            0 if i == victim else PAGES for i in range(len(stores))
        ]
        assert [r.get(k) for k in FOREIGN] == [b"foreign"] * len(FOREIGN)
    finally:
        for s in stores:
            s.clear()
            s.close()
        for k in FOREIGN:
            r.delete(k)


def test_sglang_schemes_refuse_and_remove_nothing(
    server: tuple[dict[str, Any], Any], pool: MHAHostPool
) -> None:
    cfg, _ = server
    s = _storage(cfg, pool, "sg:", "m", key_scheme="sglang-mooncake")
    other = _storage(cfg, pool, "sg:", "m_x", key_scheme="sglang-mooncake")
    try:
        assert s.batch_set_v1(KEYS, IDX) == [True] * PAGES
        assert other.batch_set_v1(KEYS, IDX) == [True] * PAGES
        with pytest.raises(ClearRefusedError):
            s.clear()
        assert s.batch_exists(KEYS) == PAGES and other.batch_exists(KEYS) == PAGES
    finally:
        for t in (s, other):
            t.raw_transport.clear("")  # this test's own prefix, "sg:"
            t.close()


def test_a_key_prefix_that_another_prefix_starts_with_is_refused() -> None:
    with pytest.raises(ConfigError, match="key_prefix: must be empty or end with ':'"):
        RedisStorage(
            HiCacheStorageConfig(extra_config={"url": "redis://127.0.0.1:1/0", "key_prefix": "p"}), {}
        )
