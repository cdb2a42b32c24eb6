"""Redis Cluster over TLS with ACL users: 3 TLS-only masters (client port and cluster bus),
a default-user password, and ACL users made at start (killed by PID). Round trips across
every master, and misconfiguration as a ConfigError naming the key, secrets never shown."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
from _redis_servers import RedisClusterServers, TlsFiles, make_tls_files
from hicache_backend_redis import RedisConfig
from hicache_backend_redis.cluster_transport import RedisClusterTransport
from redis.crc import key_slot

from hicache_sdk import ConfigError

if shutil.which("openssl") is None:  # pragma: no cover - depends on the machine
    pytest.skip("openssl not installed", allow_module_level=True)

PW = "cl-Sup3r-s3cret-pw"
USER_PW = "cl-us3r-s3cret-pw"
RIGHTS = [
    "+strlen",
    "+mget",
    "+set",
    "+setnx",
    "+unlink",
    "+scan",
    "+ping",
    "+asking",
    "+command",
    "+cluster|slots",
]


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisClusterServers, TlsFiles]]:
    files = make_tls_files(tmp_path_factory.mktemp("cluster-tls"))
    users = [
        ["--user", "pages", "on", ">" + USER_PW, "~pfx:*", "resetchannels", *RIGHTS],
        # may read and write elsewhere only
        ["--user", "nobody", "on", ">" + USER_PW, "~other:*", "resetchannels", *RIGHTS],
        # every key, but not the slot map
        ["--user", "noslots", "on", ">" + USER_PW, "~pfx:*", "resetchannels", *RIGHTS[:-1]],
    ]
    c = RedisClusterServers(
        tls=files,
        extra=["--requirepass", PW, *(a for u in users for a in u)],
        cli_args=["-a", PW, "--no-auth-warning"],
    )
    c.start()
    try:
        yield c, files
    finally:
        c.close()


def _cfg(c: RedisClusterServers, files: TlsFiles, **kw: object) -> RedisConfig:
    base: dict[str, object] = {
        "url": c.url,
        "cluster": True,
        "tls_ca_file": str(files.ca),
        "key_prefix": "pfx:",
        "connect_timeout_s": 1.0,
        "socket_timeout_s": 3.0,
    }
    return RedisConfig(**{**base, **kw})  # type: ignore[arg-type]


def _segs(a: np.ndarray) -> list[tuple[int, int]]:
    return [(int(a.ctypes.data), a.nbytes)]


def _no_secret(text: str) -> None:
    assert PW not in text and USER_PW not in text


def test_tls_acl_cluster_round_trip(
    tls_cluster: tuple[RedisClusterServers, TlsFiles], caplog: pytest.LogCaptureFixture
) -> None:
    c, files = tls_cluster
    assert c.url.startswith("rediss://")
    caplog.set_level(logging.DEBUG)
    cfg = _cfg(c, files, username="pages", password=USER_PW)
    t = RedisClusterTransport(cfg)
    try:
        keys = [f"k{i}" for i in range(24)]
        assert len({key_slot(f"pfx:{k}".encode()) for k in keys}) > 20
        pages = [np.random.default_rng(i).integers(0, 256, 70_000 + i, dtype=np.uint8) for i in range(24)]
        assert t.write(keys, [_segs(p) for p in pages]) == [True] * 24
        assert t.exists([*keys, "none"]) == [70_000 + i for i in range(24)] + [None]
        out = [np.zeros_like(p) for p in pages]
        assert t.read([*keys, "none"], [*(_segs(o) for o in out), _segs(out[0][:10])]) == [True] * 24 + [
            False
        ]
        assert all(np.array_equal(a, b) for a, b in zip(out, pages))
        # every master holds some of them, reached over TLS as user "pages"
        counts = [int(c.cli(n, "dbsize").strip()) for n in c.nodes]
        assert all(n > 0 for n in counts) and sum(counts) == 24
        t.clear("")
        assert t.exists(keys) == [None] * 24
        for text in (repr(cfg), str(cfg.redacted()), repr(t), repr(t.endpoint), caplog.text):
            _no_secret(text)
    finally:
        t.close()


def test_credentials_in_the_url(tls_cluster: tuple[RedisClusterServers, TlsFiles]) -> None:
    c, files = tls_cluster
    url = c.url.replace("rediss://", f"rediss://pages:{USER_PW}@")
    t = RedisClusterTransport(_cfg(c, files, url=url))
    try:
        a = np.arange(3000, dtype=np.uint8)
        assert t.write(["u"], [_segs(a)]) == [True]
        assert t.exists(["u"]) == [3000]
        _no_secret(repr(t))
    finally:
        t.close()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"username": "pages", "password": "wrong-" + USER_PW}, r"^username / password: .*WRONGPASS"),
        ({"password": "wrong-" + PW}, r"^password: .*WRONGPASS"),
        ({}, r"^password: .*requires one"),
        ({"username": "nobody", "password": USER_PW}, r"^username: .*key_prefix 'pfx:'"),
        ({"username": "noslots", "password": USER_PW}, r"^username: .*CLUSTER SLOTS"),
    ],
)
def test_misconfiguration_is_a_config_error_naming_the_key(
    tls_cluster: tuple[RedisClusterServers, TlsFiles], kw: dict[str, str], match: str
) -> None:
    c, files = tls_cluster
    with pytest.raises(ConfigError, match=match) as ei:
        RedisClusterTransport(_cfg(c, files, **kw))
    _no_secret(str(ei.value))


def test_untrusted_certificate_is_a_config_error(tls_cluster: tuple[RedisClusterServers, TlsFiles]) -> None:
    c, files = tls_cluster
    with pytest.raises(ConfigError, match=r"^tls_ca_file"):
        RedisClusterTransport(
            _cfg(c, files, tls_ca_file=str(files.other_ca), username="pages", password=USER_PW)
        )
