"""The conformance suite on the s3 backend against a real ``moto_server`` started for this
module: once under the default key scheme and once under ``sglang-mooncake`` (each test
namespace gets a private prefix there, since that scheme has no namespace). Out-of-band
access (``raw_pages``) goes through a plain boto3 client. L4 hooks stop and restart the
server by PID on the same port; the restart recreates the bucket, as an operator would."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hicache_backend_s3 import S3Storage
from hicache_conformance import BackendSuite

sys.path.insert(0, os.path.dirname(__file__))
from _proxy import LatencyProxy
from _server import CREDS, MotoServer

BUCKET = "conformance"
_SERVER = MotoServer()


@pytest.fixture(scope="module", autouse=True)
def _moto() -> Iterator[MotoServer]:
    _SERVER.start()
    try:
        _SERVER.make_bucket(BUCKET)
        yield _SERVER
    finally:
        _SERVER.stop()


_CFG = {
    "bucket": BUCKET,
    "endpoint_url": _SERVER.url,
    "access_key_id": CREDS["aws_access_key_id"],
    "secret_access_key": CREDS["aws_secret_access_key"],
    "prefix": "conf/",
    # moto answers HEADs more slowly as the shared bucket fills up over the module: on this
    # 2-core machine a 133-page sglang-mooncake existence query (266 HEADs, 16 in flight)
    # took 3.97 s after the class's other tests, against the backend's 2 s default. The
    # suite checks semantics here; L4 still bounds every call by call_deadline_s (10 s).
    "exists_timeout_s": 6.0,
}


class S3RawObjects:
    """Objects by physical name (``prefix + name``) through a plain boto3 client."""

    def _tp(self, backend: Any) -> Any:
        return backend.raw_transport

    def names(self, backend: Any) -> list[str]:
        t = self._tp(backend)
        out: list[str] = []
        for page in (
            _SERVER.client().get_paginator("list_objects_v2").paginate(Bucket=t.bucket, Prefix=t.prefix)
        ):
            out += [o["Key"][len(t.prefix) :] for o in page.get("Contents", ())]
        return [n for n in out if not n.startswith(".hicache-probe")]

    def get(self, backend: Any, name: str) -> bytes | None:
        t = self._tp(backend)
        try:
            return bytes(_SERVER.client().get_object(Bucket=t.bucket, Key=t.prefix + name)["Body"].read())
        except Exception:
            return None

    def put(self, backend: Any, name: str, data: bytes) -> None:
        t = self._tp(backend)
        _SERVER.client().put_object(Bucket=t.bucket, Key=t.prefix + name, Body=data)

    def delete(self, backend: Any, name: str) -> None:
        t = self._tp(backend)
        _SERVER.client().delete_object(Bucket=t.bucket, Key=t.prefix + name)


class _Hooks:
    def stop(self) -> None:
        _SERVER.stop()

    def start(self) -> None:
        _SERVER.start()
        _SERVER.make_bucket(BUCKET)


class TestS3Backend(BackendSuite):
    backend = S3Storage
    config = _CFG
    # moto_server answers each request in Python: 15 examples of the stateful test here (30
    # on the other backends) keep its time near theirs
    stateful_examples = 15
    declared_capabilities = S3Storage.capabilities.__class__(
        **{**S3Storage.capabilities.to_dict(), "fault_injection": True}
    )

    @pytest.fixture
    def raw_pages(self) -> S3RawObjects:
        return S3RawObjects()

    @pytest.fixture
    def fault_hooks(self) -> _Hooks:
        return _Hooks()


class TestS3BackendSGLangMooncake(TestS3Backend):
    transport_tests = False  # the base class runs them on the same transport
    # L3 (concurrency) and L4 (faults) exercise the transport and the resilience layer, not
    # the names: the base class runs them on the same store
    levels = ("L0", "L1", "L2", "stateful")
    stateful_examples = 5  # the base class runs the full stateful test on the same store
    # SGLang's Mooncake names store K and V apart: a 128-page batch is 256 PUTs, which moto
    # can take longer than the 5 s default to answer while the test workers load both cores
    # (this class runs no L4 test, where calls are bounded by call_deadline_s)
    config = {**_CFG, "key_scheme": "sglang-mooncake", "transfer_timeout_s": 20.0}
    waivers = {
        "test_transport_delete_makes_a_miss": (
            "under an sglang-* scheme the S3 transport deletes only names S3Storage.batch_delete "
            "asked for (S3Transport.deletes_requested): a shared bucket may hold another "
            "deployment's objects under SGLang's names"
        )
    }

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        return {"prefix": f"conf/{namespace}/"}


#: Tests of the proxied class: only the L4 ones (the rest already ran directly above).
PROXIED_TESTS = ("test_calls_bounded_while_service_slow", "test_calls_bounded_while_service_down")
_PROXY: list[LatencyProxy] = []


@pytest.fixture
def _proxy() -> Iterator[LatencyProxy]:
    p = LatencyProxy(_SERVER.port)
    _PROXY.append(p)
    try:
        yield p
    finally:
        _PROXY.remove(p)
        p.close()


class _ProxyHooks(_Hooks):
    def __init__(self, proxy: LatencyProxy) -> None:
        self.proxy = proxy

    def add_delay(self, seconds: float) -> None:
        self.proxy.delay_s = seconds

    def clear_delay(self) -> None:
        self.proxy.delay_s = 0.0


class TestS3BackendThroughProxy(TestS3Backend):
    """L4 through a loopback proxy that adds latency (``add_delay``); the other tests of
    this class are deselected by ``conftest.py``."""

    transport_tests = False  # the base class runs them on the same transport

    @pytest.fixture
    def fault_hooks(self, _proxy: LatencyProxy) -> _ProxyHooks:
        return _ProxyHooks(_proxy)

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        return {"namespace": namespace, "endpoint_url": _PROXY[-1].url}
