"""Failure reasons a transport counts, wired to the adapter's metrics.

A transport never raises for a per-object I/O failure: it reports a miss and counts *why*
through :meth:`Transport.count_failure <hicache_sdk.transport.Transport.count_failure>`, which
lands in the transport's :class:`FailureReasons`. The adapter binds that sink to its
:class:`~hicache_sdk.resilience.metrics.Metrics` (``metrics.error``), so every reason appears in
``get_stats()``, ``metrics.errors()`` and ``hicache ping``, and the first of each is logged once
at WARNING by ``Metrics``.

Reasons are short stable tokens used as metric labels (``"connection"``, ``"timeout"``,
``"disk_full"``, ``"permission"``, ``"not_found"``, ``"size_mismatch"``...): lowercase letters,
digits and ``_``, at most 64 characters; anything else is a ``ValueError`` (a reason is never
free text, so it can never carry a secret or a path into a label).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

__all__ = ["FailureReasons", "check_reason"]

_TOKEN = re.compile(r"[a-z0-9_]{1,64}\Z")

#: ``sink(reason, n)``: where counted reasons are forwarded (``Metrics.error``).
Sink = Callable[[str, int], None]


def check_reason(reason: object) -> str:
    """``reason`` if it is a valid token, else ``ValueError`` naming it."""
    if not isinstance(reason, str) or not _TOKEN.match(reason):
        raise ValueError(
            f"failure reason must be a lowercase token ([a-z0-9_], 1-64 chars), got {reason!r:.80}"
        )
    return reason


class FailureReasons:
    """Thread-safe counts of failure reasons since creation, forwarded to bound sinks.

    :meth:`count` before any sink is bound is kept and replayed to a sink when it binds (a
    transport may fail in its constructor's background work before the adapter binds it).
    """

    __slots__ = ("_counts", "_lock", "_sinks")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._sinks: list[Sink] = []

    def count(self, reason: str, n: int = 1) -> None:
        """Add ``n`` (>= 1) failures of ``reason`` and forward them to every bound sink."""
        check_reason(reason)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n!r}")
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + n
            sinks = list(self._sinks)
        for sink in sinks:
            sink(reason, n)

    def bind(self, sink: Sink) -> None:
        """Forward future counts to ``sink`` and replay the counts so far to it. Binding
        the same sink twice is a no-op."""
        with self._lock:
            if sink in self._sinks:
                return
            self._sinks.append(sink)
            past = list(self._counts.items())
        for reason, n in past:
            sink(reason, n)

    def unbind(self, sink: Sink) -> None:
        """Stop forwarding to ``sink`` (missing: no-op)."""
        with self._lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def snapshot(self) -> dict[str, int]:
        """Counts so far by reason (a copy)."""
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        return f"FailureReasons({self.snapshot()!r})"
