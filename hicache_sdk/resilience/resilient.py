"""``ResilientTransport``: deadlines, staging, circuit breaker, failure injection and
metrics around any :class:`~hicache_sdk.transport.Transport`.

Behaviour, per call:

1. **Admission.** A closed wrapper, an open breaker (after ``breaker_failures``
   consecutive failures, or while the abandoned-call budget is exhausted) refuses the call
   at once: misses / ``False``, error reason ``"closed"`` / ``"breaker_open"``.
   In the half-open state one call is the probe: ``health()`` when the transport declares
   the ``health`` capability, otherwise the call itself. Existence has its own breaker
   (``exists_breaker_state``): a slow or failing existence query never opens the breaker
   transfers use. The other way round, while the *transfer* breaker is open ``exists``
   reports every page absent (a hit that cannot be read is a miss), reason
   ``"breaker_open"``.
2. **Deadline.** ``exists`` (and ``health``) run under ``exists_timeout_s``; ``read``,
   ``write`` and ``delete`` under ``transfer_timeout_s``. With a deadline ``> 0`` the call
   runs on a worker thread and the caller waits at most that long; a call that outlives it
   returns misses (counters ``deadline_<op>`` and ``abandoned_reads``/``_writes``/...; error ``"deadline"``)
   and keeps running, *abandoned*, on its worker. With a deadline of ``0`` the call runs
   inline in the caller's thread: zero-copy, no staging, no extra thread hop -- and no bound
   beyond the transport's own timeouts (the local file backend's choice for transfers:
   page-cache copies that cannot hang for long are not worth a staging copy).
   ``exists`` is asked in chunks of at most :data:`EXISTS_CHUNK` keys on one worker: at
   the deadline the chunks answered so far stand (a long query yields its answered prefix,
   not all-or-nothing) and the rest are absent; the worker stops before the next chunk.
3. **Memory safety**: an abandoned I/O never touches memory someone else may use (staging,
   quarantine or cancellation; see :mod:`.transfers`).
4. **Errors** become misses plus ``metrics.error(reason)`` (``TransportError.reason`` or
   the exception class name). ``ValueError`` (bad arguments) propagates, both from this
   wrapper's argument checks and from the transport.
5. **Metrics**: transport-level ops ``t_exists``/``t_read``/``t_write``/``t_delete``
   (pages and bytes count the objects found/moved), gauges ``breaker_state``,
   ``exists_breaker_state``, ``abandoned_calls``, ``staging_bytes_in_use``,
   ``staging_bytes_reserved``.
6. **Memory registration**: :meth:`register_memory` is forwarded to the transport and
   remembered; :meth:`close` unregisters every remembered region after running calls have
   drained and before the transport is closed. Staging buffers are registered when mapped
   and unregistered when unmapped.

The paths a transfer takes are in :mod:`.transfers`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..metrics.backend import Metrics
from ..transport import Segments, Transport
from .breaker import CircuitBreaker
from .deadline import Call, DeadlineRunner
from .existence import EXISTS_CHUNK, run_exists
from .inject import FailureInjector
from .protocols import (
    ABANDON_COUNTER,
    Quarantine,
    ResilienceConfig,
    error_reason,
    segment_sizes,
)
from .staging import StagingPool
from .transfers import run_transfer

__all__ = ["EXISTS_CHUNK", "Quarantine", "ResilienceConfig", "ResilientTransport"]

T = TypeVar("T")

# outcome of one guarded call
_OK, _FAILED, _REFUSED, _ABANDONED = "ok", "failed", "refused", "abandoned"


class ResilientTransport(Transport):
    """Wraps ``inner``; see the module docs. Build it with
    :func:`hicache_sdk.resilience.wrap_transport`."""

    def __init__(
        self,
        inner: Transport,
        config: ResilienceConfig,
        metrics: Metrics,
        *,
        injector: FailureInjector | None = None,
        clock: Callable[[], float] = time.monotonic,
        start_open: bool = False,
        probe_at_start: bool | None = None,
        caller_owns_memory: bool = True,
        quarantine: Quarantine | None = None,
        caller_threads: int = 4,
        close_timeout_s: float | None = None,
    ) -> None:
        if not caller_owns_memory and quarantine is None:
            raise ValueError("quarantine: required when caller_owns_memory is False")
        self._inner = inner
        self.capabilities = inner.capabilities  # type: ignore[misc]
        self.max_segments = inner.max_segments  # type: ignore[misc]
        self.failures = inner.failures
        self._clock = clock
        self._regions: dict[tuple[int, int], None] = {}
        self._regions_lock = threading.Lock()
        self._metrics = metrics
        self._injector = injector
        self._exists_s = float(config.exists_timeout_s)
        self._transfer_s = float(config.transfer_timeout_s)
        self._max_abandoned = int(config.max_abandoned)
        self._owns = caller_owns_memory
        self._quarantine = quarantine
        self._close_s = (
            close_timeout_s if close_timeout_s is not None else max(1.0, min(self._transfer_s, 10.0))
        )
        self._closed = False
        self._breaker = CircuitBreaker(
            int(config.breaker_failures),
            float(config.breaker_reset_s),
            clock=clock,
            on_state=lambda s: metrics.gauge("breaker_state", s),
        )
        self._exists_breaker = CircuitBreaker(
            int(config.breaker_failures),
            float(config.breaker_reset_s),
            clock=clock,
            on_state=lambda s: metrics.gauge("exists_breaker_state", s),
        )
        metrics.gauge("breaker_state", self._breaker.state)
        metrics.gauge("exists_breaker_state", self._exists_breaker.state)
        metrics.gauge("abandoned_calls", 0)
        self._runner = DeadlineRunner(
            caller_threads + self._max_abandoned + 1, on_abandon_change=self._on_abandon_change
        )
        self._late_plain = self._late(None)  # the hook of calls with no memory to release
        self._staging = StagingPool(
            int(config.staging_bytes),
            register=inner.register_memory,
            unregister=inner.unregister_memory,
            on_usage=self._on_staging_usage,
        )
        self._chunk_bytes = max(int(config.staging_bytes) // max(caller_threads, 1), 1)
        self._probe_health = bool(inner.capabilities.health)
        if start_open:
            self._breaker.trip()
        else:
            probe = self._probe_health if probe_at_start is None else probe_at_start
            if probe and not self._health_probe():
                metrics.count("breaker_start_open")
                self._breaker.trip()

    # -- plumbing -----------------------------------------------------------------

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

    def _on_abandon_change(self, n: int) -> None:
        self._metrics.gauge("abandoned_calls", n)
        held = n > 0 and n >= self._max_abandoned
        if held != self._breaker.held:
            if held:
                self._metrics.count("abandoned_budget_exhausted")
            self._breaker.set_held(held)

    def _on_staging_usage(self, in_use: int, reserved: int) -> None:
        self._metrics.gauge("staging_bytes_in_use", in_use)
        self._metrics.gauge("staging_bytes_reserved", reserved)

    def _refuse(self, reason: str, n: int = 1) -> None:
        self._metrics.error(reason, n)

    def _health_probe(self, timeout: float | None = None) -> bool:
        """Call ``health()`` under the exists deadline (or ``timeout``); False on any failure."""
        limit = self._exists_s if timeout is None else timeout
        status, result = self._run("health", self._inner.health, limit, None, ok_if=bool)
        return status == _OK and bool(result)

    def probe_within(self, op: str, timeout: float) -> float | None:
        """The half-open probe of an admitted call of ``op`` whose deadline is ``timeout``
        (``0``: none): ``health()`` under the exists deadline, cut to ``timeout``. Returns
        the time the call has left after it (``timeout`` unchanged with no deadline), or
        ``None`` when the probe failed or used the whole deadline (counted as the call's
        deadline): whatever runs before the call counts against the same deadline."""
        limit = self._exists_s
        if timeout > 0 and (limit <= 0 or timeout < limit):
            limit = timeout
        t0 = self._clock()
        if not self._health_probe(limit):
            return None
        if timeout <= 0:
            return timeout
        left = timeout - (self._clock() - t0)
        if left <= 0:
            self._metrics.count(f"deadline_{op}")
            self._metrics.error("deadline")
            return None
        return left

    def _admit(self, op: str, timeout: float) -> float | None:
        """Admission of a call of ``op`` under ``timeout`` (``0``: no deadline): ``None``
        when refused (closed, breaker open, failed probe), else the time it has left
        (:meth:`probe_within` when it is the half-open probe)."""
        if self._closed:
            self._refuse("closed")
            return None
        allowed, probe = self._breaker.allow()
        if not allowed:
            self._metrics.count("breaker_rejected")
            self._refuse("breaker_open")
            return None
        if probe and self._probe_health:
            left = self.probe_within(op, timeout)
            if left is None:
                self._refuse("breaker_open")  # the probe failed: the breaker re-opened
            return left
        return timeout

    def _run(
        self,
        op: str,
        fn: Callable[[], T],
        timeout: float,
        release: Callable[[], None] | None,
        *,
        ok_if: Callable[[T], bool] | None = None,
        on_abandon: Callable[[], None] | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> tuple[str, T | None]:
        """Run ``fn`` (after the injector) under ``timeout``; report to ``breaker`` (the
        transfer breaker by default; a result for which ``ok_if`` is false counts as a
        failure but keeps status ok). ``release`` runs when an abandoned call ends (frees
        memory its I/O could touch); ``on_abandon`` runs in the caller's thread right after
        the call is abandoned. Returns ``(status, result)``; ``ValueError`` propagates."""
        inj = self._injector
        brk = breaker if breaker is not None else self._breaker
        job = fn
        if inj is not None:

            def job() -> T:
                inj.before(op)
                return fn()

        if timeout <= 0:
            try:
                result = job()
            except ValueError:
                raise
            except Exception as e:
                self._failed(e, brk)
                return _FAILED, None
            self._judge(result, ok_if, brk)
            return _OK, result
        try:
            in_time, call = self._runner.run(
                job, timeout, self._late_plain if release is None else self._late(release)
            )
        except RuntimeError:  # shut down concurrently
            self._refuse("closed")
            return _REFUSED, None
        if not in_time:
            if on_abandon is not None:
                on_abandon()
            self._abandoned(op, brk)
            return _ABANDONED, None
        if call.error is not None:
            if isinstance(call.error, ValueError):
                raise call.error
            self._failed(call.error, brk)
            return _FAILED, None
        self._judge(call.result, ok_if, brk)  # type: ignore[arg-type]
        return _OK, call.result

    def _abandoned(self, op: str, brk: CircuitBreaker) -> None:
        """Account for a call of ``op`` that missed its deadline (it runs on, abandoned)."""
        self._metrics.count(f"deadline_{op}")
        self._metrics.count(ABANDON_COUNTER[op])
        self._metrics.error("deadline")
        brk.record_failure()

    @staticmethod
    def _judge(result: T, ok_if: Callable[[T], bool] | None, brk: CircuitBreaker) -> None:
        if ok_if is None or ok_if(result):
            brk.record_success()
        else:
            brk.record_failure()

    def _failed(self, e: BaseException, brk: CircuitBreaker) -> None:
        self._metrics.error(error_reason(e))
        brk.record_failure()

    def _late(self, release: Callable[[], None] | None) -> Callable[[Call[Any]], None]:
        """The hook run when an abandoned call ends: count it, then free its memory."""

        def on_late(call: Call[Any]) -> None:
            self._metrics.count("late_completions" if call.started else "abandoned_skipped")
            if release is not None:
                release()

        return on_late

    def _record(self, op: str, t0: float, pages: int, nbytes: int, ok: bool) -> None:
        self._metrics.record(op, pages=pages, nbytes=nbytes, seconds=time.perf_counter() - t0, ok=ok)

    # -- Transport ------------------------------------------------------------------

    #: Sizes / ``None``; all ``None`` when refused or failed, and ``None`` past the answered
    #: prefix at the exists deadline (see the module docs and :func:`.existence.run_exists`).
    exists = run_exists

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
        return self.transfer_sized(op, list(keys), buffers, segment_sizes("buffers", buffers))

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
        left = self._admit(op, self._transfer_s)
        if left is None:
            self._record(f"t_{op}", t0, 0, 0, False)
            return out
        ok = run_transfer(self, op, keys, buffers, sizes, out, left)
        if all(out):
            self._record(f"t_{op}", t0, n, sum(sizes), ok)
        else:
            self._record(f"t_{op}", t0, sum(out), sum(s for s, o in zip(sizes, out) if o), ok)
        return out

    def delete(self, keys: Sequence[str]) -> None:
        """Best effort under the transfer deadline; never raises for I/O."""
        if not keys:
            return
        left = self._admit("delete", self._transfer_s)
        if left is None:
            return
        keys = list(keys)
        t0 = time.perf_counter()
        status, _ = self._run("delete", lambda: self._inner.delete(keys), left, None)
        self._record("t_delete", t0, len(keys) if status == _OK else 0, 0, status == _OK)

    def clear(self, prefix: str) -> None:
        """Inline (admin operation). ``NotImplementedError``/``ValueError`` propagate;
        I/O errors are counted and swallowed."""
        try:
            self._inner.clear(prefix)
        except (NotImplementedError, ValueError):
            raise
        except Exception as e:
            self._metrics.error(error_reason(e))

    def health(self) -> bool:
        """The transport's probe under the exists deadline (False on failure/timeout).
        Not refused by an open breaker; its outcome is reported to the breaker."""
        if self._closed:
            return False
        return self._health_probe()

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
            self._metrics.error(error_reason(e))

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
                self._metrics.error(error_reason(call.error))
        except RuntimeError:
            pass
        self._runner.shutdown()
