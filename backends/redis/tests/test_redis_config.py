"""Configuration and security: bad settings fail at construction naming the key; secrets
never appear in reprs, errors or logs; ACL users restricted to the key prefix."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest
from _redis_servers import RedisServer, call
from hicache_backend_redis import RedisConfig, RedisTransport, redact_url

from hicache_sdk import ConfigError, HiCacheError

PW = "Sup3r-s3cret-pw"
USER_PW = "us3r-s3cret-pw"


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """A server with a default-user password, an ACL user ``pages`` limited to ``pfx:*``
    and the commands the backend uses, and a user ``nobody`` with rights elsewhere only."""
    srv = RedisServer(extra=["--requirepass", PW])
    srv.start()
    try:
        rights = ["+strlen", "+mget", "+set", "+setnx", "+unlink", "+scan", "+ping"]
        pages = ["ACL", "SETUSER", "pages", "on", ">" + USER_PW, "~pfx:*", "resetchannels", *rights]
        assert call(srv.port, *pages, password=PW) == b"OK"
        nobody = ["ACL", "SETUSER", "nobody", "on", ">" + USER_PW, "~other:*", "+@all"]
        assert call(srv.port, *nobody, password=PW) == b"OK"
        yield srv
    finally:
        srv.close()


def _pw_free(text: str) -> None:
    assert PW not in text and USER_PW not in text


@pytest.mark.parametrize(
    ("kw", "names"),
    [
        ({"url": "http://127.0.0.1:1/0"}, "url"),
        ({"url": "redis://127.0.0.1:notaport/0"}, "url"),
        ({"url": "redis://127.0.0.1:1/zero"}, "url"),
        ({"url": "unix://"}, "url"),
        ({"url": "rediss://127.0.0.1:1/0"}, "tls_ca_file"),
        ({"url": "redis://127.0.0.1:1/0", "tls_ca_file": "/x"}, "tls_ca_file"),
        (
            {"url": "redis://127.0.0.1:1/0?socket_timeout=1"},
            "url: query parameter 'socket_timeout'.*socket_timeout_s",
        ),
        (
            {"url": "redis://127.0.0.1:1/0?pasword=x"},
            "url: query parameter 'pasword'.*db, username, password",
        ),
        ({"url": "redis://127.0.0.1:1/0?db=x"}, "url"),
        ({"url": "redis+sentinel://127.0.0.1:1/svc?password=x"}, "url"),
        ({"key_prefix": "p"}, "key_prefix: must be empty or end with ':'.*'p:'"),
        ({"key_prefix": "p:x"}, "key_prefix"),
        ({"cluster": True}, "cluster / startup_nodes: RedisTransport talks to one server"),
        ({"startup_nodes": ("127.0.0.1:7001",)}, "cluster / startup_nodes"),
    ],
)
def test_bad_settings_fail_at_construction(kw: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        RedisTransport(RedisConfig(**kw))


def test_bad_numbers_and_unknown_keys_name_the_key() -> None:
    with pytest.raises(ConfigError, match="pool_size"):
        RedisConfig.from_mapping({"pool_size": 0}, environ={})
    with pytest.raises(ConfigError, match=r"key_prefx.*key_prefix"):
        RedisConfig.from_mapping({"key_prefx": "a"}, environ={})
    cfg = RedisConfig.from_mapping({}, environ={"HICACHE_REDIS_PASSWORD": PW, "HICACHE_REDIS_DB": "3"})
    assert cfg.password == PW and cfg.db == 3


def test_secrets_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://pages:{PW}@127.0.0.1:1/0"
    assert redact_url(url) == "redis://***@127.0.0.1:1/0"
    caplog.set_level(logging.DEBUG)
    cfg = RedisConfig(url=url, password=USER_PW, connect_timeout_s=0.2)
    t = RedisTransport(cfg)  # unreachable: logged, not raised
    for text in (repr(cfg), str(cfg), repr(t), repr(t.endpoint), str(cfg.redacted()), caplog.text):
        _pw_free(text)
    t.close()


def test_wrong_password_is_a_config_error_without_the_password(acl_server: RedisServer) -> None:
    with pytest.raises(ConfigError, match="password") as ei:
        RedisTransport(RedisConfig(url=acl_server.url, password="wrong-" + PW))
    _pw_free(str(ei.value))
    with pytest.raises(ConfigError, match="username / password") as ei:
        RedisTransport(RedisConfig(url=f"redis://pages:bad{USER_PW}@127.0.0.1:{acl_server.port}/0"))
    _pw_free(str(ei.value))
    with pytest.raises(HiCacheError, match="password"):
        RedisTransport(RedisConfig(url=acl_server.url))  # NOAUTH: no password given


def test_acl_user_restricted_to_the_prefix_works(acl_server: RedisServer) -> None:
    t = RedisTransport(RedisConfig(url=acl_server.url, username="pages", password=USER_PW, key_prefix="pfx:"))
    try:
        a = np.arange(1000, dtype=np.uint8)
        assert t.write(["k"], [[(int(a.ctypes.data), a.nbytes)]]) == [True]
        b = np.zeros_like(a)
        assert t.read(["k", "m"], [[(int(b.ctypes.data), b.nbytes)], [(int(b.ctypes.data), 1)]]) == [
            True,
            False,
        ]
        assert np.array_equal(a, b)
        assert t.exists(["k", "m"]) == [1000, None]
        t.clear("")
        assert t.exists(["k"]) == [None]
    finally:
        t.close()


def test_acl_user_without_rights_is_a_clear_error(acl_server: RedisServer) -> None:
    with pytest.raises(ConfigError, match=r"username.*key_prefix 'pfx:'"):
        RedisTransport(
            RedisConfig(url=acl_server.url, username="nobody", password=USER_PW, key_prefix="pfx:")
        )


def test_a_password_in_the_url_query_is_honoured_as_redis_py_does(
    acl_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``?password=`` (and ``?username=``) are credentials, as redis-py reads them; the
    ``password`` setting wins over them; none of them is ever shown."""
    caplog.set_level(logging.DEBUG)
    base = f"redis://127.0.0.1:{acl_server.port}/0"
    a = np.arange(100, dtype=np.uint8)
    seg = [(int(a.ctypes.data), a.nbytes)]
    for cfg in (
        RedisConfig(url=f"{base}?password={PW}"),
        RedisConfig(url=f"{base}?username=pages&password={USER_PW}", key_prefix="pfx:"),
        RedisConfig(url=f"{base}?password=wrong-{PW}", password=PW),
    ):
        t = RedisTransport(cfg)
        try:
            assert t.write(["q"], [seg]) == [True]
            assert t.exists(["q", "none"]) == [100, None]
            for text in (repr(cfg), str(cfg), repr(t), repr(t.endpoint), str(cfg.redacted())):
                _pw_free(text)
        finally:
            t.close()
    with pytest.raises(ConfigError, match=r"^password: .*WRONGPASS") as ei:
        RedisTransport(RedisConfig(url=f"{base}?password=wrong-{PW}"))
    _pw_free(str(ei.value))
    _pw_free(caplog.text)


def test_a_cluster_node_used_as_a_single_server_is_named(tmp_path: object) -> None:
    """A node of a Redis Cluster under ``cluster: false`` is a ConfigError naming
    ``cluster`` (its pages would be refused with MOVED one slot at a time)."""
    from _redis_servers import RedisClusterServers

    c = RedisClusterServers(masters=3)
    c.start()
    try:
        for prefix in ("a:", "b:", "c:", "d:"):  # whichever node owns the probe key
            with pytest.raises(ConfigError, match=r"^cluster: .* set cluster: true"):
                RedisTransport(RedisConfig(url=c.url, key_prefix=prefix))
    finally:
        c.close()
