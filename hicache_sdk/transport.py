"""The small interface a backend author implements: move bytes of named objects.

A :class:`Transport` knows nothing of pages, pools, hit semantics or keys: the paged
adapter (:mod:`hicache_sdk.paged`) owns those, once, for every backend.

Buffers are lists of ``(address, nbytes)`` pairs (:data:`Segments`): one object is read
into, or written from, the concatenation of its segments in order. Addresses point at
memory that stays valid for the duration of the call only; a transport must not keep them
(the resilience layer may substitute SDK-owned staging memory).

Rules every transport follows:

* thread-safe: SGLang calls a backend from four threads at once;
* never raises for an I/O failure from ``exists``/``read``/``write``/``delete``: it
  reports a miss / ``False`` and counts the reason with :meth:`Transport.count_failure`
  (the adapter forwards it to its metrics); it may raise :class:`TransportError` to say
  "the whole batch failed" (the adapter turns that into misses and counts the reason);
* every call into a server has a bounded time (the resilience layer adds deadlines on
  top, but a transport must not block forever on its own);
* ``write`` is create-if-absent: an existing object is left untouched and counts as
  success, so concurrent writers never rewrite a page (``link``/rename-no-replace,
  ``SET NX``, ``If-None-Match: *``, Mooncake ``put``);
* an object is either wholly there or absent: no reader may see a partially written object.

One verb is optional: :meth:`Transport.read_ranges` reads byte ranges of one object. The
base class implements it with one whole read (:func:`read_ranges_whole`); a transport
that can read ranges natively overrides it, and :func:`has_read_ranges` (derived from
the override, never declared; a wrapper answers for the transport it wraps) tells
callers so. ``cheap_ranges`` says a native ``read_ranges`` costs about one request whatever
the number of ranges. The resilience layer carries the verb under its deadline, breaker
and staging rules, and offers it for many objects at once (:class:`RangedReads`).

A transport whose ``exists`` answers ``SIZE_UNKNOWN`` may also offer :class:`ExactSizes`
(the exact size of each object, one query per object); :func:`exact_sizes` asks it where it
is offered and falls back to ``exists`` elsewhere.
"""

from __future__ import annotations

import ctypes
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import ClassVar, TypeVar

from .capabilities import Capabilities
from .errors import TransportError

__all__ = [
    "SIZE_UNKNOWN",
    "DeadlineScoped",
    "ExactSizes",
    "FailureReasons",
    "Range",
    "RangedReads",
    "Segment",
    "Segments",
    "SizedTransfer",
    "Transport",
    "TransportError",
    "check_ranges",
    "check_reason",
    "exact_sizes",
    "has_read_ranges",
    "ranges_within",
    "read_ranges_whole",
    "is_io_error",
]

#: ``(address, nbytes)`` of one contiguous piece of memory.
Segment = tuple[int, int]
#: The scatter/gather list of one object.
Segments = Sequence[Segment]
#: One byte range of an object, for :meth:`Transport.read_ranges`: ``(offset, segments)``
#: covers bytes ``offset .. offset + total size of segments`` of the object.
Range = tuple[int, Segments]

# -- failure reasons ---------------------------------------------------------------------
# A transport never raises for a per-object I/O failure: it reports a miss and counts *why*
# through ``Transport.count_failure``, which lands in its :class:`FailureReasons`. The adapter
# binds that sink to its ``Metrics`` (``metrics.error``), so every reason appears in
# ``get_stats()``, ``hicache ping`` and the Prometheus exporter. Reasons are short stable
# tokens used as metric labels (``"connection"``, ``"timeout"``, ``"disk_full"``...):
# lowercase letters, digits and ``_``, at most 64 characters; anything else is a
# ``ValueError`` (a reason is never free text, so it can never carry a secret or a path).
_TOKEN = re.compile(r"(?:[a-z0-9_]{1,64}|bug:[A-Za-z_][A-Za-z0-9_]{0,59})\Z")

#: ``sink(reason, n)``: where counted reasons are forwarded (``Metrics.error``).
Sink = Callable[[str, int], None]


def check_reason(reason: object) -> str:
    """``reason`` if it is a valid token, else ``ValueError`` naming it. A token is
    ``[a-z0-9_]``, 1-64 chars (an I/O failure's reason), or ``bug:<ExceptionType>`` (an
    exception that is not an I/O failure: a bug in the transport, counted by type)."""
    if not isinstance(reason, str) or not _TOKEN.match(reason):
        raise ValueError(
            "failure reason must be a lowercase token ([a-z0-9_], 1-64 chars) or "
            f"'bug:<ExceptionType>', got {reason!r:.80}"
        )
    return reason


