"""Fixtures for the s3 backend tests: one real ``moto_server`` per test session."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _server import CREDS, MotoServer


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    srv = MotoServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def bucket(moto: MotoServer) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(name)
    return name


@pytest.fixture
def s3cfg(moto: MotoServer, bucket: str) -> dict[str, object]:
    return {
        "bucket": bucket,
        "endpoint_url": moto.url,
        "access_key_id": CREDS["aws_access_key_id"],
        "secret_access_key": CREDS["aws_secret_access_key"],
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the L4 tests of the proxied conformance class (see test_s3_conformance.py)."""
    from test_s3_conformance import PROXIED_TESTS

    keep, drop = [], []
    for item in items:
        cls = getattr(item, "cls", None)
        if cls is not None and cls.__name__ == "TestS3BackendThroughProxy":
            (keep if item.name.split("[")[0] in PROXIED_TESTS else drop).append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
