"""Thread-safe metrics every backend gets: operations, pages, bytes, latency histograms,
errors by reason, named counters and gauges.

``drain_storage_metrics()`` returns SGLang's ``StorageMetrics`` shape (prefetch/backup page
counts and bandwidths since the last drain) -- SGLang polls ``get_stats()`` every step.
``snapshot()`` returns cumulative figures for the CLI, benchmarks and tests. Nothing here
ever records a key, a value or a secret.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Any

from ..spec import StorageMetrics

_log = logging.getLogger("hicache_sdk.failures")

__all__ = ["LATENCY_BUCKETS_S", "Metrics"]

#: Upper bounds (seconds) of the latency histogram buckets; the last bucket is +inf.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

_READ_OPS = frozenset({"get", "get_v1", "get_v2"})
_WRITE_OPS = frozenset({"set", "set_v1", "set_v2"})


class _OpStats:
    """One operation's totals (guarded by the owning :class:`Metrics`' lock)."""

    __slots__ = ("bytes", "calls", "failures", "hist", "pages", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.failures = 0
        self.pages = 0
        self.bytes = 0
        self.seconds = 0.0
        self.hist = [0] * (len(LATENCY_BUCKETS_S) + 1)

    def add(self, pages: int, nbytes: int, seconds: float, ok: bool) -> None:
        self.calls += 1
        self.failures += 0 if ok else 1
        self.pages += pages
        self.bytes += nbytes
        self.seconds += seconds
        self.hist[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1


class Metrics:
    """Counters for one backend instance. All methods are thread-safe and cheap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, _OpStats] = {}
        self._errors: dict[str, int] = {}
        self._warned: dict[str, float] = {}
        self._counters: dict[str, int] = {}
        self._gauges: dict[str, Any] = {}
        self._pending = StorageMetrics()

    def record(
        self, op: str, *, pages: int = 0, nbytes: int = 0, seconds: float = 0.0, ok: bool = True
    ) -> None:
        """Record one call of ``op`` (``"exists"``, ``"get_v1"``, ``"set_v2"``, ...).

        Read ops (``get*``) feed SGLang's ``prefetch_pgs``/``prefetch_bandwidth``; write
        ops (``set*``) feed ``backup_pgs``/``backup_bandwidth``. Bandwidth is in GB/s."""
        with self._lock:
            st = self._ops.get(op)
            if st is None:
                st = self._ops[op] = _OpStats()
            st.add(pages, nbytes, seconds, ok)
            if pages and op in _READ_OPS:
                self._pending.prefetch_pgs.append(pages)
                self._pending.prefetch_bandwidth.append(nbytes / seconds / 1e9 if seconds > 0 else 0.0)
            elif pages and op in _WRITE_OPS:
                self._pending.backup_pgs.append(pages)
                self._pending.backup_bandwidth.append(nbytes / seconds / 1e9 if seconds > 0 else 0.0)

    def error(self, reason: str, n: int = 1) -> None:
        """Count ``n`` failures of kind ``reason`` (a short stable token). The first
        failure of each reason is logged at WARNING, then one line per 60 s at most."""
        now = time.monotonic()
        with self._lock:
            self._errors[reason] = self._errors.get(reason, 0) + n
            last = self._warned.get(reason)
            if last is not None and now - last < 60.0:
                return
            self._warned[reason] = now
            total = self._errors[reason]
        _log.warning("storage failure: %s (%d counted so far; counted in metrics.errors())", reason, total)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the named counter (``"abandoned_reads"``, ``"integrity_deleted"``...)."""
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + n

    def gauge(self, name: str, value: Any) -> None:
        """Set a gauge (``"breaker_state"``, ``"staging_bytes_in_use"``...)."""
        with self._lock:
            self._gauges[name] = value

    def counter(self, name: str) -> int:
        with self._lock:
            return self._counters.get(name, 0)

    def errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    def drain_storage_metrics(self) -> StorageMetrics:
        """The page counts and bandwidths recorded since the previous drain."""
        with self._lock:
            out, self._pending = self._pending, StorageMetrics()
        return out

    def snapshot(self) -> dict[str, Any]:
        """Cumulative figures: ``ops`` (calls, failures, pages, bytes, seconds, latency
        histogram), ``errors`` by reason, ``counters`` and ``gauges``."""
        with self._lock:
            ops = {
                name: {
                    "calls": st.calls,
                    "failures": st.failures,
                    "pages": st.pages,
                    "bytes": st.bytes,
                    "seconds": st.seconds,
                    "latency_buckets_s": [*LATENCY_BUCKETS_S, float("inf")],
                    "latency_counts": list(st.hist),
                }
                for name, st in self._ops.items()
            }
            return {
                "ops": ops,
                "errors": dict(self._errors),
                "counters": dict(self._counters),
                "gauges": dict(self._gauges),
            }
