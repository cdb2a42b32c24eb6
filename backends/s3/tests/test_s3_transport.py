"""S3Transport against a real moto_server: order, concurrency, conditional writes,
wrong lengths, bucket checks, clear by prefix, secrets out of logs, a dropping proxy."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hicache_backend_s3 import S3Config, S3Transport

from hicache_sdk import HiCacheError, TransportError

sys.path.insert(0, os.path.dirname(__file__))
from _proxy import LatencyProxy
from _server import MotoServer, free_port

_KEEP: list[Buf] = []


class Buf:
    """Page memory: a ctypes array and its one segment (kept alive for the module, so
    ``Buf(...).segs`` inline never hands out freed memory)."""

    def __init__(self, data: bytes | int) -> None:
        _KEEP.append(self)
        n = data if isinstance(data, int) else len(data)
        self.arr = (ctypes.c_char * n)()
        if not isinstance(data, int):
            ctypes.memmove(self.arr, data, n)
        self.segs = [(ctypes.addressof(self.arr), n)]

    def split(self, at: int) -> list[tuple[int, int]]:
        a, n = self.segs[0]
        return [(a, at), (a + at, n - at)]

    @property
    def bytes(self) -> bytes:
        return bytes(self.arr.raw)


@pytest.fixture
def make(s3cfg: dict[str, object]) -> Iterator[Callable[..., S3Transport]]:
    made: list[S3Transport] = []

    def make(**kw: Any) -> S3Transport:
        t = S3Transport(S3Config.from_mapping({**s3cfg, **kw}, environ={}))
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def payload(i: int, n: int = 4096) -> bytes:
    return bytes([(i * 7 + j) % 251 for j in range(256)]) * (n // 256)


def test_batch_results_in_key_order_multi_segment(make: Callable[..., S3Transport]) -> None:
    t = make(max_concurrency=4)
    keys = [f"k{i}" for i in range(20)]
    src = [Buf(payload(i)) for i in range(20)]
    assert t.write(keys, [b.split(1000) for b in src]) == [True] * 20
    dst = [Buf(4096) for _ in keys]
    assert t.read(keys, [b.split(3000) for b in dst]) == [True] * 20
    assert [b.bytes for b in dst] == [payload(i) for i in range(20)]
    assert t.exists(keys) == [4096] * 20


def test_exists_answers_every_key_past_a_miss(make: Callable[..., S3Transport]) -> None:
    t = make(max_concurrency=1)
    keys = ["a", "b", "gone", "c", "also-gone", "d"]
    assert t.write(["a", "b", "c", "d"], [Buf(b"x" * 10).segs] * 4) == [True] * 4
    # one request at a time: the keys after a miss are still asked (a page's V objects
    # follow all the K objects in one call)
    assert t.exists(keys) == [10, 10, None, 10, None, 10]


def test_create_if_absent_conditional_and_fallback(make: Callable[..., S3Transport]) -> None:
    for mode in ("auto", "off"):
        t = make(conditional_put=mode)
        k = f"page-{mode}"
        assert t.write([k], [Buf(b"first!").segs]) == [True]
        assert t.write([k, k], [Buf(b"second").segs, Buf(b"third!").segs]) == [True, True]
        out = Buf(6)
        assert t.read([k], [out.segs]) == [True]
        assert out.bytes == b"first!"
        assert t._conditional is (mode == "auto")  # moto honours If-None-Match: *


def test_wrong_length_is_a_miss(make: Callable[..., S3Transport]) -> None:
    t = make()
    assert t.write(["w"], [Buf(b"12345").segs]) == [True]
    assert t.read(["w", "absent"], [Buf(6).segs, Buf(5).segs]) == [False, False]
    assert t.exists(["w"]) == [5]


def test_delete_refused_under_sglang_names(make: Callable[..., S3Transport]) -> None:
    mine, theirs = make(), make(key_scheme="sglang-mooncake")
    assert mine.write(["d"], [Buf(b"abc").segs]) == [True]
    theirs.delete(["d"])
    assert mine.exists(["d"]) == [3] and theirs.refused_deletes == 1
    mine.delete(["d"])
    assert mine.exists(["d"]) == [None]
    # names a caller asked for (S3Storage.batch_delete) are deleted, the others refused
    assert mine.write(["d", "e"], [Buf(b"abc").segs] * 2) == [True, True]
    with theirs.deletes_requested(["d"]):
        theirs.delete(["d", "e"])
    assert mine.exists(["d"]) == [None] and mine.exists(["e"]) == [3]
    assert theirs.refused_deletes == 2
    theirs.delete(["e"])  # the window closed
    assert mine.exists(["e"]) == [3] and theirs.refused_deletes == 3


def test_missing_bucket_fails_and_create_is_opt_in(make: Callable[..., S3Transport]) -> None:
    with pytest.raises(HiCacheError, match="does not exist"):
        make(bucket="no-such-bucket-here")
    t = make(bucket="made-on-request", create_bucket=True)
    assert t.write(["x"], [Buf(b"1").segs]) == [True]


def test_rejected_credentials_fail_construction() -> None:
    # moto checks credentials once INITIAL_NO_AUTH_ACTION_COUNT requests have passed (0: at once)
    srv = MotoServer(env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    srv.start()
    try:
        cfg = S3Config.from_mapping(
            {
                "bucket": "abc",
                "endpoint_url": srv.url,
                "access_key_id": "AKIDUNKNOWN",
                "secret_access_key": "nope",
                # a loaded machine's first answer may be slow: a timeout would be a miss, not this
                "read_timeout_s": 10.0,
                "exists_timeout_s": 10.0,
            },
            environ={},
        )
        with pytest.raises(HiCacheError, match="credentials rejected") as ei:
            S3Transport(cfg)
        assert "nope" not in str(ei.value)
    finally:
        srv.stop()


def test_bad_config_names_the_key() -> None:
    from hicache_sdk import ConfigError

    with pytest.raises(ConfigError, match="bucket is required"):
        S3Config.from_mapping({}, environ={})
    with pytest.raises(ConfigError, match="addressing_style"):
        S3Config.from_mapping({"bucket": "abc", "addressing_style": "sideways"}, environ={})


def test_retries_speak_botocores_retry_modes(make: Callable[..., S3Transport]) -> None:
    """``retry_mode`` and ``max_attempts`` go to botocore as they are (its own vocabulary);
    the attempts are cut to the deadline with botocore's own largest back-off."""
    from botocore.retries import standard
    from hicache_backend_s3.config import attempts_within, botocore_backoff_s

    from hicache_sdk import ConfigError

    # the largest back-off is botocore's: its own ExponentialBackoff at the top of its draw
    # (throttling scale), 2**(i-1) s in botocore 1.36+, capped at its maximum
    assert [botocore_backoff_s(i) for i in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert botocore_backoff_s(12) == float(standard.ExponentialBackoff._MAX_BACKOFF)
    # 1.5 s per attempt: two attempts and one back-off fit 5 s (4 s), three do not (7.5 s)
    assert attempts_within(5.0, 1.5, 3) == 2
    assert attempts_within(7.5, 1.5, 3) == 3
    assert attempts_within(0.5, 1.5, 3) == 1  # at least one
    assert attempts_within(0, 1.5, 4) == 4  # no deadline: the whole budget
    t = make(retry_mode="adaptive", max_attempts=4, transfer_timeout_s=0)
    assert t._xfer.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 4}
    t = make(max_attempts=3, transfer_timeout_s=5.0, connect_timeout_s=0.5, read_timeout_s=1.0)
    assert t._xfer.meta.config.retries == {"mode": "standard", "total_max_attempts": 2}
    with pytest.raises(ConfigError, match="retry_mode must be one of standard, adaptive"):
        S3Config.from_mapping({"bucket": "abc", "retry_mode": "legacy"}, environ={})


