"""TLS to a private S3-compatible endpoint: a real ``moto_server`` serving HTTPS with a
certificate for 127.0.0.1 signed by a CA made for this module. ``ca_bundle`` with that CA
works; ``verify`` on without it (or with an unrelated CA) constructs, then every call is a
miss counted under reason ``"tls"``; ``verify=False`` works."""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hicache_backend_s3 import S3Config, S3Storage, S3Transport

from hicache_sdk import ConfigError, TransportError

torch = pytest.importorskip("torch")

from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _server import CREDS, MotoServer  # noqa: E402
from _tls import make_certs  # noqa: E402

BUCKET = "tls-bucket"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def tls_moto(certs: dict[str, str]) -> Iterator[MotoServer]:
    srv = MotoServer(tls=(certs["server.pem"], certs["server.key"], certs["ca.pem"]))
    srv.start()
    try:
        srv.make_bucket(BUCKET)
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def tls_cfg(tls_moto: MotoServer) -> dict[str, Any]:
    return {
        "bucket": BUCKET,
        "endpoint_url": tls_moto.url,
        "access_key_id": CREDS["aws_access_key_id"],
        "secret_access_key": CREDS["aws_secret_access_key"],
    }


@pytest.fixture
def make(tls_cfg: dict[str, Any]) -> Iterator[Callable[..., S3Transport]]:
    made: list[S3Transport] = []

    def make(**kw: Any) -> S3Transport:
        t = S3Transport(S3Config.from_mapping({**tls_cfg, **kw}, environ={}))
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def _page(data: bytes) -> tuple[Any, list[tuple[int, int]]]:
    arr = (ctypes.c_char * len(data)).from_buffer_copy(data)
    return arr, [(ctypes.addressof(arr), len(data))]


def _round_trip(t: S3Transport, key: str) -> bytes:
    src, segs = _page(key.encode() * 100)
    assert t.write([key], [segs]) == [True]
    assert t.exists([key]) == [len(src)]
    dst, out = _page(bytes(len(src)))
    assert t.read([key], [out]) == [True]
    return bytes(dst.raw)


def test_ca_bundle_verifies_the_private_endpoint(
    make: Callable[..., S3Transport], certs: dict[str, str]
) -> None:
    t = make(ca_bundle=certs["ca.pem"])
    assert t.cfg.endpoint_url is not None and t.cfg.endpoint_url.startswith("https://")
    assert _round_trip(t, "with-ca") == b"with-ca" * 100
    assert t.health() is True


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_verify_off_skips_verification(make: Callable[..., S3Transport]) -> None:
    t = make(verify=False)
    assert _round_trip(t, "no-verify") == b"no-verify" * 100


@pytest.mark.parametrize("ca", [None, "other-ca.pem"], ids=["default-cas", "unrelated-ca"])
def test_unverifiable_certificate_is_a_tls_miss(
    make: Callable[..., S3Transport], certs: dict[str, str], ca: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hicache_backend_s3")
    t = make(**({"ca_bundle": certs[ca]} if ca else {}))  # constructs: not a crash
    assert "TLS verification" in caplog.text and "ca_bundle" in caplog.text
    _, segs = _page(b"x" * 64)
    for call in (
        lambda: t.exists(["k1", "k2"]),
        lambda: t.read(["k1"], [segs]),
        lambda: t.write(["k1", "k2"], [segs, segs]),
    ):
        with pytest.raises(TransportError) as ei:
            call()
        assert ei.value.reason == "tls"
        assert "ca_bundle" in str(ei.value)
    assert t._conditional is None  # a TLS failure decides nothing about conditional PUT
    with pytest.raises(TransportError) as ei:
        t.health()  # raises, so that the breaker's probes count the reason
    assert ei.value.reason == "tls"


def test_unverifiable_certificate_through_the_adapter(tls_cfg: dict[str, Any]) -> None:
    """batch_* are misses / False and the reason is counted as ``tls`` (the start probe
    opens the breaker; calls are then refused as ``breaker_open``)."""
    p = MHAHostPool(16, 4, 2, 2, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
    s = S3Storage(HiCacheStorageConfig(model_name="org/model", extra_config={**tls_cfg}), {})
    try:
        s.register_mem_pool_host(p)
        keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(2)]
        idx = torch.arange(0, 8, dtype=torch.int64)
        assert s.batch_set_v1(keys, idx) == [False, False]
        assert s.batch_exists(keys) == 0
        assert s.batch_get_v1(keys, idx) == [False, False]
        errors = s.metrics.errors()
        assert errors.get("tls", 0) >= 1, errors
        assert set(errors) <= {"tls", "breaker_open"}, errors
    finally:
        s.close()


def test_ca_bundle_must_be_a_file_and_not_with_verify_off(tmp_path: Any) -> None:
    base = {"bucket": BUCKET}
    with pytest.raises(ConfigError, match="ca_bundle"):
        S3Config.from_mapping({**base, "ca_bundle": str(tmp_path / "missing.pem")}, environ={})
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(ConfigError, match="verify"):
        S3Config.from_mapping({**base, "ca_bundle": str(ca), "verify": False}, environ={})
