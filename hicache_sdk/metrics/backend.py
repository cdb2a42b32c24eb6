"""Thread-safe metrics every backend gets: operations, pages, bytes, latency histograms,
errors by reason, named counters and gauges, and what went wrong.

``drain_storage_metrics()`` returns SGLang's ``StorageMetrics`` shape (prefetch/backup page
counts and bandwidths since the last drain) -- SGLang polls ``get_stats()`` every step.
``snapshot()`` returns cumulative figures for the CLI, benchmarks and tests.

Failures (:meth:`Metrics.failure`): an I/O failure (a ``TransportError``, an ``OSError``, a
``TimeoutError``, or a type the transport declares in ``io_errors``) is counted under its
reason, its message kept as the reason's last (:meth:`Metrics.last_errors`) and logged at
WARNING, rate-limited per reason. Any other exception from a transport is a bug: counted as
``bug:<ExceptionType>``, and its first occurrence per call site and type is kept with its
traceback (:meth:`Metrics.bugs`) and logged once at ERROR. Every message and traceback is
redacted first (:func:`redact`): a secret of the backend's config, a password in a URL or a
``password=`` parameter becomes ``***``. No key or value is ever recorded.
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import TransportError
from ..spec import StorageMetrics
from ..transport import is_io_error

_log = logging.getLogger("hicache_sdk.failures")

__all__ = ["LATENCY_BUCKETS_S", "BugRecord", "Metrics", "redact"]

_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:]*):[^\s/@]*@")
_SECRET_PARAM = re.compile(
    r"(?i)(?P<key>\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key)=)[^&\s'\"]+"
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` (non-empty strings), the password of every URL
    (``scheme://user:PASSWORD@host``) and the value of every ``password=`` / ``token=`` /
    ``secret=`` / ``api_key=``-like parameter replaced by ``***``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:***@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m['key']}***", text)


#: The longest message kept (a client library may put a whole reply in one).
MAX_MESSAGE = 1000


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


@dataclass(frozen=True)
class BugRecord:
    """The first exception of one type that a transport raised at one call site and that is
    not an I/O failure (a bug in the transport). ``site``: where the core called it
    (``"read"``, ``"write"``, ``"exists"``, ``"delete"``, ``"health"``, ...); ``error``: the
    exception's type name; ``message`` and ``traceback`` (formatted): redacted."""

    site: str
    error: str
    message: str
    traceback: str


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

    def __init__(self, *, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, _OpStats] = {}
        self._errors: dict[str, int] = {}
        self._warned: dict[str, float] = {}
        self._last: dict[str, str] = {}
        self._bugs: dict[tuple[str, str], BugRecord] = {}
        self._secrets: frozenset[str] = frozenset()
        self.add_secrets(secrets)
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

    def add_secrets(self, secrets: Iterable[object]) -> None:
        """Strings that :func:`redact` removes from every message kept or logged from now on
        (the backend's secret settings; ``None`` and non-strings are ignored)."""
        new = {s for s in secrets if isinstance(s, str) and s}
        with self._lock:
            self._secrets = self._secrets | new

    def redact(self, text: str) -> str:
        """``text`` with this backend's secrets, URL passwords and secret parameters removed."""
        return redact(text, self._secrets)

    def error(self, reason: str, n: int = 1, *, message: str | None = None) -> None:
        """Count ``n`` failures of kind ``reason`` (a short stable token). ``message``
        (redacted here) becomes the reason's last error (:meth:`last_errors`). The first
        failure of each reason is logged at WARNING with its message, then one line per
        60 s at most."""
        text = None if message is None else _clip(self.redact(message))
        now = time.monotonic()
        with self._lock:
            self._errors[reason] = self._errors.get(reason, 0) + n
            if text is not None:
                self._last[reason] = text
            last = self._warned.get(reason)
            if last is not None and now - last < 60.0:
                return
            self._warned[reason] = now
            total = self._errors[reason]
        _log.warning(
            "storage failure: %s%s (%d counted so far; counted in metrics.errors())",
            reason,
            "" if text is None else f": {text}",
            total,
        )

    def failure(self, site: str, exc: BaseException, io_errors: tuple[type[BaseException], ...] = ()) -> str:
        """Count ``exc``, raised by a transport call at ``site`` (module docs): an I/O
        failure under its reason (``TransportError.reason``, else the exception's type
        name), anything else as a bug (:meth:`bug`). Returns the reason counted."""
        if not is_io_error(exc, io_errors):
            return self.bug(site, exc)
        reason = exc.reason if isinstance(exc, TransportError) else type(exc).__name__
        self.error(reason, message=str(exc) or type(exc).__name__)
        return reason

    def bug(self, site: str, exc: BaseException) -> str:
        """Count ``exc`` under ``bug:<ExceptionType>``; its first occurrence at ``site`` is
        kept (:meth:`bugs`) and logged at ERROR with its traceback. Returns the reason."""
        name = type(exc).__name__[:59]
        reason = f"bug:{name}"
        key = (site, name)
        with self._lock:
            self._errors[reason] = self._errors.get(reason, 0) + 1
            first = key not in self._bugs
        if not first:
            return reason
        message = _clip(self.redact(str(exc)))
        tb = self.redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        with self._lock:
            if key in self._bugs:  # another thread recorded it meanwhile
                return reason
            self._bugs[key] = BugRecord(site, name, message, tb)
        _log.error(
            "transport bug in %s: %s: %s (counted as %r)\n%s", site, name, message, reason, tb.rstrip()
        )
        return reason

    def bugs(self) -> list[BugRecord]:
        """The first occurrence of each (call site, exception type) counted as a bug, in the
        order they happened."""
        with self._lock:
            return list(self._bugs.values())

    def last_errors(self) -> dict[str, str]:
        """Per failure reason, the message of its last I/O failure (redacted); reasons
        counted without an exception (by a transport's ``count_failure``) have none."""
        with self._lock:
            return dict(self._last)

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
