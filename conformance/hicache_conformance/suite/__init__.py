"""The suite's test mixins, by level; :class:`BackendSuite` combines them all."""

from __future__ import annotations

from .l0_shape import ShapeTests
from .l1_pools import PoolTests
from .l1_raw import RawObjectTests
from .l1_semantics import SemanticsTests
from .l2_l3 import ConcurrencyTests, LifecycleTests
from .l4_faults import FaultTests
from .stateful import StatefulTests
from .transport_tests import TransportTests

__all__ = [
    "BackendSuite",
    "ShapeTests",
    "SemanticsTests",
    "PoolTests",
    "RawObjectTests",
    "LifecycleTests",
    "ConcurrencyTests",
    "FaultTests",
    "StatefulTests",
    "TransportTests",
]


class BackendSuite(
    ShapeTests,
    SemanticsTests,
    PoolTests,
    RawObjectTests,
    LifecycleTests,
    ConcurrencyTests,
    FaultTests,
    StatefulTests,
    TransportTests,
):
    """Subclass as ``class TestMyBackend(BackendSuite): backend = "mine"`` (see
    :mod:`hicache_conformance.base` for what to set and override). The same tests as
    ``hicache check NAME``: every level, and the transport tests below the adapter
    (skipped, with the reason, for a backend that has no transport)."""
