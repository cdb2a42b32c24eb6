"""Deadlines are end to end: over a transport whose every call blocks (``health`` included,
as a frozen server does), each batch call of the adapter returns within its own deadline
(``exists_timeout_s`` for existence, ``transfer_timeout_s`` for transfers) plus 100 ms --
whatever it does besides the transfer: a half-open health probe before it (``probing``: the
breaker opens at the first failure and every later call is a probe), or, with the breaker
closed, the existence check after a failed read and the staging copies."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import pytest
import torch

from hicache_sdk.capabilities import Capabilities
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.spec import HiCacheStorageConfig, PoolName, PoolTransfer
from hicache_sdk.transport import Segments, Transport

EXISTS_S, TRANSFER_S, SLACK_S = 0.25, 0.3, 0.1


class Frozen(Transport):
    """Every call blocks until ``thaw`` is set, as against a SIGSTOPped server."""

    capabilities: ClassVar[Capabilities] = Capabilities(health=True, delete=True)

    def __init__(self) -> None:
        self.thaw = threading.Event()
        self.calls: list[str] = []

    def _block(self, op: str) -> None:
        self.calls.append(op)
        self.thaw.wait(30)

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        self._block("exists")
        return [None] * len(keys)

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._block("read")
        return [False] * len(keys)

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._block("write")
        return [False] * len(keys)

    def delete(self, keys: Sequence[str]) -> None:
        self._block("delete")

    def health(self) -> bool:
        self._block("health")
        return False


class FrozenNoHealth(Frozen):
    capabilities: ClassVar[Capabilities] = Capabilities(delete=True)


class FrozenStorage(MemoryStorage):
    transport_cls = Frozen

    def create_transport(self, config: Any) -> Transport:
        return Frozen() if self.config.breaker_failures == 1 else FrozenNoHealth()


@pytest.fixture(
    params=[
        ("default", True, 0),
        ("sglang-mooncake", True, 0),
        ("default", False, 0),
        ("sglang-mooncake", False, 0),
        ("default", False, 5),
    ],
    ids=[
        "default-probing",
        "sglang-mooncake-probing",
        "default-closed",
        "sglang-mooncake-closed",
        "default-closed-negative-cache",
    ],
)
def frozen(request: pytest.FixtureRequest) -> Iterator[FrozenStorage]:
    scheme, probing, negative_ttl = request.param
    store = f"frozen-{uuid.uuid4().hex}"
    extra = {
        "store": store,
        "key_scheme": scheme,
        "exists_timeout_s": EXISTS_S,
        "transfer_timeout_s": TRANSFER_S,
        # probing: every call after the first failure is a half-open probe, health() first;
        # closed: no probe ever, every call reaches the transport
        "breaker_failures": 1 if probing else 1_000_000,
        "breaker_reset_s": 0,
        "max_abandoned": 500,
        # the negative cache (outermost) asks existence after a failed read: within the deadline too
        "negative_cache_ttl_s": negative_ttl,
    }
    s = FrozenStorage(HiCacheStorageConfig(model_name="m", extra_config=extra), {})
    pool = MHAHostPool(64, 4, 2, 2, 8, dtype=torch.bfloat16, pin_memory=False)
    s.register_mem_pool_host(pool)
    yield s
    s.raw_transport.thaw.set()  # type: ignore[attr-defined]
    s.close()
    drop_store(store)


def _keys(n: int, salt: str) -> list[str]:
    return [f"{salt}{i:063x}"[-64:] for i in range(n)]


def test_every_batch_call_returns_within_its_deadline(frozen: FrozenStorage) -> None:
    s = frozen
    slots = torch.arange(16, dtype=torch.int64)
    pool = s.mem_pool_host
    calls: list[tuple[str, float, Callable[[], object]]] = [
        ("batch_exists", EXISTS_S, lambda: s.batch_exists(_keys(4, "a"))),
        ("exists", EXISTS_S, lambda: s.exists(_keys(1, "b")[0])),
        ("batch_exists_v2", EXISTS_S, lambda: s.batch_exists_v2(_keys(4, "c"), [])),
        ("batch_get_v1", TRANSFER_S, lambda: s.batch_get_v1(_keys(4, "d"), slots)),
        ("batch_set_v1", TRANSFER_S, lambda: s.batch_set_v1(_keys(4, "e"), slots)),
        (
            "batch_get_v2",
            TRANSFER_S,
            lambda: s.batch_get_v2([PoolTransfer(PoolName.KV, slots, keys=_keys(4, "f"))]),
        ),
        (
            "batch_set_v2",
            TRANSFER_S,
            lambda: s.batch_set_v2([PoolTransfer(PoolName.KV, slots, keys=_keys(4, "a1"))]),
        ),
        ("batch_get", TRANSFER_S, lambda: s.batch_get(_keys(2, "b1"))),
        ("batch_set", TRANSFER_S, lambda: s.batch_set(_keys(2, "c1"), [pool.get_dummy_flat_data_page()] * 2)),
    ]
    over: list[str] = []
    for name, limit, call in calls:
        # A call over the bound is timed once more: a busy machine may stall a thread for
        # a moment once, while a step outside the deadline overruns by its own every time.
        took = []
        for _ in range(2):
            t0 = time.monotonic()
            call()
            took.append(time.monotonic() - t0)
            if took[-1] <= limit + SLACK_S:
                break
        else:
            over.append(f"{name}: {[round(x * 1e3) for x in took]} ms > {(limit + SLACK_S) * 1e3:.0f} ms")
    assert over == []
    t: Frozen = s.raw_transport  # type: ignore[assignment]
    if type(t) is Frozen:  # probing: the calls ended in health probes
        assert set(t.calls) == {"health"}
    else:  # closed: every call reached the transport; no existence check followed a failed
        # read (nothing arrived, and the read had spent the caller's deadline)
        assert set(t.calls) == {"exists", "read", "write"}
        assert t.calls.count("exists") == 3
    assert s.metrics.errors()["deadline"] >= len(calls)
