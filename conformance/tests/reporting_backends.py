"""Fixture backends for the reporting tests (``test_reporting.py``).

* :class:`BuggyReads`: ``memory`` whose transport's ``read`` has a programming error
  (``TypeError``). The SDK turns it into a miss; the backend's ``metrics.bugs()`` lists
  it the way ``hicache_sdk.metrics.Metrics.bugs()`` does (site, error, message,
  traceback), so the suite can show it.
* :class:`FlakyStores`: stores zeros instead of the page once a process-wide write count
  passes a bound, so the failure hypothesis finds cannot be replayed the same way (it
  calls it flaky).
* :class:`CountedStoresNothing`: a file-like backend that stores nothing and counts its
  open and live instances, to prove the suite closes and releases every backend it
  builds, also after failures.
"""

from __future__ import annotations

import traceback
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hicache_conformance.broken.filelike import StoresNothingFilePages
from hicache_conformance.broken.reference import ReferenceStorage

from hicache_sdk import Segments
from hicache_sdk.memory import MemoryStorage, MemoryTransport


@dataclass(frozen=True)
class Bug:
    site: str
    error: str
    message: str
    traceback: str


_BUGS: list[Bug] = []


class _BuggyTransport(MemoryTransport):
    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        try:
            return self._reads_wrongly(keys, buffers)
        except TypeError as e:
            if not any(b.error == "TypeError" for b in _BUGS):
                _BUGS.append(Bug("transport.read", "TypeError", str(e), traceback.format_exc()))
            raise

    def _reads_wrongly(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        return super().read(keys, buffers, "an argument too many")  # type: ignore[call-arg]


class _MetricsWithBugs:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def bugs(self) -> list[Bug]:
        return list(_BUGS)


class BuggyReads(MemoryStorage):
    transport_cls = _BuggyTransport

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        super().__init__(storage_config, kwargs)
        if not callable(getattr(self.metrics, "bugs", None)):  # before the SDK records bugs itself
            self.metrics = _MetricsWithBugs(self.metrics)  # type: ignore[assignment]

    def create_transport(self, config: Any) -> MemoryTransport:
        return _BuggyTransport(store=config.store)


_WRITES = [0]


class FlakyStores(ReferenceStorage):
    """Correct for its first 25 page writes in the process, then every page is stored as
    zeros: a fault that depends on history, so hypothesis cannot replay it."""

    def _put(self, pool_name: str, key: str, data: bytes) -> bool:
        _WRITES[0] += 1
        return super()._put(pool_name, key, bytes(len(data)) if _WRITES[0] > 25 else data)


class CountedStoresNothing(StoresNothingFilePages):
    OPEN: ClassVar[set[int]] = set()
    MAX_OPEN: ClassVar[list[int]] = [0]
    LIVE: ClassVar[weakref.WeakSet[Any]] = weakref.WeakSet()

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        super().__init__(storage_config, kwargs)
        CountedStoresNothing.OPEN.add(id(self))
        CountedStoresNothing.LIVE.add(self)
        CountedStoresNothing.MAX_OPEN[0] = max(
            CountedStoresNothing.MAX_OPEN[0], len(CountedStoresNothing.OPEN)
        )

    def close(self) -> None:
        CountedStoresNothing.OPEN.discard(id(self))
