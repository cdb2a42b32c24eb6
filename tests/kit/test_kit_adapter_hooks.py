"""The adapter's side of the kit: ``transport_cls`` and derived capabilities, host-memory
registration, and failure reasons reaching ``get_stats``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
import torch

from hicache_sdk.capabilities import ADAPTER, Capabilities
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.hostpool.describe import pool_buffers
from hicache_sdk.paged.adapter import PagedStorage
from hicache_sdk.spec import HiCacheStorageConfig
from hicache_sdk.transport import Segments, Transport


class Recorder(Transport):
    capabilities: ClassVar[Capabilities] = Capabilities(persistent=True, delete=True)

    def __init__(self, config: Any = None) -> None:
        self.events: list[tuple[str, int, int]] = []
        self.closed = False

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        return [None] * len(keys)

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        return [False] * len(keys)

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        return [True] * len(keys)

    def delete(self, keys: Sequence[str]) -> None:
        pass

    def register_memory(self, address: int, nbytes: int) -> None:
        assert not self.closed
        self.events.append(("register", address, nbytes))

    def unregister_memory(self, address: int, nbytes: int) -> None:
        assert not self.closed
        self.events.append(("unregister", address, nbytes))

    def close(self) -> None:
        self.closed = True


class RecorderStorage(PagedStorage):
    transport_cls = Recorder
    backend_name: ClassVar[str] = "recorder"


def test_capabilities_are_the_adapters_plus_the_transports() -> None:
    assert RecorderStorage.capabilities == Capabilities(
        zero_copy=True, hybrid_pools=True, mla=True, persistent=True, delete=True
    )
    assert Capabilities() == Capabilities(**dict.fromkeys(Capabilities.names(), False))
    assert ADAPTER.union(Capabilities(ttl=True)).ttl


def test_restated_capabilities_are_accepted_when_they_agree_with_the_transport() -> None:
    class Twice(PagedStorage):  # the 0.1.0 docs' style: the transport's, restated
        transport_cls = Recorder
        capabilities = Recorder.capabilities

    class Full(PagedStorage):  # or with the adapter's three as well
        transport_cls = Recorder
        capabilities = ADAPTER.union(Recorder.capabilities)

    assert Twice.capabilities == Full.capabilities == ADAPTER.union(Recorder.capabilities)

    class Built(PagedStorage):  # no transport_cls: the restatement declares the store
        capabilities = Recorder.capabilities

        def create_transport(self, config: Any) -> Recorder:
            return Recorder()

    assert Built.capabilities == ADAPTER.union(Recorder.capabilities)


def test_restated_capabilities_that_disagree_or_a_bad_transport_cls_are_refused() -> None:
    with pytest.raises(TypeError) as e:

        class Twice(PagedStorage):
            transport_cls = Recorder
            capabilities = Capabilities(persistent=True, ttl=True)

    msg = str(e.value)
    assert msg.startswith("Twice.capabilities disagrees with Recorder.capabilities on ttl, delete:"), msg
    assert "delete the `capabilities = ...` line of Twice" in msg

    with pytest.raises(TypeError, match=r"Wrong\.capabilities must be a hicache_sdk\.Capabilities"):

        class Wrong(PagedStorage):
            transport_cls = Recorder
            capabilities = {"ttl": True}  # type: ignore[assignment]

    with pytest.raises(TypeError, match="Transport subclass"):

        class Bad(PagedStorage):
            transport_cls = dict  # type: ignore[assignment]


def test_host_memory_registered_once_and_unregistered_on_close() -> None:
    pool = MHAHostPool(64, 4, 2, 2, 8, dtype=torch.float16)
    s = RecorderStorage(HiCacheStorageConfig(extra_config={"transfer_timeout_s": 1.0}), {})
    t = s.raw_transport
    assert isinstance(t, Recorder)
    s.register_mem_pool_host(pool)
    s.register_mem_host_pool_v2(pool, "kv")  # the same pool again: nothing new
    kv = (pool.kv_buffer.data_ptr(), pool.kv_buffer.numel() * pool.kv_buffer.element_size())
    regions = pool_buffers(pool)  # the K and V halves, as get_hybrid_pool_buffer() lists them
    assert regions[0][0] == kv[0] and sum(n for _, n in regions) == kv[1]
    assert t.events == [("register", *r) for r in regions]
    keys = [hashlib.sha256(b"x").hexdigest()]
    assert s.batch_set_v1(keys, torch.arange(4)) == [True]  # staged: a staging buffer is registered
    staging = [e for e in t.events[len(regions) :] if e[0] == "register"]
    assert len(staging) == 1 and staging[0][1:] not in regions
    s.close()
    unregistered = {e[1:] for e in t.events if e[0] == "unregister"}
    assert unregistered == {*regions, staging[0][1:]}
    assert t.closed
    n = len(t.events)
    s.close()
    assert len(t.events) == n  # nothing after close


def test_create_transport_must_return_a_transport() -> None:
    class Wrong(PagedStorage):
        def create_transport(self, config: Any) -> Transport:
            return object()  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"not a hicache_sdk\.Transport"):
        Wrong(HiCacheStorageConfig(), {})

    class Nothing(PagedStorage):
        pass

    with pytest.raises(TypeError, match="set transport_cls"):
        Nothing(HiCacheStorageConfig(), {})
