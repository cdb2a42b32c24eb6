"""LMCache L2 adapters, each broken in exactly one way (importing this module imports LMCache).

Each is our :class:`hicache_sdk.lmcache.L2Adapter` with one fault, and names in ``FAILS``
the :class:`~..suite.lmcache_l2_tests.L2AdapterTests` test that must fail for it. Load
one with ``hicache check hicache_conformance.broken.lmcache_l2:CLASS --engine lmcache-l2
--config '{"backend": "file", "backend_config": {...}}'``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from hicache_sdk.lmcache.keys import NameMaker
from hicache_sdk.lmcache.l2 import L2Adapter, L2AdapterConfig
from hicache_sdk.lmcache.objects import Chunk, ChunkObjects

__all__ = [
    "ForgetfulStoreL2Adapter",
    "ForgetfulStoreL2AdapterConfig",
    "HangsWhenDownL2Adapter",
    "HangsWhenDownL2AdapterConfig",
    "PrefixLookupL2Adapter",
    "PrefixLookupL2AdapterConfig",
    "SaltBlindL2Adapter",
    "SaltBlindL2AdapterConfig",
]


class _PrefixObjects(ChunkObjects):
    def present(self, names: Any, payloads: Any) -> list[bool]:
        found = super().present(names, payloads)
        run = found.index(False) if False in found else len(found)
        return [i < run for i in range(len(found))]


class PrefixLookupL2Adapter(L2Adapter):
    """Lookups answer the leading run of hits (a prefix), not one bit per key."""

    FAILS: ClassVar[str] = "test_lookup_answers_per_key_not_as_a_prefix"

    def __init__(self, config: Any, l1_memory_desc: Any = None) -> None:
        super().__init__(config, l1_memory_desc)
        self.objects.__class__ = _PrefixObjects


class _SaltBlind(NameMaker):
    def _salt_token(self, salt: object) -> str:
        return "0"


class SaltBlindL2Adapter(L2Adapter):
    """Object names leave out ``cache_salt``: tenants share each other's chunks."""

    FAILS: ClassVar[str] = "test_each_key_field_isolates[salt]"

    def __init__(self, config: Any, l1_memory_desc: Any = None) -> None:
        super().__init__(config, l1_memory_desc)
        self._names.__class__ = _SaltBlind


class _Forgetful(ChunkObjects):
    def store(self, chunks: Any) -> tuple[bool, list[bool]]:
        return True, [True] * len(chunks)


class ForgetfulStoreL2Adapter(L2Adapter):
    """Stores report success (and bytes) but write nothing."""

    FAILS: ClassVar[str] = "test_round_trip_into_caller_buffers"

    def __init__(self, config: Any, l1_memory_desc: Any = None) -> None:
        super().__init__(config, l1_memory_desc)
        self.objects.__class__ = _Forgetful


class _Patient(ChunkObjects):
    """Waits for the service to come back before any I/O (and so never gives up)."""

    adapter: Any = None

    def _wait(self) -> None:
        while not getattr(self.adapter, "_closed", True) and not self.transport.health():
            time.sleep(0.05)

    def present(self, names: Any, payloads: Any) -> list[bool]:
        self._wait()
        return super().present(names, payloads)

    def load(self, chunks: list[Chunk]) -> list[bool]:
        self._wait()
        return super().load(chunks)

    def store(self, chunks: Any) -> tuple[bool, list[bool]]:
        self._wait()
        return super().store(chunks)


class HangsWhenDownL2Adapter(L2Adapter):
    """Tasks wait for the service to come back: none completes while it is down."""

    FAILS: ClassVar[str] = "test_every_task_completes_while_the_service_is_stalled"

    def __init__(self, config: Any, l1_memory_desc: Any = None) -> None:
        super().__init__(config, l1_memory_desc)
        self.objects.__class__ = _Patient
        self.objects.adapter = self  # type: ignore[attr-defined]
        self._stores.timeout_s = self._reads.timeout_s = 1e9


# LMCache finds a plugin's config class by the name ``<class_name>Config``.
PrefixLookupL2AdapterConfig = SaltBlindL2AdapterConfig = L2AdapterConfig
ForgetfulStoreL2AdapterConfig = HangsWhenDownL2AdapterConfig = L2AdapterConfig
