"""``CachedExistence``: a positive-lookup cache in front of a transport's ``exists``.

The adapter wraps a transport in it when ``BackendConfig.exists_cache_ttl_s`` is not ``0``
(``-1``: entries never expire). Only hits are remembered (name -> size), for ``ttl_s``
seconds; a miss always goes to the store, so a page written by another process is seen at
once. Invalidation is explicit, in this one place: a successful ``write`` remembers the
object, ``delete`` and ``clear`` forget, and a failed ``read`` forgets (the object may have
been evicted or deleted by another process: the read is a miss, never wrong bytes, and the
next lookup asks the store). The price of the cache: a page removed by another process may be
reported present until its entry expires or a read of it fails.

Everything else (``read``, ``health``, ``close``, memory registration, failure reasons,
cancellation) is the inner transport's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..transport import Segments, Transport
from .wrapping import WrappingTransport

__all__ = ["CachedExistence"]


class CachedExistence(WrappingTransport):
    """Thread-safe; see the module docs. ``clock`` is injectable for tests."""

    def __init__(
        self, inner: Transport, ttl_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if ttl_s != -1 and not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0 or -1 (forever), got {ttl_s!r}")
        super().__init__(inner)
        self.ttl_s = float(ttl_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, float]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # -- the cache -----------------------------------------------------------------------
    def _lookup(self, keys: Sequence[str]) -> list[int | None]:
        with self._lock:
            entries = self._entries
            if self.ttl_s == -1:
                return [hit[0] if (hit := entries.get(k)) is not None else None for k in keys]
            now = self._clock()
            out: list[int | None] = []
            for k in keys:
                hit = entries.get(k)
                if hit is not None and now - hit[1] > self.ttl_s:
                    del entries[k]
                    hit = None
                out.append(None if hit is None else hit[0])
            return out

    def remember(self, names: Sequence[str], sizes: Sequence[int]) -> None:
        now = self._clock()
        with self._lock:
            for k, s in zip(names, sizes):
                self._entries[k] = (s, now)

    def forget(self, names: Sequence[str]) -> None:
        with self._lock:
            for k in names:
                self._entries.pop(k, None)

    def forget_prefix(self, prefix: str) -> None:
        with self._lock:
            if not prefix:
                self._entries.clear()
            else:
                for k in [k for k in self._entries if k.startswith(prefix)]:
                    del self._entries[k]

    # -- Transport -----------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        out = self._lookup(keys)
        todo = [i for i, s in enumerate(out) if s is None]
        if not todo:
            return out
        found = self._inner.exists([keys[i] for i in todo] if len(todo) < len(keys) else keys)
        hits_k, hits_s = [], []
        for i, size in zip(todo, found):
            if size is not None:
                out[i] = size
                if size >= 0:  # SIZE_UNKNOWN is not worth remembering
                    hits_k.append(keys[i])
                    hits_s.append(size)
        if hits_k:
            self.remember(hits_k, hits_s)
        return out

    def read(self, keys: Sequence[str], buffers: Sequence[Segments], cancel: Any = None) -> list[bool]:
        res = (
            self._inner.read(keys, buffers, cancel)  # type: ignore[call-arg]
            if cancel is not None
            else self._inner.read(keys, buffers)
        )
        bad = [k for k, ok in zip(keys, res) if not ok]
        if bad:
            self.forget(bad)
        return res

    def write(self, keys: Sequence[str], buffers: Sequence[Segments], cancel: Any = None) -> list[bool]:
        res = (
            self._inner.write(keys, buffers, cancel)  # type: ignore[call-arg]
            if cancel is not None
            else self._inner.write(keys, buffers)
        )
        names = [k for k, ok in zip(keys, res) if ok]
        if names:
            sizes = [sum(n for _, n in b) for b, ok in zip(buffers, res) if ok]
            self.remember(names, sizes)
        return res

    def delete(self, keys: Sequence[str]) -> None:
        self.forget(keys)
        self._inner.delete(keys)

    def clear(self, prefix: str) -> None:
        self.forget_prefix(prefix)
        self._inner.clear(prefix)

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
        super().close()
