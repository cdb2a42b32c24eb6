"""What a backend declares it can do; the conformance suite reads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["ADAPTER", "STORE_NAMES", "Capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """Declared capabilities of a backend. Every default is ``False``: a capability is a
    promise, and ``Capabilities()`` promises nothing beyond the base contract.

    * ``zero_copy``: implements ``batch_get_v1``/``batch_set_v1`` into host slots.
    * ``hybrid_pools``: implements the v2 methods (extra pools: Mamba, SWA, indexer...).
    * ``mla``: serves rank-replicated (MLA) KV pools.
    * ``persistent``: pages survive re-instantiation of the backend object.
    * ``shared_across_processes``: two processes with one config see each other's pages.
    * ``ttl``: pages expire after a configured time.
    * ``capacity_bound``: a configured byte bound is enforced (with eviction); the suite
      configures one through the test class's ``capacity_config``.
    * ``eviction``: pages may disappear to make room (the stateful test allows it).
    * ``delete``: ``clear()`` removes this backend's namespace.
    * ``health``: the transport has a real liveness probe.
    * ``fault_injection``: the test module can stop/restart the service (L4 tests).

    A ``PagedStorage`` backend does not declare them: it gets :data:`ADAPTER` (the first three,
    which the adapter implements for every transport) plus what its ``transport_cls``
    declares (the store's own properties). A class that declares none is inferred by the
    conformance suite from the methods it implements.
    """

    zero_copy: bool = False
    hybrid_pools: bool = False
    mla: bool = False
    persistent: bool = False
    shared_across_processes: bool = False
    ttl: bool = False
    capacity_bound: bool = False
    eviction: bool = False
    delete: bool = False
    health: bool = False
    fault_injection: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def union(self, other: Capabilities) -> Capabilities:
        """Every capability either side declares."""
        return Capabilities(**{n: getattr(self, n) or getattr(other, n) for n in self.names()})


#: What the paged adapter itself implements, whatever the transport.
ADAPTER = Capabilities(zero_copy=True, hybrid_pools=True, mla=True)

#: The capabilities that describe the store (what a transport may declare).
STORE_NAMES = tuple(n for n in Capabilities.names() if not getattr(ADAPTER, n))