def test_unreachable_endpoint_constructs_then_fails_batches() -> None:
    cfg = S3Config.from_mapping(
        {
            "bucket": "abc",
            "endpoint_url": f"http://127.0.0.1:{free_port()}",
            "access_key_id": "a",
            "secret_access_key": "b",
        },
        environ={},
    )
    t = S3Transport(cfg)
    url = str(cfg.endpoint_url)
    try:
        # every message says what happened and where (hicache ping shows it)
        for call, what in (
            (lambda: t.exists(["k"]), "HEAD"),
            (lambda: t.read(["k"], [Buf(3).segs]), "GET"),
            (lambda: t.write(["k"], [Buf(3).segs]), "PUT"),
            (t.health, "HeadBucket"),
        ):
            with pytest.raises(TransportError) as ei:
                call()
            assert str(ei.value) == f"S3 {what} failed: connection refused: {url}"
            assert ei.value.reason == "connection"
    finally:
        t.close()


def test_clear_only_prefix_paginated(make: Callable[..., S3Transport], moto: MotoServer, bucket: str) -> None:
    t = make(prefix="mine/")
    S3Transport.page_keys = 3
    try:
        keys = [f"ns/{i}" for i in range(8)] + ["other"]
        assert t.write(keys, [Buf(b"v").segs] * len(keys)) == [True] * len(keys)
        moto.client().put_object(Bucket=bucket, Key="theirs/ns/0", Body=b"z")
        t.clear("ns/")
        assert t.exists(["other"]) == [1]
        assert t.exists(["ns/0"]) == [None]
        left = [o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket)["Contents"]]
        assert sorted(k for k in left if not k.startswith("mine/.hicache")) == ["mine/other", "theirs/ns/0"]
    finally:
        S3Transport.page_keys = 1000


