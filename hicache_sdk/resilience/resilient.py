"""``ResilientTransport``: the policies of :mod:`.policies` composed around any
:class:`~hicache_sdk.transport.Transport`, in this one place.

A call goes through these steps, outermost first:

1. **Deadline.** The call's end is fixed when it starts: ``Deadline.exists_s`` for
   ``exists`` (and ``health``), ``transfer_s`` for ``read``, ``write`` and ``delete``, and
   never later than the end of an enclosing :meth:`ResilientTransport.deadline_scope` (the
   adapter opens one per batch, so that a read's follow-up existence check, or an existence
   query's deletion of a wrong-sized object, fits in the caller's one deadline). Everything
   below runs before that end; a step that would start after it does not start (counter
   ``deadline_<op>``, reason ``deadline``). A deadline of ``0`` runs the call inline in the
   caller's thread: zero-copy, no staging, no thread hop, bounded only by the transport's own
   timeouts.
2. **Admission** (:class:`~.breaker.CircuitBreaker`, built from ``Breaker``). A closed
   wrapper, or an open breaker (after ``failures`` consecutive failures, or while the
   abandoned-call budget is exhausted), refuses at once: misses / ``False``, reason
   ``"closed"`` / ``"breaker_open"``. In the half-open state one call is the probe:
   ``health()`` when the transport declares the ``health`` capability (under the exists
   deadline, within the call's own), otherwise the call itself. Existence has a breaker of
   its own (``exists_breaker_state``): a slow or failing existence query never opens the
   breaker transfers use. The other way round, while the *transfer* breaker is open
   ``exists`` reports every page absent (a hit that cannot be read is a miss).
3. **The call, on a worker** (:class:`~.deadline.DeadlineRunner`): the caller waits until
   the end; a call that outlives it is *abandoned* (counters ``deadline_<op>``,
   ``abandoned_<op>s``; a breaker failure) and runs on. At ``max_abandoned`` such calls the
   transfer breaker is held open until they drain. The failure injector (tests) and
   :class:`~.retry.Retry` (I/O failures only, never an attempt past the end) run inside.
4. **Memory safety**: an abandoned transfer never touches memory someone else may use.
   ``caller_owns_memory=True`` (inside SGLang: the host pool's slots are reused as soon as we
   return): a transport that declares ``cancellable`` works on the caller's memory and is
   cancelled at the end (``cancelled_at_deadline``; once ``cancel()`` returns it touches that
   memory no more); any other goes through SDK-owned staging (``Staging``): a read lands
   there and is copied out only if it completed in time (``staging_copies_in``), a write is
   snapshotted there before it starts (``staging_copies_out``), in chunks of at most
   ``capacity / callers`` bytes, and staging is released only when the I/O ends. No staging
   left: the remaining objects miss (``staging_exhausted``). ``caller_owns_memory=False``
   (the SDK owns the pool): the caller's memory goes to the transport and a
   :class:`~.policies.Quarantine` keeps those slots out of reuse until the I/O ends.
   Per call, a caller that can itself keep its memory out of reuse until the I/O ends
   opens :meth:`ResilientTransport.held` with a quarantine of its own: inside it, a
   transport that is not cancellable gets the caller's memory as is (no staging; counter
   ``held_<op>s``, objects), and an abandoned call releases that quarantine only when it
   ends (the LMCache binding does not report a task before then; ``docs/resilience.md``).
5. **Errors** become misses: an I/O failure under its reason, any other exception as a bug
   (``bug:<ExceptionType>``, logged once with its traceback; see
   :meth:`~hicache_sdk.metrics.backend.Metrics.failure`). ``ValueError`` (bad arguments)
   propagates, from this wrapper's checks and from the transport.
6. **Metrics**: ops ``t_exists``/``t_read``/``t_write``/``t_delete`` (pages and bytes count
   the objects found or moved), gauges ``breaker_state``, ``exists_breaker_state``,
   ``abandoned_calls``, ``staging_bytes_in_use``, ``staging_bytes_reserved``.
7. **Memory registration**: :meth:`register_memory` is forwarded and remembered;
   :meth:`close` unregisters every remembered region once running calls have drained, before
   the transport is closed. Staging buffers are registered when mapped.

**Ranged reads** (:meth:`ResilientTransport.read_ranges`, and
:meth:`~ResilientTransport.read_ranges_batch` for many objects in one call; a transport that
offers :class:`~hicache_sdk.transport.RangedReads` itself gets the batch in one call) are reads: the
transfer deadline (within an enclosing scope), the transfer breaker, the same memory rules
(step 4: staged by default, the ranges landing in SDK-owned staging and copied out only
when the call answered in time, so an abandoned ranged read never writes into the caller's
memory; quarantined slots when the SDK owns the memory; inline at a deadline of ``0``), and
failures as misses; metrics op ``t_read_ranges`` (bytes count the ranges read).

``exists`` asks at most :data:`EXISTS_CHUNK` keys per transport call, one chunk after another
on one worker: at the end the chunks answered so far stand and the rest are absent.
:meth:`~ResilientTransport.exact_sizes` (offered where the transport offers
:class:`~hicache_sdk.transport.ExactSizes`) follows the same rules.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from ..errors import TransportError
from ..kit.batches import count_is
from ..kit.cancel import CancelToken
from ..kit.segments import copy_runs
from ..metrics.backend import Metrics
from ..transport import (
    DeadlineScoped,
    ExactSizes,
    Range,
    RangedReads,
    Segments,
    SizedTransfer,
    Transport,
    check_ranges,
    is_io_error,
)
from .breaker import CircuitBreaker
from .deadline import Call, DeadlineRunner
from .inject import FailureInjector
from .policies import Quarantine, Resilience, ResilienceConfig, Staging
from .staging import StagingBuffer, StagingPool

__all__ = ["EXISTS_CHUNK", "Quarantine", "ResilienceConfig", "ResilientTransport"]

T = TypeVar("T")
F = TypeVar("F")

#: The most keys one ``exists`` call of the transport is asked at a time.
EXISTS_CHUNK = 4096

# the outcome of one guarded call
_OK, _FAILED, _REFUSED, _ABANDONED = "ok", "failed", "refused", "abandoned"

_ABANDON_COUNTER = {
    "exists": "abandoned_exists",
    "read": "abandoned_reads",
    "write": "abandoned_writes",
    "delete": "abandoned_deletes",
    "health": "abandoned_health",
}


class _ThreadSetting:
    """Sets attribute ``name`` of the thread's ``local`` to ``value`` for a ``with`` block, then
    back to what it was: :meth:`ResilientTransport.deadline_scope` (``end``) and
    :meth:`ResilientTransport.held` (``held``)."""

    __slots__ = ("_local", "_name", "_prev", "_value")

    def __init__(self, local: threading.local, name: str, value: object) -> None:
        self._local, self._name, self._value = local, name, value

    def __enter__(self) -> None:
        self._prev = getattr(self._local, self._name, None)
        setattr(self._local, self._name, self._value)

    def __exit__(self, *exc: object) -> None:
        setattr(self._local, self._name, self._prev)


class ResilientTransport(Transport, DeadlineScoped, SizedTransfer, RangedReads, ExactSizes):
    """``inner`` with the policies ``policies`` (a :class:`~.policies.Resilience`, or a config
    with the shared keys, read by :meth:`Resilience.from_config`) around it; see the module
    docs. :func:`hicache_sdk.resilience.wrap_transport` builds one.

    ``injector``: failure injection (tests); ``clock``: the clock of the breakers and of
    deadlines (tests inject a fake one); ``start_open``: start with the transfer breaker open;
    ``probe_at_start``: call ``health()`` once, under the exists deadline, and start open if it
    fails (default: when the transport declares ``health``); ``caller_owns_memory`` /
    ``quarantine``: step 4 of the module docs; ``close_timeout_s``: how long :meth:`close`
    waits for running calls (default ``max(1, min(transfer_s, 10))``)."""

    def __init__(
        self,
        inner: Transport,
        policies: Resilience | ResilienceConfig,
        metrics: Metrics,
        *,
        injector: FailureInjector | None = None,
        clock: Callable[[], float] = time.monotonic,
        start_open: bool = False,
        probe_at_start: bool | None = None,
        caller_owns_memory: bool = True,
        quarantine: Quarantine | None = None,
        close_timeout_s: float | None = None,
    ) -> None:
        if not caller_owns_memory and quarantine is None:
            raise ValueError("quarantine: required when caller_owns_memory is False")
        p = policies if isinstance(policies, Resilience) else Resilience.from_config(policies)
        #: The policies. Replacing it (``dataclasses.replace``) changes the deadline and the
        #: retry policy of the calls that start afterwards; the breakers, the worker pool and
        #: the staging memory are built once, here.
        self.policies = p
        self._inner = inner
        self.capabilities = inner.capabilities  # type: ignore[misc]
        self.max_segments = inner.max_segments  # type: ignore[misc]
        self.cheap_ranges = inner.cheap_ranges  # type: ignore[misc]
        self.failures = inner.failures
        self._io_errors = inner.io_error_types()
        self.io_errors = self._io_errors  # type: ignore[misc]
        self._metrics = metrics
        self._injector = injector
        self._clock = clock
        self._owns = caller_owns_memory
        self._quarantine = quarantine
        self._local = threading.local()  # the end of this thread's deadline_scope
        self._regions: dict[tuple[int, int], None] = {}
        self._regions_lock = threading.Lock()
        self._close_s = (
            close_timeout_s if close_timeout_s is not None else max(1.0, min(p.deadline.transfer_s, 10.0))
        )
        self._closed = False
        self._breaker = p.breaker.create(clock=clock, on_state=partial(metrics.gauge, "breaker_state"))
        self._exists_breaker = p.breaker.create(
            clock=clock, on_state=partial(metrics.gauge, "exists_breaker_state")
        )
        metrics.gauge("breaker_state", self._breaker.state)
        metrics.gauge("exists_breaker_state", self._exists_breaker.state)
        metrics.gauge("abandoned_calls", 0)
        self._runner = DeadlineRunner(
            p.staging.callers + p.deadline.max_abandoned + 1,
            on_abandon_change=self._on_abandon_change,
            follow_caller_cpu=p.deadline.follow_caller_cpu,
        )
        self._staging = StagingPool(
            p.staging.capacity,
            register=inner.register_memory,
            unregister=inner.unregister_memory,
            on_usage=self._on_staging_usage,
        )
        self._probe_health = bool(inner.capabilities.health)
        if start_open:
            self._breaker.trip()
        elif (self._probe_health if probe_at_start is None else probe_at_start) and not self._health_probe(
            self._end("health")
        ):
            metrics.count("breaker_start_open")
            self._breaker.trip()

    # -- parts -----------------------------------------------------------------------

    @property
    def inner(self) -> Transport:
        return self._inner

    @property
    def breaker(self) -> CircuitBreaker:
        """The breaker of transfers (read, write, delete, health)."""
        return self._breaker

    @property
    def exists_breaker(self) -> CircuitBreaker:
        """The breaker of existence queries (never opened by transfers, nor they by it)."""
        return self._exists_breaker

    @property
    def staging(self) -> StagingPool:
        return self._staging

    @property
    def abandoned(self) -> int:
        """Abandoned calls still running."""
        return self._runner.abandoned

    def set_injector(self, injector: FailureInjector | None) -> None:
        """Install (or remove, with ``None``) a failure injector."""
        self._injector = injector

    def deadline_scope(self, op: str) -> _ThreadSetting:
        """``with rt.deadline_scope("read"):`` -- every call this thread makes through this
        wrapper inside the block ends by the end of one ``op`` started now (or earlier, when
        its own deadline or an enclosing scope's ends first): the deadline of a whole batch."""
        return _ThreadSetting(self._local, "end", self._end(op))

    def held(self, quarantine: Quarantine) -> _ThreadSetting:
        """``with rt.held(q):`` -- reads and writes this thread makes through this wrapper
        inside the block, on a transport that is not cancellable, take the caller's memory
        as is (no staging copy): ``q.hold(buffers)`` before the call starts and
        ``q.release(buffers)`` once it has ended (for an abandoned call: when its I/O ends,
        after the caller got its misses). The caller promises that, between the two, the
        memory is neither reused nor freed -- e.g. by reporting its own result only after
        ``release``. Calls without a deadline run inline as always; a cancellable transport
        is cancelled at the deadline as always (it needs no quarantine)."""
        return _ThreadSetting(self._local, "held", quarantine)

    def deadline_passed(self) -> bool:
        """Whether this thread's :meth:`deadline_scope` has ended: a call made now would not
        start (a wrapper that wants to ask the store after a failure can defer the question)."""
        end = getattr(self._local, "end", None)
        return end is not None and self._clock() >= end

    # -- step 1: deadlines ---------------------------------------------------------------

    def _end(self, op: str, within: float | None = None) -> float | None:
        """The end (on the clock) of an ``op`` starting now: its own deadline, cut by
        ``within`` and by this thread's scope; ``None`` when nothing bounds it."""
        s = self.policies.deadline.seconds(op)
        end = None if s <= 0 else self._clock() + s
        for bound in (within, getattr(self._local, "end", None)):
            if bound is not None:
                end = bound if end is None else min(end, bound)
        return end

    def _expired(self, op: str, end: float | None) -> bool:
        """Whether ``end`` has passed (then counted: the step is not started)."""
        if end is None or self._clock() < end:
            return False
        self._metrics.count(f"deadline_{op}")
        self._metrics.error("deadline", message=f"{op}: the caller's deadline passed before it started")
        return True

    # -- step 2: admission ---------------------------------------------------------------

    def _admit(self, end: float | None) -> bool:
        if self._closed:
            self._metrics.error("closed")
            return False
        allowed, probe = self._breaker.allow()
        if not allowed:
            self._metrics.count("breaker_rejected")
            self._metrics.error("breaker_open")
            return False
        if probe and self._probe_health and not self._health_probe(end):
            self._metrics.error("breaker_open")  # the probe failed: the breaker re-opened
            return False
        return True

    def _health_probe(self, end: float | None) -> bool:
        """``health()`` under the exists deadline (within ``end``); False on any failure."""
        status, result = self._call("health", self._inner.health, self._end("health", end), ok_if=bool)
        return status == _OK and bool(result)

    # -- step 3: the call ----------------------------------------------------------------

    def _call(
        self,
        op: str,
        fn: Callable[[], T],
        end: float | None,
        *,
        breaker: CircuitBreaker | None = None,
        ok_if: Callable[[T], bool] | None = None,
        release: Callable[[], None] | None = None,
        on_abandon: Callable[[], None] | None = None,
    ) -> tuple[str, T | None]:
        """Run ``fn`` (with the injector and the retry policy) by ``end``: inline when ``op``
        has no deadline, else on a worker. Reports to ``breaker`` (the transfer breaker by
        default): success, or failure for an exception, an abandoned call or a result for
        which ``ok_if`` is false. ``release`` runs when an abandoned call ends (it frees the
        memory the call could touch); ``on_abandon`` runs in the caller's thread right after
        the call is abandoned. Returns ``(status, result)``; ``ValueError`` propagates. A
        refused call (closed runner, or ``end`` already past) was never started: the caller
        releases its memory."""
        brk = breaker if breaker is not None else self._breaker
        if self._expired(op, end):
            return _REFUSED, None
        job = self._attempts(op, fn, end)
        if self.policies.deadline.seconds(op) <= 0:  # inline
            try:
                result = job()
            except ValueError:
                raise
            except Exception as e:
                self._failed(op, e, brk)
                return _FAILED, None
            self._judge(result, ok_if, brk)
            return _OK, result
        assert end is not None
        try:
            in_time, call = self._runner.run(job, max(end - self._clock(), 0.0), self._late(release))
        except RuntimeError:  # shut down concurrently
            self._metrics.error("closed")
            return _REFUSED, None
        if not in_time:
            if on_abandon is not None:
                on_abandon()
            self._metrics.count(f"deadline_{op}")
            self._metrics.count(_ABANDON_COUNTER[op])
            self._metrics.error("deadline", message=f"{op}: no answer within the deadline")
            brk.record_failure()
            return _ABANDONED, None
        if call.error is not None:
            if isinstance(call.error, ValueError):
                raise call.error
            self._failed(op, call.error, brk)
            return _FAILED, None
        self._judge(call.result, ok_if, brk)  # type: ignore[arg-type]
        return _OK, call.result

    def _attempts(self, op: str, fn: Callable[[], T], end: float | None) -> Callable[[], T]:
        """``fn`` behind the failure injector, repeated by the retry policy."""
        inj, retry = self._injector, self.policies.retry
        attempt = fn
        if inj is not None:

            def attempt() -> T:
                inj.before(op)
                return fn()

        if retry.retries == 0:
            return attempt

        def on_retry(e: BaseException) -> None:
            self._metrics.count("retries")
            self._metrics.failure(op, e, self._io_errors)

        def retried() -> T:
            return retry.call(attempt, is_io=self._is_io, until=end, clock=self._clock, on_retry=on_retry)

        return retried

    def _is_io(self, e: BaseException) -> bool:
        return is_io_error(e, self._io_errors)

    @staticmethod
    def _judge(result: T, ok_if: Callable[[T], bool] | None, brk: CircuitBreaker) -> None:
        if ok_if is None or ok_if(result):
            brk.record_success()
        else:
            brk.record_failure()

    def _failed(self, op: str, e: BaseException, brk: CircuitBreaker) -> None:
        self._metrics.failure(op, e, self._io_errors)
        brk.record_failure()

    def _late(self, release: Callable[[], None] | None) -> Callable[[Call[Any]], None]:
        """The hook run when an abandoned call ends: count it, then free its memory."""

        def on_late(call: Call[Any]) -> None:
            self._metrics.count("late_completions" if call.started else "abandoned_skipped")
            if release is not None:
                release()

        return on_late

    def _on_abandon_change(self, n: int) -> None:
        self._metrics.gauge("abandoned_calls", n)
        held = n > 0 and n >= self.policies.deadline.max_abandoned
        if held != self._breaker.held:
            if held:
                self._metrics.count("abandoned_budget_exhausted")
            self._breaker.set_held(held)

    def _on_staging_usage(self, in_use: int, reserved: int) -> None:
        self._metrics.gauge("staging_bytes_in_use", in_use)
        self._metrics.gauge("staging_bytes_reserved", reserved)

    def _record(self, op: str, t0: float, pages: int, nbytes: int, ok: bool) -> None:
        self._metrics.record(op, pages=pages, nbytes=nbytes, seconds=time.perf_counter() - t0, ok=ok)

    # -- Transport: existence --------------------------------------------------------------

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        """Sizes / ``None``; all ``None`` when refused or failed, and ``None`` past the
        answered chunks at the deadline (module docs)."""
        return self._existence(keys, self._inner.exists)

    def offers(self, feature: type[F]) -> F | None:
        """As :meth:`Transport.offers`; :class:`ExactSizes` only where the inner transport
        offers it."""
        if feature is ExactSizes and self._inner.offers(ExactSizes) is None:
            return None
        return super().offers(feature)

    def exact_sizes(self, keys: Sequence[str]) -> list[int | None]:
        """The inner transport's :meth:`~hicache_sdk.transport.ExactSizes.exact_sizes` under
        the rules of :meth:`exists` (its deadline, breakers and metrics); ``exists`` where
        the inner transport does not offer it."""
        sized = self._inner.offers(ExactSizes)
        return self._existence(keys, sized.exact_sizes if sized is not None else self._inner.exists)

    def _existence(
        self, keys: Sequence[str], ask: Callable[[Sequence[str]], list[int | None]]
    ) -> list[int | None]:
        n = len(keys)
        if n == 0:
            return []
        t0 = time.perf_counter()
        end = self._end("exists")
        if self._closed:
            self._metrics.error("closed")
        else:
            # Transfers down: a hit could not be read, so nothing is reported present. The
            # query may be the transfer breaker's half-open probe (health() when declared,
            # else the query itself).
            allowed, probe = self._breaker.allow()
            if not allowed or (probe and self._probe_health and not self._health_probe(end)):
                self._metrics.count("exists_refused_transfers_down")
                self._metrics.error("breaker_open")
            elif not self._exists_breaker.allow()[0]:
                self._metrics.count("breaker_rejected")
                self._metrics.error("exists_breaker_open")
            else:
                out, ok = self._ask_exists(keys, end, ask)
                if probe and not self._probe_health:
                    (self._breaker.record_success if ok else self._breaker.record_failure)()
                self._record("t_exists", t0, n - count_is(out, None), 0, ok)
                return out
        self._record("t_exists", t0, 0, 0, False)
        return [None] * n

    def _ask_exists(
        self, keys: Sequence[str], end: float | None, ask: Callable[[Sequence[str]], list[int | None]]
    ) -> tuple[list[int | None], bool]:
        """The transport's answers (``ask``: its ``exists`` or ``exact_sizes``) by ``end``
        (exists breaker), :data:`EXISTS_CHUNK` keys per call; ``True`` when every chunk was
        answered."""
        n = len(keys)
        if n <= EXISTS_CHUNK:  # the usual query: one call, its answers as given (no copies)
            status, got = self._call(
                "exists", partial(_answers, ask, keys), end, breaker=self._exists_breaker
            )
            return (got, True) if status == _OK and got is not None else ([None] * n, False)
        parts: list[list[int | None]] = []
        lock = threading.Lock()
        stop = [False]

        def job() -> bool:
            for a in range(0, n, EXISTS_CHUNK):
                part = _answers(ask, keys[a : a + EXISTS_CHUNK])
                with lock:
                    if stop[0]:
                        return False
                    parts.append(part)
            return True

        def on_abandon() -> None:
            with lock:
                stop[0] = True

        status, _ = self._call("exists", job, end, breaker=self._exists_breaker, on_abandon=on_abandon)
        out: list[int | None] = []
        with lock:
            stop[0] = True
            for part in parts:
                out += part
        return out + [None] * (n - len(out)), status == _OK

    # -- Transport: transfers ------------------------------------------------------------

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """See :meth:`Transport.read`; misses on refusal, failure, deadline or no staging."""
        return self._transfer("read", keys, buffers)

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        """See :meth:`Transport.write`; ``False`` on refusal, failure, deadline or no
        staging. An abandoned write may still publish -- only the snapshot taken before the
        call (or, without staging, slots the quarantine keeps)."""
        return self._transfer("write", keys, buffers)

    def _transfer(self, op: str, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        if len(keys) != len(buffers):
            raise ValueError(f"buffers: expected {len(keys)} entries (one per key), got {len(buffers)}")
        return self.transfer_sized(op, list(keys), buffers, _segment_sizes("buffers", buffers))

    def transfer_sized(
        self, op: str, keys: list[str], buffers: Sequence[Segments], sizes: list[int]
    ) -> list[bool]:
        """:meth:`read` (``op="read"``) or :meth:`write` for a caller that built the batch
        itself and knows each object's total size (the adapter): no re-validation of the
        segments. ``keys`` and ``buffers`` are not modified."""
        n = len(keys)
        if n == 0:
            return []
        t0 = time.perf_counter()
        out = [False] * n
        end = self._end(op)
        if not self._admit(end):
            self._record(f"t_{op}", t0, 0, 0, False)
            return out
        held: Quarantine | None = getattr(self._local, "held", None)
        if self.policies.deadline.seconds(op) <= 0 or not self._owns:
            ok = self._direct(op, keys, buffers, out, end)
        elif self._inner.cancellable:
            ok = self._cancellable(op, keys, buffers, out, end)
        elif held is not None:
            self._metrics.count(f"held_{op}s", n)
            ok = self._direct(op, keys, buffers, out, end, held)
        else:
            ok = self._staged(op, keys, buffers, sizes, out, end)
        if all(out):
            self._record(f"t_{op}", t0, n, sum(sizes), ok)
        else:
            self._record(f"t_{op}", t0, sum(out), sum(s for s, o in zip(sizes, out) if o), ok)
        return out

    def _move(
        self, op: str, keys: list[str], buffers: Sequence[Segments], **kw: Any
    ) -> Callable[[], list[bool]]:
        fn = self._inner.read if op == "read" else self._inner.write
        return partial(_answers, fn, keys, buffers, **kw)

    def _direct(
        self,
        op: str,
        keys: list[str],
        buffers: Sequence[Segments],
        out: list[bool],
        end: float | None,
        held: Quarantine | None = None,
    ) -> bool:
        """The caller's memory to the transport: inline, or (the SDK owns the memory, or
        the caller holds it: ``held``) on a worker with the slots quarantined until the I/O
        ends."""
        q = None
        if self.policies.deadline.seconds(op) > 0:
            q = held if held is not None else (self._quarantine if not self._owns else None)
        if q is None:
            status, got = self._call(op, self._move(op, keys, buffers), end)
        else:
            q.hold(buffers)
            try:
                status, got = self._call(
                    op, self._move(op, keys, buffers), end, release=partial(q.release, buffers)
                )
            except BaseException:
                q.release(buffers)
                raise
            if status != _ABANDONED:
                q.release(buffers)
        if status != _OK or got is None:
            return False
        out[:] = map(bool, got)
        return True

    def _cancellable(
        self, op: str, keys: list[str], buffers: Sequence[Segments], out: list[bool], end: float | None
    ) -> bool:
        """The caller's memory to a cancellable transport, cancelled at the end."""
        token = CancelToken()

        def on_abandon() -> None:
            token.cancel()  # returns once no guarded touch of caller memory is running
            self._metrics.count("cancelled_at_deadline")

        status, got = self._call(op, self._move(op, keys, buffers, cancel=token), end, on_abandon=on_abandon)
        if status != _OK or got is None:
            return False
        out[:] = map(bool, got)
        return True

    def _staged(
        self,
        op: str,
        keys: list[str],
        buffers: Sequence[Segments],
        sizes: list[int],
        out: list[bool],
        end: float | None,
    ) -> bool:
        """Through SDK-owned staging, chunk by chunk, all by ``end`` (module docs, step 4)."""
        staging = self.policies.staging
        for a, b in staging.chunks(sizes):
            if self._expired(op, end):
                return False
            offs, need = Staging.slots(sizes[a:b])
            buf = self._acquire_staging(need)
            if buf is None:
                return False
            starts = [buf.address + o for o in offs]
            staged = [[seg] for seg in zip(starts, sizes[a:b])]

            def copy_out(a: int = a, b: int = b, starts: list[int] = starts) -> None:
                copy_runs(Staging.runs(True, starts, buffers[a:b]))
                self._metrics.count("staging_copies_out", b - a)

            def copy_in(got: list[Any], a: int = a, b: int = b, starts: list[int] = starts) -> None:
                if op == "read" and any(got):
                    keep = range(b - a) if all(got) else [i for i, g in enumerate(got) if g]
                    copy_runs(Staging.runs(False, [starts[i] for i in keep], [buffers[a + i] for i in keep]))
                    self._metrics.count("staging_copies_in", len(keep))

            got = self._call_staged(
                op,
                self._move(op, keys[a:b], staged),
                end,
                buf,
                copy_in,
                before=copy_out if op == "write" else None,
            )
            if got is None:
                return False
            out[a:b] = map(bool, got)
        return True

    def _acquire_staging(self, need: int) -> Any:
        """A staging buffer of ``need`` bytes, or ``None`` (counted) when staging is exhausted."""
        buf = self._staging.acquire(need)
        if buf is None:
            self._metrics.count("staging_exhausted")
            self._metrics.error("staging_exhausted")
        return buf

    def _call_staged(
        self,
        op: str,
        job: Callable[[], Any],
        end: float | None,
        buf: Any,
        copy_in: Callable[[Any], None],
        *,
        before: Callable[[], None] | None = None,
    ) -> Any:
        """``before()``, then ``job`` through :meth:`_call` with the staging buffer ``buf``, then
        ``copy_in(answers)``; the answers, or ``None`` for a call that failed or ran out of
        time. ``buf`` is released here, or by the late hook once an abandoned I/O ends."""
        try:
            if before is not None:
                before()
            status, got = self._call(op, job, end, release=self._releaser(buf))
        except BaseException:
            self._staging.release(buf)
            raise
        if status == _ABANDONED:
            return None  # staging is released by the late hook, when the I/O ends
        try:
            if status != _OK or got is None:
                return None
            copy_in(got)
            return got
        finally:
            self._staging.release(buf)

    def _releaser(self, buf: StagingBuffer) -> Callable[[], None]:
        return lambda: self._staging.release(buf)

    # -- Transport: ranged reads ---------------------------------------------------------

    ranges_from_inner = True

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        """See :meth:`Transport.read_ranges`; a miss on refusal, failure, deadline or no
        staging (module docs: *Ranged reads*)."""
        return self.read_ranges_batch([key], [ranges])[0]

    def read_ranges_batch(self, keys: Sequence[str], ranges: Sequence[Sequence[Range]]) -> list[bool]:
        """``read_ranges(keys[i], ranges[i])`` for every ``i``, in one call under one
        deadline (module docs: *Ranged reads*). ``ValueError`` for a malformed range,
        before any I/O."""
        if len(keys) != len(ranges):
            raise ValueError(f"ranges: expected {len(keys)} entries (one per key), got {len(ranges)}")
        checked = [check_ranges(r, f"ranges[{i}]") for i, r in enumerate(ranges)]
        n = len(keys)
        if n == 0:
            return []
        keys = list(keys)
        t0 = time.perf_counter()
        out = [False] * n
        sizes = [sum(nb for _, nb, _ in c) for c in checked]
        end = self._end("read")
        if not self._admit(end):
            self._record("t_read_ranges", t0, 0, 0, False)
            return out
        if self.policies.deadline.seconds("read") <= 0 or not self._owns:
            ok = self._ranges_direct(keys, checked, out, end)
        else:
            ok = self._ranges_staged(keys, checked, sizes, out, end)
        self._record("t_read_ranges", t0, sum(out), sum(s for s, o in zip(sizes, out) if o), ok)
        return out

    def _ranges_job(self, keys: list[str], ranges: Sequence[Sequence[Range]]) -> Callable[[], list[bool]]:
        inner = self._inner
        batch = inner.offers(RangedReads)

        def job() -> list[bool]:
            if batch is not None:  # the transport reads many objects' ranges in one call
                got = batch.read_ranges_batch(keys, ranges)
                if len(got) != len(keys):
                    raise TransportError(f"read_ranges_batch: {len(got)} answers for {len(keys)} keys")
                return [bool(g) for g in got]
            return [bool(inner.read_ranges(k, r)) for k, r in zip(keys, ranges)]

        return job

    def _ranges_direct(
        self,
        keys: list[str],
        checked: list[list[tuple[int, int, Segments]]],
        out: list[bool],
        end: float | None,
    ) -> bool:
        """The caller's memory to the transport: inline, or (the SDK owns the memory) on a
        worker with the segments quarantined until the I/O ends."""
        ranges = [[(off, segs) for off, _, segs in c] for c in checked]
        job = self._ranges_job(keys, ranges)
        q = self._quarantine if self.policies.deadline.seconds("read") > 0 and not self._owns else None
        if q is None:
            status, got = self._call("read", job, end)
        else:
            held = [list(segs) for c in checked for _, _, segs in c]
            q.hold(held)
            try:
                status, got = self._call("read", job, end, release=partial(q.release, held))
            except BaseException:
                q.release(held)
                raise
            if status != _ABANDONED:
                q.release(held)
        if status != _OK or got is None:
            return False
        out[:] = got
        return True

    def _ranges_staged(
        self,
        keys: list[str],
        checked: list[list[tuple[int, int, Segments]]],
        sizes: list[int],
        out: list[bool],
        end: float | None,
    ) -> bool:
        """Each object's ranges land in SDK-owned staging, chunk by chunk, and are copied
        into the caller's segments only for the objects read in time."""
        for a, b in self.policies.staging.chunks(sizes):
            if self._expired("read", end):
                return False
            flat = [nb for c in checked[a:b] for _, nb, _ in c]
            offs, need = Staging.slots(flat)
            buf = self._acquire_staging(need)
            if buf is None:
                return False
            starts = [buf.address + o for o in offs]
            staged: list[list[Range]] = []
            pos = 0
            for c in checked[a:b]:
                staged.append([(off, [(starts[pos + j], nb)]) for j, (off, nb, _) in enumerate(c)])
                pos += len(c)

            def copy_in(got: list[bool], a: int = a, b: int = b, starts: list[int] = starts) -> None:
                runs: list[tuple[int, int, int]] = []
                pos = 0
                for i, c in enumerate(checked[a:b]):
                    if got[i]:
                        runs += Staging.runs(False, starts[pos : pos + len(c)], [segs for _, _, segs in c])
                    pos += len(c)
                copy_runs(runs)
                if runs:
                    self._metrics.count("staging_copies_in", sum(got))

            got = self._call_staged("read", self._ranges_job(keys[a:b], staged), end, buf, copy_in)
            if got is None:
                return False
            out[a:b] = got
        return True

    # -- Transport: the rest ---------------------------------------------------------------

    def delete(self, keys: Sequence[str]) -> None:
        """Best effort under the transfer deadline; never raises for I/O."""
        if not keys:
            return
        end = self._end("delete")
        if not self._admit(end):
            return
        keys = list(keys)
        t0 = time.perf_counter()
        status, _ = self._call("delete", partial(self._inner.delete, keys), end)
        self._record("t_delete", t0, len(keys) if status == _OK else 0, 0, status == _OK)

    def clear(self, prefix: str) -> None:
        """Inline (admin operation). ``NotImplementedError``/``ValueError`` propagate;
        I/O errors are counted and swallowed."""
        try:
            self._inner.clear(prefix)
        except (NotImplementedError, ValueError):
            raise
        except Exception as e:
            self._metrics.failure("clear", e, self._io_errors)

    def health(self) -> bool:
        """The transport's probe under the exists deadline (False on failure/timeout).
        Not refused by an open breaker; its outcome is reported to the breaker."""
        if self._closed:
            return False
        return self._health_probe(self._end("health"))

    def register_memory(self, address: int, nbytes: int) -> None:
        """Forward to the transport (once per region) and remember the region, to be
        unregistered on :meth:`close`."""
        with self._regions_lock:
            if (address, nbytes) in self._regions or self._closed:
                return
            self._regions[(address, nbytes)] = None
        try:
            self._inner.register_memory(address, nbytes)
        except BaseException:
            with self._regions_lock:
                self._regions.pop((address, nbytes), None)
            raise

    def unregister_memory(self, address: int, nbytes: int) -> None:
        with self._regions_lock:
            if (address, nbytes) not in self._regions:
                return
            del self._regions[(address, nbytes)]
        try:
            self._inner.unregister_memory(address, nbytes)
        except Exception as e:
            self._metrics.failure("unregister_memory", e, self._io_errors)

    def close(self) -> None:
        """Wait up to ``close_timeout_s`` for running calls, unregister the memory
        registered through this wrapper, free idle staging (unregistered) and leak busy
        staging (counted in ``staging_leaked_bytes``; unregistered and freed later, when
        the abandoned I/O ends), then close the transport (also bounded). Idempotent."""
        if self._closed:
            return
        self._closed = True
        end = time.monotonic() + self._close_s
        self._runner.drain(self._close_s)
        with self._regions_lock:
            regions = list(self._regions)
        for region in regions:
            self.unregister_memory(*region)
        leaked = self._staging.close()  # idle buffers are unregistered before the transport closes
        if leaked:
            self._metrics.count("staging_leaked_bytes", leaked)
        try:
            call = self._runner.submit(self._inner.close)
            if self._runner.wait(call, max(end - time.monotonic(), 0.05)) and call.error is not None:
                self._metrics.failure("close", call.error, self._io_errors)
        except RuntimeError:
            pass
        self._runner.shutdown()


def _answers(fn: Callable[..., list[Any]], keys: Sequence[str], *args: Any, **kw: Any) -> list[Any]:
    """``fn(keys, *args, **kw)``, which must answer once per key (else the contract error)."""
    got = fn(keys, *args, **kw)
    if not isinstance(got, list) or len(got) != len(keys):
        raise TransportError(
            f"{getattr(fn, '__name__', 'call')} returned a wrong number of answers", "transport_contract"
        )
    return got


def _segment_sizes(name: str, buffers: Sequence[Segments]) -> list[int]:
    out = []
    for i, segs in enumerate(buffers):
        total = 0
        for addr, n in segs:
            if n < 0 or (n and not addr):
                raise ValueError(f"{name}[{i}]: bad segment ({addr}, {n})")
            total += n
        out.append(total)
    return out
