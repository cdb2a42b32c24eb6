"""What a backend declares it can do; the conformance suite reads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["Capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """Declared capabilities of a backend (defaults: the least a backend promises).

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
    * ``scatter_gather``: the transport takes multi-segment objects without staging.
    """

    zero_copy: bool = True
    hybrid_pools: bool = True
    mla: bool = True
    persistent: bool = False
    shared_across_processes: bool = False
    ttl: bool = False
    capacity_bound: bool = False
    eviction: bool = False
    delete: bool = True
    health: bool = False
    fault_injection: bool = False
    scatter_gather: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
