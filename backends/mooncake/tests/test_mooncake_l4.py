"""L4 of the conformance suite with a real master kill and restart, on a cluster of its
own (the session cluster's data must survive for the other tests)."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeStorage
from hicache_conformance.suite.l4_faults import FaultTests

_L4: list[MooncakeCluster] = []


class FaultyMooncakeStorage(MooncakeStorage):
    """The backend, declaring that this test module can stop and restart its master."""

    capabilities = dataclasses.replace(MooncakeStorage.capabilities, fault_injection=True)


class MasterHooks:
    """``stop()`` SIGKILLs the master; ``start()`` restarts it on the same ports and waits
    for the holder process to re-mount its segment. ``add_delay(s)`` freezes the master
    (SIGSTOP) for ``s`` seconds: every request to it hangs, as to an overloaded master;
    ``clear_delay()`` thaws it (SIGCONT) at once and waits until it serves again."""

    def __init__(self, cluster: MooncakeCluster) -> None:
        self.cluster = cluster
        self._thaw: threading.Timer | None = None

    def _signal(self, sig: int) -> None:
        m = self.cluster.master
        if m is not None and m.poll() is None:
            os.kill(m.pid, sig)

    def add_delay(self, seconds: float) -> None:
        self._signal(signal.SIGSTOP)
        self._thaw = threading.Timer(seconds, self._signal, args=(signal.SIGCONT,))
        self._thaw.daemon = True
        self._thaw.start()

    def clear_delay(self) -> None:
        if self._thaw is not None:
            self._thaw.cancel()
            self._thaw = None
        self._signal(signal.SIGCONT)
        deadline = time.monotonic() + 30
        while self.cluster.clients() < 1 and time.monotonic() < deadline:
            time.sleep(0.2)

    def stop(self) -> None:
        self.cluster.stop_master()

    def start(self) -> None:
        self.cluster.start_master()
        deadline = time.monotonic() + 30
        while self.cluster.clients() < 1 and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture(scope="module")
def l4_cluster() -> Iterator[MooncakeCluster]:
    c = MooncakeCluster(holder_bytes=64 << 20)
    try:
        c.start()
        yield c
    finally:
        c.stop()


class TestMooncakeMasterFaults(FaultTests):
    backend = FaultyMooncakeStorage
    config: dict[str, Any] = {}

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _mooncake_cluster(cls, l4_cluster: MooncakeCluster) -> Iterator[None]:
        _L4[:] = [l4_cluster]
        yield

    @pytest.fixture
    def fault_hooks(self) -> MasterHooks:
        return MasterHooks(_L4[0])

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        return {**_L4[0].config(), "namespace": namespace}