def is_io_error(exc: BaseException, io_errors: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether ``exc`` is an I/O failure: a :class:`TransportError`, an ``OSError`` (which
    ``TimeoutError`` and ``ConnectionError`` are), or one of ``io_errors`` (a transport's
    :attr:`Transport.io_errors`). Anything else a transport raises is a bug in it."""
    return isinstance(exc, (TransportError, OSError, TimeoutError)) or (
        bool(io_errors) and isinstance(exc, io_errors)
    )


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


#: Returned by :meth:`Transport.exists` for a present object whose size is not known cheaply.
SIZE_UNKNOWN = -1

F = TypeVar("F")


# -- features: what a transport (or a wrapper around one) offers beyond the base interface --
# A transport states a feature by subclassing its interface and implementing every method of
# it; a caller asks for it with ``transport.offers(Feature)``, never by probing attributes or
# walking ``inner``. (Plain classes, not ABCs, so that type checkers accept them as the
# argument of ``offers``.)


class DeadlineScoped:
    """A transport that bounds a whole batch of calls by one deadline (the resilience layer)."""

    def deadline_scope(self, op: str) -> AbstractContextManager[None]:
        """``with t.deadline_scope("read"):`` -- every call this thread makes through the
        transport inside the block ends by the end of one ``op`` started now."""
        raise NotImplementedError(f"{type(self).__name__} offers DeadlineScoped without deadline_scope")

    def deadline_passed(self) -> bool:
        """Whether this thread's :meth:`deadline_scope` has ended (a call made now would not
        start)."""
        raise NotImplementedError(f"{type(self).__name__} offers DeadlineScoped without deadline_passed")


class SizedTransfer:
    """A transport that reads or writes a batch whose objects' total sizes the caller gives
    (no re-validation of the segments), with an answer checked to be one ``bool`` per key."""

    def transfer_sized(
        self, op: str, keys: list[str], buffers: Sequence[Segments], sizes: list[int]
    ) -> list[bool]:
        """``read`` (``op="read"``) or ``write`` of ``keys`` into / from ``buffers``, whose
        totals are ``sizes``."""
        raise NotImplementedError(f"{type(self).__name__} offers SizedTransfer without transfer_sized")


class RangedReads:
    """A transport that reads byte ranges of many objects in one call, under one deadline
    (the resilience layer): ``read_ranges_batch(keys, ranges)[i]`` is
    ``read_ranges(keys[i], ranges[i])``."""

    def read_ranges_batch(self, keys: Sequence[str], ranges: Sequence[Sequence[Range]]) -> list[bool]:
        """One answer per key, as :meth:`Transport.read_ranges` gives it."""
        raise NotImplementedError(f"{type(self).__name__} offers RangedReads without read_ranges_batch")


class ExactSizes:
    """A transport whose :meth:`Transport.exists` may answer ``SIZE_UNKNOWN`` (sizes are not
    cheap to ask in a batch) but that can tell each object's exact stored size at the cost of
    a query per object (Mooncake's ``get_size``). Callers that need the size, not only the
    presence, ask :func:`exact_sizes`, which falls back to ``exists`` elsewhere."""

    def exact_sizes(self, keys: Sequence[str]) -> list[int | None]:
        """Per key: the stored size in bytes, or ``None`` when absent (or the query failed);
        never ``SIZE_UNKNOWN``. Errors as :meth:`Transport.exists`."""
        raise NotImplementedError(f"{type(self).__name__} offers ExactSizes without exact_sizes")


class Transport(ABC):
    """Existence, read, write and delete of many named objects.

    Subclasses set :attr:`capabilities` (only the store's own properties: ``persistent``,
    ``shared_across_processes``, ``ttl``, ``capacity_bound``, ``eviction``, ``delete``,
    ``health``, ``fault_injection``; the adapter adds its own) and :attr:`max_segments` (how
    many segments one object may be split into; ``1`` means the adapter gathers
    multi-segment pages through one staging copy before calling the transport).

    A transport whose every touch of caller memory cannot block may set
    :attr:`cancellable` and accept ``cancel`` (a :class:`~hicache_sdk.kit.cancel.CancelToken`)
    in :meth:`read` / :meth:`write`; see ``docs/transport-kit.md``.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()
    #: The most segments per object this transport accepts in one read/write.
    max_segments: ClassVar[int] = 1 << 30
    #: ``read``/``write`` accept ``cancel=`` and touch caller memory only inside
    #: ``cancel.guard()``: the resilience layer then runs deadline-bound transfers on the
    #: caller's memory (no staging copy) and cancels them at the deadline.
    cancellable: ClassVar[bool] = False
    #: Exception types that mean an I/O failure in this transport's client library (beside
    #: :class:`TransportError`, ``OSError`` and ``TimeoutError``, which always do): a call
    #: raising one is a miss counted under its reason. Any other exception is a bug: still a
    #: miss, but logged at ERROR with its traceback and counted as ``bug:<ExceptionType>``.
    io_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    #: A native :meth:`read_ranges` costs about one request whatever the number of ranges
    #: (a local file, an RDMA store); callers split a page into ranges only then.
    cheap_ranges: ClassVar[bool] = False
    #: This transport passes :meth:`read_ranges` on to the transport it wraps (``inner``):
    #: :func:`has_read_ranges` answers for that one.
    ranges_from_inner: ClassVar[bool] = False

    # -- failure reasons -----------------------------------------------------------------
    @property
    def failures(self) -> FailureReasons:
        """This transport's failure-reason sink (created on first use)."""
        sink: FailureReasons | None = self.__dict__.get("_hicache_failures")
        if sink is None:
            sink = self.__dict__.setdefault("_hicache_failures", FailureReasons())
        return sink

    @failures.setter
    def failures(self, sink: FailureReasons) -> None:  # wrappers share their inner's sink
        self.__dict__["_hicache_failures"] = sink

    def count_failure(self, reason: str, n: int = 1) -> None:
        """Count ``n`` failures of ``reason`` (a short lowercase token such as
        ``"connection"``, ``"timeout"``, ``"disk_full"``; see
        :mod:`hicache_sdk.transport`). The adapter forwards them to its metrics, so
        they reach ``get_stats()`` and ``hicache ping``."""
        self.failures.count(reason, n)

    # -- host memory -----------------------------------------------------------------------
    def register_memory(self, address: int, nbytes: int) -> None:
        """Memory the transport will be handed in ``read``/``write`` segments: each
        distinct host-pool buffer (by the adapter, when a pool is registered) and each
        staging buffer (by the resilience layer, before its first use). A zero-copy RDMA
        transport registers it with its engine here, once. Default: nothing. Raising makes
        that staging buffer unusable (its transfers miss) or fails the pool registration."""

    def unregister_memory(self, address: int, nbytes: int) -> None:
        """Undo :meth:`register_memory` for the same region: on ``close()`` (before
        :meth:`close`) and when a staging buffer is unmapped; never while a call that may
        use the region is running. Default: nothing. Errors are swallowed by the caller."""

    @abstractmethod
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        """For each key: the object's size in bytes, :data:`SIZE_UNKNOWN` when present
        but its size is not cheaply known, or ``None`` when absent. Duplicate keys get
        the same answer. Empty input returns ``[]``."""

    @abstractmethod
    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """Read object ``keys[i]`` into ``buffers[i]``.

        ``True`` only when the object exists and its size equals the total size of the
        segments and every byte was read. A missing object, a size mismatch or an I/O
        error gives ``False``; on ``False`` the buffer content is unspecified (the caller
        never uses it). ``len(keys) == len(buffers)`` (the adapter guarantees it).
        """

    @abstractmethod
    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """Create object ``keys[i]`` from ``buffers[i]`` unless it exists.

        ``True`` when the object now exists (written, or already present and left
        untouched). Publication is atomic: a concurrent reader sees the whole object or
        nothing. Duplicate keys in one batch are allowed: the first occurrence's bytes are
        the ones stored (a later copy never replaces them) and every occurrence reports
        that write's result (``TransportTests`` checks it; the paged adapter also writes
        only the first occurrence).
        """

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        """Read byte ranges of object ``key``: ``ranges[i] = (offset, segments)`` fills
        ``segments`` with the object's bytes from ``offset`` on.

        ``True`` only when the object exists, every range lies within it and every byte
        was read. A missing object, a range past its end (never a short read) or an I/O
        error gives ``False``, with the segments' content unspecified. An empty range
        (no bytes) within the object reads nothing; an empty list is ``True`` exactly when
        the object exists. Ranges may overlap and come in any order. ``ValueError`` for a
        negative offset or a malformed range, before any I/O.

        Optional: this default reads the whole object once (:func:`read_ranges_whole`);
        a transport that reads ranges natively overrides it (:func:`has_read_ranges`).
        """
        return read_ranges_whole(self, key, ranges)

    @abstractmethod
    def delete(self, keys: Sequence[str]) -> None:
        """Remove the objects if present; missing keys are ignored; errors are swallowed."""

    def clear(self, prefix: str) -> None:
        """Remove every object whose name starts with ``prefix``, within this transport's
        own namespace/root (never more than that); ``""`` removes every object there.

        The default raises ``NotImplementedError``; transports that declare the
        ``delete`` capability and can enumerate their namespace implement it."""
        raise NotImplementedError(f"{type(self).__name__} cannot clear its namespace")

    def close(self) -> None:
        """Release connections and files. Idempotent."""

    def health(self) -> bool:
        """A cheap liveness probe used by the circuit breaker's half-open state."""
        return True

    def io_error_types(self) -> tuple[type[BaseException], ...]:
        """The exception types that mean an I/O failure in this transport: its
        :attr:`io_errors`; a wrapper (:class:`~hicache_sdk.kit.wrapping.WrappingTransport`)
        adds those of the transport it wraps, so that a wrapper that does not restate them
        never turns them into bugs."""
        return tuple(self.io_errors)

    def offers(self, feature: type[F]) -> F | None:
        """This transport as ``feature`` (a feature interface: :class:`DeadlineScoped`,
        :class:`SizedTransfer`) when it offers it, else ``None``. A transport offers the
        features it subclasses; a wrapper also offers those of the transport it wraps that it
        passes on (:attr:`~hicache_sdk.kit.wrapping.WrappingTransport.passes_on`)."""
        return self if isinstance(self, feature) else None


def exact_sizes(transport: Transport, keys: Sequence[str]) -> list[int | None]:
    """Per key, the stored size as :meth:`ExactSizes.exact_sizes` answers it where
    ``transport`` offers :class:`ExactSizes`; otherwise ``transport.exists(keys)`` (which may
    answer ``SIZE_UNKNOWN``)."""
    sized = transport.offers(ExactSizes)
    return sized.exact_sizes(keys) if sized is not None else transport.exists(keys)


def ranges_within(ranges: Sequence[tuple[int, int, object]], size: int) -> bool:
    """Whether every ``(offset, nbytes, _)`` lies within an object of ``size`` bytes."""
    return all(offset + n <= size for offset, n, _ in ranges)


def read_ranges_whole(transport: Transport, key: str, ranges: Sequence[Range]) -> bool:
    """``transport.read_ranges(key, ranges)`` by one ``exists`` (for the size) and one whole
    ``read`` into scratch memory, each range then copied out: the same answers as a native
    implementation (a missing object, an unknown size, a range past the end or a failed read
    is ``False``)."""
    checked = check_ranges(ranges)
    size = transport.exists([key])[0]
    if size is None or size == SIZE_UNKNOWN or not ranges_within(checked, size):
        return False
    if not checked or all(n == 0 for _, n, _ in checked):
        return True
    scratch = (ctypes.c_char * size)()
    base = ctypes.addressof(scratch)
    if not transport.read([key], [[(base, size)]])[0]:
        return False
    for offset, _, segs in checked:
        src = base + offset
        for address, n in segs:
            if n:
                ctypes.memmove(address, src, n)
            src += n
    return True


def has_read_ranges(transport: Transport) -> bool:
    """Whether ``transport`` reads byte ranges natively (its class overrides
    :meth:`Transport.read_ranges`); otherwise a ranged read is one whole read. A wrapper
    that passes ranged reads on (``ranges_from_inner``) answers for its ``inner``."""
    while type(transport).ranges_from_inner:
        inner = getattr(transport, "inner", None)
        if not isinstance(inner, Transport):
            break
        transport = inner
    return type(transport).read_ranges is not Transport.read_ranges


def check_ranges(ranges: Sequence[Range], arg: str = "ranges") -> list[tuple[int, int, Segments]]:
    """``(offset, nbytes, segments)`` per range; ``ValueError`` naming ``arg[i]`` for a range
    that is not ``(offset >= 0, [(address, nbytes >= 0), ...])`` of ints."""
    if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Sequence):
        raise ValueError(f"{arg} must be a sequence of (offset, segments), got {type(ranges).__name__}")
    out: list[tuple[int, int, Segments]] = []
    for i, item in enumerate(ranges):
        if not isinstance(item, tuple) or len(item) != 2:
            raise ValueError(f"{arg}[{i}] must be an (offset, segments) pair, got {item!r:.80}")
        offset, segs = item
        if type(offset) is not int or offset < 0:
            raise ValueError(f"{arg}[{i}]: offset must be an int >= 0, got {offset!r:.40}")
        total = 0
        for seg in segs:
            if not isinstance(seg, tuple) or len(seg) != 2:
                raise ValueError(f"{arg}[{i}]: invalid segment {seg!r:.80}")
            addr, n = seg
            if type(addr) is not int or type(n) is not int or n < 0 or (n and addr <= 0):
                raise ValueError(f"{arg}[{i}]: invalid segment ({addr!r}, {n!r})")
            total += n
        out.append((offset, total, segs))
    return out
