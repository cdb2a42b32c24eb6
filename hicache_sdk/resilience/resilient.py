"""``ResilientTransport``: deadlines, staging, circuit breaker, failure injection and
metrics around any :class:`~hicache_sdk.transport.Transport`.

Behaviour, per call:

1. **Admission.** A closed wrapper, an open breaker (after ``breaker_failures``
   consecutive failures, or while the abandoned-call budget is exhausted) refuses the call
   at once: misses / ``False``, error reason ``"closed"`` / ``"breaker_open"``.
   In the half-open state one call is the probe: ``health()`` when the transport declares
   the ``health`` capability, otherwise the call itself.
2. **Deadline.** ``exists`` (and ``health``) run under ``exists_timeout_s``; ``read``,
   ``write`` and ``delete`` under ``transfer_timeout_s``. With a deadline ``> 0`` the call
   runs on a worker thread and the caller waits at most that long; a call that outlives it
   returns misses (counters ``deadline_<op>`` and ``abandoned_reads``/``_writes``/...; error ``"deadline"``)
   and keeps running, *abandoned*, on its worker. With a deadline of ``0`` the call runs
   inline in the caller's thread: zero-copy, no staging, no extra thread hop -- and no bound
   beyond the transport's own timeouts (the local file backend's choice for transfers:
   page-cache copies that cannot hang for long are not worth a staging copy).
3. **Memory safety** (an abandoned I/O never touches memory someone else may use):

   * ``caller_owns_memory=True`` (inside SGLang: the host pool is the caller's and its slots
     are reused as soon as we return): a read goes into SDK-owned staging and is copied
     into the caller's segments only when it completed in time (counted per object as
     ``staging_copies_in``); a write is snapshotted into staging *before* it is submitted
     (``staging_copies_out``), so an abandoned write can only ever publish the snapshot.
     Staging is released only when the I/O ends (``late_completions`` counts abandoned
     calls that ended). Large batches are split into chunks of at most a quarter of
     ``staging_bytes`` (so four caller threads can progress together), run one after another
     under the one deadline. No staging left: remaining objects miss (``staging_exhausted``).
   * ``caller_owns_memory=False`` (the SDK owns the pool): no staging; the caller's segments
     go straight to the transport, and a :class:`Quarantine` hook is told to ``hold`` them
     before the I/O starts and to ``release`` them when it ends (late, if abandoned).

4. **Errors** become misses plus ``metrics.error(reason)`` (``TransportError.reason`` or
   the exception class name). ``ValueError`` (bad arguments) propagates, both from this
   wrapper's argument checks and from the transport.
5. **Metrics**: transport-level ops ``t_exists``/``t_read``/``t_write``/``t_delete``
   (pages and bytes count the objects found/moved), gauges ``breaker_state``,
   ``abandoned_calls``, ``staging_bytes_in_use``, ``staging_bytes_reserved``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from ..transport import Segments, Transport
from .breaker import CircuitBreaker
from .deadline import Call, DeadlineRunner
from .inject import FailureInjector
from .metrics import Metrics
from .protocols import (
    ABANDON_COUNTER,
    Quarantine,
    ResilienceConfig,
    bind,
    error_reason,
    segment_sizes,
)
from .staging import StagingBuffer, StagingPool, copy_segments_from, copy_segments_to

__all__ = ["Quarantine", "ResilienceConfig", "ResilientTransport"]

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
        metrics.gauge("breaker_state", self._breaker.state)
        metrics.gauge("abandoned_calls", 0)
        self._runner = DeadlineRunner(
            caller_threads + self._max_abandoned + 1, on_abandon_change=self._on_abandon_change
        )
        reg = getattr(inner, "register_memory", None)
        unreg = getattr(inner, "unregister_memory", None)
        self._staging = StagingPool(
            int(config.staging_bytes),
            register=reg if callable(reg) else None,
            unregister=unreg if callable(unreg) else None,
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
        return self._breaker

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

    def _health_probe(self) -> bool:
        """Call ``health()`` under the exists deadline; False on any failure."""
        status, result = self._run("health", self._inner.health, self._exists_s, None, ok_if=bool)
        return status == _OK and bool(result)

    def _admit(self) -> bool:
        if self._closed:
            self._refuse("closed")
            return False
        allowed, probe = self._breaker.allow()
        if not allowed:
            self._metrics.count("breaker_rejected")
            self._refuse("breaker_open")
            return False
        if probe and self._probe_health and not self._health_probe():
            self._refuse("breaker_open")  # the probe failed: the breaker re-opened
            return False
        return True

    def _run(
        self,
        op: str,
        fn: Callable[[], T],
        timeout: float,
        release: Callable[[], None] | None,
        *,
        ok_if: Callable[[T], bool] | None = None,
    ) -> tuple[str, T | None]:
        """Run ``fn`` (after the injector) under ``timeout``; report to the breaker
        (a result for which ``ok_if`` is false counts as a failure but keeps status ok).
        ``release`` runs when an abandoned call ends (frees memory its I/O could touch).
        Returns ``(status, result)``; ``ValueError`` propagates."""
        inj = self._injector

        def job() -> T:
            if inj is not None:
                inj.before(op)
            return fn()

        if timeout <= 0:
            try:
                result = job()
            except ValueError:
                raise
            except Exception as e:
                self._failed(op, e)
                return _FAILED, None
            self._judge(result, ok_if)
            return _OK, result
        try:
            call = self._runner.submit(job, self._late(release))
        except RuntimeError:  # shut down concurrently
            self._refuse("closed")
            return _REFUSED, None
        if not self._runner.wait(call, timeout):
            self._metrics.count(f"deadline_{op}")
            self._metrics.count(ABANDON_COUNTER[op])
            self._metrics.error("deadline")
            self._breaker.record_failure()
            return _ABANDONED, None
        if call.error is not None:
            if isinstance(call.error, ValueError):
                raise call.error
            self._failed(op, call.error)
            return _FAILED, None
        self._judge(call.result, ok_if)  # type: ignore[arg-type]
        return _OK, call.result

    def _judge(self, result: T, ok_if: Callable[[T], bool] | None) -> None:
        if ok_if is None or ok_if(result):
            self._breaker.record_success()
        else:
            self._breaker.record_failure()

    def _failed(self, op: str, e: BaseException) -> None:
        self._metrics.error(error_reason(e))
        self._breaker.record_failure()

    def _late(self, release: Callable[[], None] | None) -> Callable[[Call[Any]], None]:
        """The hook run when an abandoned call ends: count it, then free its memory."""

        def on_late(call: Call[Any]) -> None:
            self._metrics.count("late_completions" if call.started else "abandoned_skipped")
            if release is not None:
                release()

        return on_late

    def _record(self, op: str, t0: float, pages: int, nbytes: int, ok: bool) -> None:
        self._metrics.record(op, pages=pages, nbytes=nbytes, seconds=time.perf_counter() - t0, ok=ok)

    @staticmethod
    def _check_bools(res: object, n: int) -> list[bool] | None:
        if isinstance(res, list) and len(res) == n:
            return [bool(x) for x in res]
        return None

    # -- Transport ------------------------------------------------------------------

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        """Sizes / ``None``; all ``None`` when refused, failed or past the exists deadline."""
        n = len(keys)
        if n == 0:
            return []
        t0 = time.perf_counter()
        out: list[int | None] = [None] * n
        if not self._admit():
            self._record("t_exists", t0, 0, 0, False)
            return out
        keys = list(keys)
        status, res = self._run("exists", lambda: self._inner.exists(keys), self._exists_s, None)
        if status == _OK:
            if isinstance(res, list) and len(res) == n:
                out = list(res)
            else:
                self._metrics.error("transport_contract")
                status = _FAILED
        self._record("t_exists", t0, n - out.count(None), 0, status == _OK)
        return out

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
        sizes = segment_sizes("buffers", buffers)
        n = len(keys)
        if n == 0:
            return []
        t0 = time.perf_counter()
        out = [False] * n
        if not self._admit():
            self._record(f"t_{op}", t0, 0, 0, False)
            return out
        if self._transfer_s <= 0 or not self._owns:
            ok = self._direct(op, list(keys), [list(b) for b in buffers], out)
        else:
            ok = self._staged(op, list(keys), buffers, sizes, out)
        self._record(f"t_{op}", t0, sum(out), sum(s for s, o in zip(sizes, out) if o), ok)
        return out

    def _inner_op(self, op: str) -> Callable[[Sequence[str], Sequence[Segments]], list[bool]]:
        return self._inner.read if op == "read" else self._inner.write

    def _direct(
        self, op: str, keys: list[str], buffers: list[list[tuple[int, int]]], out: list[bool]
    ) -> bool:
        fn = self._inner_op(op)
        q = self._quarantine if self._transfer_s > 0 and not self._owns else None
        if q is not None:
            q.hold(buffers)
            release: Callable[[], None] | None = partial(q.release, buffers)
        else:
            release = None
        try:
            status, res = self._run(op, bind(fn, keys, buffers), self._transfer_s, release)
        except BaseException:
            if q is not None:
                q.release(buffers)
            raise
        if q is not None and status != _ABANDONED:
            q.release(buffers)
        if status != _OK:
            return False
        got = self._check_bools(res, len(keys))
        if got is None:
            self._metrics.error("transport_contract")
            return False
        out[:] = got
        return True

    def _chunks(self, sizes: list[int]) -> list[tuple[int, int]]:
        chunks: list[tuple[int, int]] = []
        start, acc = 0, 0
        for i, s in enumerate(sizes):
            if i > start and acc + s > self._chunk_bytes:
                chunks.append((start, i))
                start, acc = i, 0
            acc += s
        chunks.append((start, len(sizes)))
        return chunks

    def _staged(
        self, op: str, keys: list[str], buffers: Sequence[Segments], sizes: list[int], out: list[bool]
    ) -> bool:
        fn = self._inner_op(op)
        deadline = time.monotonic() + self._transfer_s
        for a, b in self._chunks(sizes):
            left = deadline - time.monotonic()
            if left <= 0:
                self._metrics.count(f"deadline_{op}")
                self._metrics.error("deadline")
                return False
            buf = self._staging.acquire(sum(sizes[a:b]))
            if buf is None:
                self._metrics.count("staging_exhausted")
                self._metrics.error("staging_exhausted")
                return False
            offs: list[int] = []
            off = 0
            for s in sizes[a:b]:
                offs.append(off)
                off += s
            staged = [[(buf.address + o, s)] for o, s in zip(offs, sizes[a:b])]
            if op == "write":
                for i, o in zip(range(a, b), offs):
                    copy_segments_to(buf.address + o, list(buffers[i]))
                self._metrics.count("staging_copies_out", b - a)
            try:
                status, res = self._run(op, bind(fn, keys[a:b], staged), left, self._releaser(buf))
            except BaseException:
                self._staging.release(buf)
                raise
            if status == _ABANDONED:
                return False  # staging is released by the late hook, when the I/O ends
            try:
                if status != _OK:
                    return False
                got = self._check_bools(res, b - a)
                if got is None:
                    self._metrics.error("transport_contract")
                    return False
                if op == "read":
                    copied = 0
                    for i, o, g in zip(range(a, b), offs, got):
                        if g:
                            copy_segments_from(buf.address + o, list(buffers[i]))
                            copied += 1
                    self._metrics.count("staging_copies_in", copied)
                out[a:b] = got
            finally:
                self._staging.release(buf)
        return True

    def _releaser(self, buf: StagingBuffer) -> Callable[[], None]:
        return lambda: self._staging.release(buf)

    def delete(self, keys: Sequence[str]) -> None:
        """Best effort under the transfer deadline; never raises for I/O."""
        if not keys or not self._admit():
            return
        keys = list(keys)
        t0 = time.perf_counter()
        status, _ = self._run("delete", lambda: self._inner.delete(keys), self._transfer_s, None)
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

    def close(self) -> None:
        """Wait up to ``close_timeout_s`` for running calls, close the transport (also
        bounded), then free idle staging and leak busy staging (counted in
        ``staging_leaked_bytes``; freed later, when the abandoned I/O ends). Idempotent."""
        if self._closed:
            return
        self._closed = True
        end = time.monotonic() + self._close_s
        self._runner.drain(self._close_s)
        try:
            call = self._runner.submit(self._inner.close)
            if self._runner.wait(call, max(end - time.monotonic(), 0.05)) and call.error is not None:
                self._metrics.error(error_reason(call.error))
        except RuntimeError:
            pass
        self._runner.shutdown()
        leaked = self._staging.close()
        if leaked:
            self._metrics.count("staging_leaked_bytes", leaked)
