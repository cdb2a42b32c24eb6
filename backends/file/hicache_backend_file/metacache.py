"""An optional positive-lookup cache for ``exists`` (SGLang's ``enable_metadata_cache``).

It remembers that a page existed (and its size) for ``ttl`` seconds (``-1``: forever).
Only hits are cached: a miss always goes to the file system, so a page written by another
process is seen at once. The price: a page deleted or evicted by another process may be
reported present until its entry expires; the read that follows is then a miss (never
wrong bytes), and the entry is dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

__all__ = ["MetadataCache"]


class MetadataCache:
    """Thread-safe ``name -> size`` map with a time-to-live."""

    def __init__(self, ttl: float) -> None:
        if ttl < 0 and ttl != -1:
            raise ValueError(f"ttl must be >= 0 or -1, got {ttl!r}")
        self.ttl = ttl
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, float]] = {}

    def get(self, name: str) -> int | None:
        """The cached size, or ``None`` when unknown or expired (the entry is dropped)."""
        with self._lock:
            hit = self._entries.get(name)
            if hit is None:
                return None
            if self.ttl != -1 and time.monotonic() - hit[1] > self.ttl:
                del self._entries[name]
                return None
            return hit[0]

    def get_many(self, names: Sequence[str]) -> list[int | None]:
        """:meth:`get` for many names under one lock acquisition."""
        with self._lock:
            entries = self._entries
            if self.ttl == -1:
                return [hit[0] if (hit := entries.get(n)) is not None else None for n in names]
            now = time.monotonic()
            out: list[int | None] = []
            for n in names:
                hit = entries.get(n)
                if hit is not None and now - hit[1] > self.ttl:
                    del entries[n]
                    hit = None
                out.append(None if hit is None else hit[0])
            return out

    def put(self, name: str, size: int) -> None:
        with self._lock:
            self._entries[name] = (size, time.monotonic())

    def remove(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)

    def clear(self, prefix: str = "") -> None:
        """Drop every entry whose name starts with ``prefix``."""
        with self._lock:
            if not prefix:
                self._entries.clear()
            else:
                for k in [k for k in self._entries if k.startswith(prefix)]:
                    del self._entries[k]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
