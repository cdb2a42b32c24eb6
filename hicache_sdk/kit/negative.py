"""``NegativeCache``: remembers objects that exist but cannot be read, for a short while.

A store's metadata may report an object present after its data became unavailable (Mooncake:
the object's only replica segment went away; sgl-project/sglang#31315). Every request that
touches the page then pays the same failure: the existence query says yes, the read waits
for its deadline and misses, and the request queue stalls behind it. This wrapper breaks the
loop:

* an object whose read **failed while the store still reports it present** is remembered,
  for ``ttl_s`` seconds, at most ``max_entries`` of them (the oldest are dropped first);
* while remembered, ``exists`` answers it **absent** without asking the store, so the read
  path treats the page as a miss (recompute) instead of reading it again;
* a **plain miss is never remembered**: an object the store reports absent after the failed
  read is left alone, so a page another instance writes later is seen at once;
* an entry is **cleared by any successful read or write** of that object. A write of a
  remembered object first deletes it: the store says the object exists, so a
  create-if-absent write would otherwise leave the unreadable copy in place and report
  success.

The adapter puts it outermost, around the resilience layer
(``BackendConfig.negative_cache_ttl_s``; ``0``, the default, leaves it out), so a read the
deadline abandons counts at once. Such a read fails for every object of its batch: all of
them that the store still reports present are remembered, since the failure cannot be
pinned on one of them. The store is asked right after the failed read, within the caller's
deadline; when that deadline has already passed (the read used it all: the inner transport,
asked ``offers(DeadlineScoped)``, says so), the failed objects are *suspects* instead, and the question
waits for the next ``exists`` that asks the store about them: one it reports present is
remembered and answered absent, one it reports absent is dropped. What the remembered
objects cost: pages in them read as misses for up to ``ttl_s`` even if the store recovers
sooner.

Counters (through ``metrics.count``): ``negative_cache_added``, ``negative_cache_suppressed``
(existence answers turned into misses), ``negative_cache_cleared``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ..transport import DeadlineScoped, Segments, Transport
from .wrapping import WrappingTransport

__all__ = ["NegativeCache"]

#: Entries kept at most by default (oldest dropped first).
DEFAULT_MAX_ENTRIES = 65536


class NegativeCache(WrappingTransport):
    """Thread-safe; see the module docs. ``clock`` is injectable for tests; ``metrics`` is an
    optional :class:`~hicache_sdk.metrics.Metrics` for the counters."""

    def __init__(
        self,
        inner: Transport,
        ttl_s: float,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        metrics: Any = None,
    ) -> None:
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        super().__init__(inner)
        self.ttl_s = float(ttl_s)
        self.max_entries = max_entries
        self._clock = clock
        self._metrics = metrics
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, float] = OrderedDict()  # name -> when remembered
        self._suspects: OrderedDict[str, float] = OrderedDict()  # failed, not yet asked about
        scoped = inner.offers(DeadlineScoped)
        self._passed = scoped.deadline_passed if scoped is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is remembered now (an expired entry is not)."""
        if not isinstance(name, str):
            return False
        with self._lock:
            at = self._entries.get(name)
            return at is not None and self._clock() - at <= self.ttl_s

    def _count(self, name: str, n: int) -> None:
        if n and self._metrics is not None:
            self._metrics.count(name, n)

    # -- the cache -----------------------------------------------------------------------
    def remember(self, names: Sequence[str]) -> None:
        """Remember ``names`` as present but unreadable, from now."""
        now = self._clock()
        with self._lock:
            for k in names:
                self._entries.pop(k, None)
                self._entries[k] = now
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        self._count("negative_cache_added", len(names))

    def forget(self, names: Sequence[str]) -> int:
        """Clear ``names``; how many were remembered."""
        with self._lock:
            for k in names if self._suspects else ():
                self._suspects.pop(k, None)
            if not self._entries:
                return 0
            n = sum(1 for k in names if self._entries.pop(k, None) is not None)
        self._count("negative_cache_cleared", n)
        return n

    def _remembered(self, keys: Sequence[str]) -> list[bool]:
        """Per key: remembered and not expired (expired entries are dropped here)."""
        now = self._clock()
        with self._lock:
            entries = self._entries
            if not entries or entries.keys().isdisjoint(keys):
                return [False] * len(keys)
            out: list[bool] = []
            for k in keys:
                at = entries.get(k)
                if at is not None and now - at > self.ttl_s:
                    del entries[k]
                    at = None
                out.append(at is not None)
            return out

    # -- Transport -----------------------------------------------------------------------
    def suspect(self, names: Sequence[str]) -> None:
        """Remember ``names`` as failed reads to ask the store about at their next ``exists``
        (module docs); suspects older than ``ttl_s`` are dropped unasked."""
        now = self._clock()
        with self._lock:
            for k in names:
                self._suspects.pop(k, None)
                self._suspects[k] = now
            while len(self._suspects) > self.max_entries:
                self._suspects.popitem(last=False)

    def _confirm(self, keys: Sequence[str], found: list[int | None]) -> list[int | None]:
        """The store's answers ``found`` for ``keys``, with every suspect among them settled:
        present -> remembered and answered absent; absent -> dropped. Answers given after the
        caller's deadline ended settle nothing (the store may not have been asked)."""
        if self._passed is not None and self._passed():
            return found
        now = self._clock()
        with self._lock:
            suspects = self._suspects
            asked = {k: f for k, f in zip(keys, found) if k in suspects}
            for k in asked:
                del suspects[k]
            for k in [k for k, at in suspects.items() if now - at > self.ttl_s]:
                del suspects[k]
        stale = {k for k, f in asked.items() if f is not None}
        if not stale:
            return found
        self.remember(list(stale))
        self._count("negative_cache_suppressed", sum(1 for k in keys if k in stale))
        return [None if k in stale else f for k, f in zip(keys, found)]

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        known = self._remembered(keys)
        if not any(known):
            found = self._inner.exists(keys)
            return self._confirm(keys, found) if self._suspects else found
        ask = [k for k, bad in zip(keys, known) if not bad]
        answers = self._inner.exists(ask) if ask else []
        if self._suspects:
            answers = self._confirm(ask, answers)
        rest = iter(answers)
        self._count("negative_cache_suppressed", sum(known))
        return [None if bad else next(rest) for bad in known]

    def read(self, keys: Sequence[str], buffers: Sequence[Segments], cancel: Any = None) -> list[bool]:
        res = (
            self._inner.read(keys, buffers, cancel)  # type: ignore[call-arg]
            if cancel is not None
            else self._inner.read(keys, buffers)
        )
        good = [k for k, ok in zip(keys, res) if ok]
        if good:
            self.forget(good)
        failed = list(dict.fromkeys(k for k, ok in zip(keys, res) if not ok))
        if failed:
            try:
                found = self._inner.exists(failed)
            except Exception:  # the store cannot tell: remember nothing
                found = []
            stale = [k for k, size in zip(failed, found) if size is not None]
            if stale:
                self.remember(stale)
            if self._passed is not None and self._passed():
                # the caller's deadline ended before the store answered them all: ask again
                # at their next exists
                self.suspect([k for k, size in zip(failed, found) if size is None] + failed[len(found) :])
        return res

    def write(self, keys: Sequence[str], buffers: Sequence[Segments], cancel: Any = None) -> list[bool]:
        known = self._remembered(keys)
        if any(known):
            self._inner.delete(list(dict.fromkeys(k for k, bad in zip(keys, known) if bad)))
        res = (
            self._inner.write(keys, buffers, cancel)  # type: ignore[call-arg]
            if cancel is not None
            else self._inner.write(keys, buffers)
        )
        good = [k for k, ok in zip(keys, res) if ok]
        if good:
            self.forget(good)
        return res

    def delete(self, keys: Sequence[str]) -> None:
        self._inner.delete(keys)

    def clear(self, prefix: str) -> None:
        with self._lock:
            for k in [k for k in self._entries if k.startswith(prefix)]:
                del self._entries[k]
            for k in [k for k in self._suspects if k.startswith(prefix)]:
                del self._suspects[k]
        self._inner.clear(prefix)

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self._suspects.clear()
        super().close()