def test_secrets_never_logged(make: Callable[..., S3Transport], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    logging.getLogger("botocore").setLevel(logging.DEBUG)
    t = make(session_token="SESSION-TOKEN-should-not-leak")
    t.write(["s"], [Buf(b"abc").segs])
    t.read(["s"], [Buf(3).segs])
    t.exists(["s"])
    text = caplog.text + repr(t) + repr(t.cfg)
    for secret in ("testing-secret-key", "SESSION-TOKEN-should-not-leak", "Authorization", "Signature="):
        assert secret not in text


def test_dropped_connections_are_misses_then_recover(
    make: Callable[..., S3Transport], moto: MotoServer
) -> None:
    proxy = LatencyProxy(moto.port)
    try:
        t = make(endpoint_url=proxy.url, max_attempts=1)
        assert t.write(["p"], [Buf(b"x" * 100).segs]) == [True]
        proxy.refuse = True
        proxy.drop()
        with pytest.raises(TransportError):
            t.read(["p"], [Buf(100).segs])
        proxy.refuse = False
        out = Buf(100)
        assert t.read(["p"], [out.segs]) == [True]
        assert out.bytes == b"x" * 100
    finally:
        proxy.close()


def test_put_has_no_expect_header_and_copies_no_page(make: Callable[..., S3Transport]) -> None:
    # botocore adds "Expect: 100-continue" to every PUT of a file-like body: one more round
    # trip per page (and a 1 s stall behind a server that never answers 100). The body
    # hands out views of the page memory: neither the SigV4 hash nor the socket copies it.
    import tracemalloc

    size = 4 << 20
    t = make(conditional_put="on")
    sent: list[str | None] = []
    t._xfer.meta.events.register(
        "before-send.s3.PutObject", lambda request, **kw: sent.append(request.headers.get("Expect"))
    )
    one, two = Buf(payload(1, size)), Buf(payload(2, size))
    assert t.write(["warm"], [Buf(16).segs]) == [True]
    tracemalloc.start()
    try:
        assert t.write(["one", "two"], [one.segs, two.split(100_000)]) == [True, True]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sent == [None, None, None]
    assert peak < size // 8, f"a write allocated {peak} bytes for {size}-byte pages"
    for name, src in (("one", one), ("two", two)):
        out = Buf(size)
        assert t.read([name], [out.segs]) == [True] and out.bytes == src.bytes


def test_put_is_retried_after_a_503(make: Callable[..., S3Transport]) -> None:
    # botocore seeks the body back before a retry: the body must be seekable (a bare
    # memoryview fails every retry with UnseekableStreamError). The first attempt is
    # answered 503 SlowDown by a botocore before-send hook; the retry reaches moto.
    from botocore.awsrequest import AWSResponse

    class _Raw:
        def stream(self, **kw: Any) -> Iterator[bytes]:
            yield b"<Error><Code>SlowDown</Code><Message>slow down</Message></Error>"

    t = make(conditional_put="on", max_attempts=2)
    attempts: list[int] = []

    def first_attempt_503(request: Any, **kw: Any) -> AWSResponse | None:
        attempts.append(1)
        return AWSResponse(request.url, 503, {}, _Raw()) if len(attempts) == 1 else None

    t._xfer.meta.events.register("before-send.s3.PutObject", first_attempt_503)
    src = Buf(payload(4, 1 << 16))
    assert t.write(["retried"], [src.segs]) == [True]
    assert len(attempts) == 2
    out = Buf(1 << 16)
    assert t.read(["retried"], [out.segs]) == [True] and out.bytes == src.bytes


def test_read_lands_in_page_memory_with_one_copy(make: Callable[..., S3Transport]) -> None:
    # urllib3's readinto reads a whole bytes object first and copies it: a second copy of
    # the page in Python memory. Ours reads from the socket into the page.
    import tracemalloc

    size = 4 << 20
    t = make(max_concurrency=1)
    assert t.write(["big"], [Buf(payload(3, size)).segs]) == [True]
    out = Buf(size)
    assert t.read(["big"], [Buf(size).segs]) == [True]  # warm: connection, code paths
    tracemalloc.start()
    try:
        assert t.read(["big"], [out.segs]) == [True]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.bytes == payload(3, size)
    assert peak < size // 8, f"a read allocated {peak} bytes for a {size}-byte page"
    # and the connection went back to the pool (one connection for every read so far)
    pools = t._xfer._endpoint.http_session._manager.pools
    keys = list(pools.keys())  # the container refuses plain iteration
    assert [pools[k].num_connections for k in keys] == [1]


def test_every_config_key_reads_its_environment_variable() -> None:
    """Each S3Config field is settable as ``HICACHE_S3_<FIELD>`` (the generated options
    table of docs/backends/s3.md lists them; tests/docs checks that table)."""
    import dataclasses

    values = {
        "bucket": ("other-bucket", "other-bucket"),
        "prefix": ("x/", "x/"),
        "max_concurrency": ("7", 7),
        "connect_timeout_s": ("250ms", 0.25),
        "max_attempts": ("2", 2),
        "retry_mode": ("adaptive", "adaptive"),
        "verify": ("false", False),
        "conditional_put": ("off", "off"),
        "addressing_style": ("path", "path"),
        "exists_timeout_s": ("1.5", 1.5),
    }
    for name, (raw, want) in values.items():
        cfg = S3Config.from_mapping(
            {"bucket": "abc"} if name != "bucket" else {}, environ={f"HICACHE_S3_{name.upper()}": raw}
        )
        assert getattr(cfg, name) == want, name
    names = {f.name for f in dataclasses.fields(S3Config) if f.init}
    assert set(values) <= names


def test_timeouts_keep_the_shared_range_and_units() -> None:
    from hicache_sdk import ConfigError

    with pytest.raises(ConfigError, match="exists_timeout_s"):
        S3Config.from_mapping({"bucket": "abc", "exists_timeout_s": -1}, environ={})
    env = {"HICACHE_S3_EXISTS_TIMEOUT_S": "750ms", "HICACHE_S3_CONNECT_TIMEOUT_S": "250ms"}
    cfg = S3Config.from_mapping({"bucket": "abc"}, environ=env)
    assert (cfg.exists_timeout_s, cfg.connect_timeout_s) == (0.75, 0.25)
    assert S3Config.from_mapping({"bucket": "abc"}, environ={}).exists_timeout_s == 2.0
