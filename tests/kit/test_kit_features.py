"""Features of wrapped transports are asked (``Transport.offers``), never probed or walked:
each wrapper states what it offers, of its own and of the transport it wraps."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import ClassVar

from hicache_sdk.config import BackendConfig
from hicache_sdk.kit import CachedExistence, NegativeCache
from hicache_sdk.kit.wrapping import WrappingTransport
from hicache_sdk.memory import MemoryTransport, drop_store
from hicache_sdk.metrics import Metrics
from hicache_sdk.paged.objects import ObjectEngine
from hicache_sdk.resilience import FailureInjector, wrap_transport
from hicache_sdk.transport import DeadlineScoped, Segments, SizedTransfer


def _memory() -> MemoryTransport:
    return MemoryTransport(f"features-{uuid.uuid4().hex}")


def test_a_plain_transport_offers_nothing_it_does_not_subclass() -> None:
    t = _memory()
    try:
        assert t.offers(DeadlineScoped) is None and t.offers(SizedTransfer) is None
        assert t.offers(MemoryTransport) is t
    finally:
        drop_store(t.store_name)


def test_the_resilience_layer_offers_both_and_passes_only_the_scope_through_wrappers() -> None:
    t = _memory()
    r = wrap_transport(CachedExistence(t, 5.0), BackendConfig(), Metrics(), injector=FailureInjector())
    try:
        assert r.offers(DeadlineScoped) is r and r.offers(SizedTransfer) is r
        n = NegativeCache(r, 10.0)
        # a deadline scope bounds whatever runs inside it: it passes the wrapper
        assert n.offers(DeadlineScoped) is r
        # a sized transfer would bypass the wrapper's read/write: it stops there
        assert n.offers(SizedTransfer) is None
        eng = ObjectEngine(n, Metrics())
        assert eng.sized is None
        assert ObjectEngine(r, Metrics()).sized is r
    finally:
        r.close()
        drop_store(t.store_name)


def test_a_wrapper_states_what_it_passes_on() -> None:
    class Counting(WrappingTransport):
        """Leaves read and write alone: the inner sized transfer may be used."""

        passes_on: ClassVar[tuple[type, ...]] = (DeadlineScoped, SizedTransfer)

        def exists(self, keys: Sequence[str]) -> list[int | None]:
            return self.inner.exists(keys)

        def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
            return self.inner.read(keys, buffers)

        def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
            return self.inner.write(keys, buffers)

        def delete(self, keys: Sequence[str]) -> None:
            self.inner.delete(keys)

    t = _memory()
    r = wrap_transport(t, BackendConfig(), Metrics(), injector=FailureInjector())
    try:
        c = Counting(r)
        assert c.offers(SizedTransfer) is r and c.offers(DeadlineScoped) is r
        # and one level further down, the answer is the same: each wrapper answers for itself
        assert NegativeCache(c, 1.0).offers(DeadlineScoped) is r
        assert NegativeCache(c, 1.0).offers(SizedTransfer) is None
        # around a transport with no features, nothing is offered whatever the wrapper passes on
        assert Counting(t).offers(SizedTransfer) is None
    finally:
        r.close()
        drop_store(t.store_name)


def test_io_error_types_are_asked_of_the_wrapper() -> None:
    """A wrapper answers with its own ``io_errors`` and those of the transport it wraps, so a
    wrapper that does not restate them never turns the inner client's failures into bugs."""

    class ClientError(Exception):
        pass

    class Declaring(MemoryTransport):
        io_errors: ClassVar[tuple[type[BaseException], ...]] = (ClientError,)

    class Forgetful(CachedExistence):
        io_errors: ClassVar[tuple[type[BaseException], ...]] = ()

    t = Declaring(f"features-{uuid.uuid4().hex}")
    try:
        assert t.io_error_types() == (ClientError,)
        f = Forgetful(t, 5.0)
        f.io_errors = (TimeoutError,)  # type: ignore[misc]
        assert f.io_error_types() == (TimeoutError, ClientError)
        r = wrap_transport(f, BackendConfig(), Metrics(), injector=FailureInjector())
        assert r.io_error_types() == (TimeoutError, ClientError)  # the resilience layer asked it
        r.close()
    finally:
        drop_store(t.store_name)
