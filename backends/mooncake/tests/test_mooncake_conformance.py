"""The conformance suite on the Mooncake backend against the session's real cluster
(master + holder process; the backend under test holds no segment, so every read crosses
processes). Once under the default key scheme and once under ``sglang-mooncake``
(SGLang's exact names, isolated per test namespace by ``extra_backend_tag``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _mooncake_raw import MooncakeRawObjects
from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeStorage
from hicache_conformance import BackendSuite

_CLUSTER: list[MooncakeCluster] = []


class _OnSessionCluster:
    """The session's cluster, and a namespace per test (the suite asks for one)."""

    backend = MooncakeStorage
    config: dict[str, Any] = {}

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _mooncake_cluster(cls, cluster: MooncakeCluster) -> Iterator[None]:
        _CLUSTER[:] = [cluster]
        yield

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        return {**_CLUSTER[0].config(), **self.scheme_namespace(namespace)}

    def scheme_namespace(self, namespace: str) -> dict[str, Any]:
        return {"namespace": namespace}


class TestMooncakeBackend(_OnSessionCluster, BackendSuite):
    @pytest.fixture
    def raw_pages(self) -> MooncakeRawObjects:
        """Out of band: a raw Mooncake client of the cluster (its own, not the backend's)
        reading objects by name; the master's ``/get_all_keys`` lists them. (The suite's
        default view goes through the transport, whose ``exists`` cannot tell sizes.)"""
        c = _CLUSTER[0]
        return MooncakeRawObjects(c.raw_client(), c.metrics_port)


class TestMooncakeBackendSGLangMooncake(TestMooncakeBackend):
    """SGLang's names; test namespaces are isolated by ``extra_backend_tag``, which SGLang
    puts in front of every object name, so the raw view's names are relative to it."""

    transport_tests = False  # the base class runs them on the same transport
    # L3 (concurrency) and L4 (faults) exercise the transport and the resilience layer, not
    # the names: the base class runs them on the same store
    levels = ("L0", "L1", "L2", "stateful")
    stateful_examples = 5  # the base class runs the full stateful test on the same store

    config = {"key_scheme": "sglang-mooncake"}

    def scheme_namespace(self, namespace: str) -> dict[str, Any]:
        return {"extra_backend_tag": namespace}
