"""Existence queries in bounded chunks, for :class:`~.resilient.ResilientTransport`.

A query of many keys is asked :data:`EXISTS_CHUNK` keys at a time, one chunk after another
on one worker, under the one exists deadline. At the deadline the chunks answered so far
stand (their keys keep their answers, the rest are absent) and the worker stops before the
next chunk: a huge query yields its answered prefix instead of nothing, and never occupies
a worker long after its caller left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from ..errors import TransportError
from ..kit.batches import count_is

if TYPE_CHECKING:  # pragma: no cover
    from .resilient import ResilientTransport

__all__ = ["EXISTS_CHUNK", "exists_chunked", "run_exists"]

#: The most keys one ``exists`` call of the transport is asked at a time.
EXISTS_CHUNK = 4096

_UNANSWERED = object()  # no answer to judge: refused, or abandoned at the deadline


def _answers(got: object, n: int) -> list[int | None]:
    """``got`` when it is a list of ``n`` answers, else the contract error."""
    if not isinstance(got, list) or len(got) != n:
        raise TransportError("exists returned a wrong number of answers", "transport_contract")
    return got


def _exists_one(rt: ResilientTransport, keys: Sequence[str], timeout: float) -> list[int | None] | None:
    """A query of at most :data:`EXISTS_CHUNK` keys: one call, its answers as the
    transport gave them (no copies); ``None`` when it failed or missed the deadline."""
    inner = rt.inner

    def job() -> list[int | None]:
        return _answers(inner.exists(keys), len(keys))

    status, got = rt._run("exists", job, timeout, None, breaker=rt.exists_breaker)
    return got if status == "ok" else None


def exists_chunked(
    rt: ResilientTransport, keys: Sequence[str], out: list[int | None], timeout: float | None = None
) -> bool:
    """Fill ``out`` with what the transport answered by the deadline (``timeout``, default
    the exists deadline; exists breaker); True when every chunk was answered."""
    n = len(keys)
    inner = rt.inner
    parts: list[list[int | None]] = []
    lock = threading.Lock()
    stop = [False]

    def job() -> bool:
        for a in range(0, n, EXISTS_CHUNK):
            part = _answers(inner.exists(keys[a : a + EXISTS_CHUNK]), min(EXISTS_CHUNK, n - a))
            with lock:
                if stop[0]:
                    return False
                parts.append(part)
        return True

    def on_abandon() -> None:
        with lock:
            stop[0] = True

    limit = rt._exists_s if timeout is None else timeout
    status, _ = rt._run("exists", job, limit, None, on_abandon=on_abandon, breaker=rt.exists_breaker)
    pos = 0
    with lock:
        stop[0] = True
        for part in parts:
            out[pos : pos + len(part)] = part
            pos += len(part)
    return status == "ok"


def run_exists(rt: ResilientTransport, keys: Sequence[str]) -> list[int | None]:
    """:meth:`ResilientTransport.exists <.resilient.ResilientTransport.exists>`: admission
    (both breakers), the chunked query, metrics.

    The usual query -- one chunk, the transfer breaker letting calls through, the exists
    breaker with no failure counted, no injector -- is answered first, in this frame: the
    same outcomes, metrics and breaker accounting as the general path below, without
    asking the breakers (nothing to ask) or a call per step (every prefix lookup pays
    them: ``docs/backends/mooncake.md``)."""
    n = len(keys)
    if 0 < n <= EXISTS_CHUNK and rt._breaker.passing and rt._exists_breaker.quiet and rt._injector is None:
        t0 = time.perf_counter()
        brk = rt._exists_breaker
        err: BaseException | None = None
        got: object = _UNANSWERED
        if rt._closed:
            rt._refuse("closed")
        elif rt._exists_s > 0:
            try:
                in_time, call = rt._runner.run(partial(rt._inner.exists, keys), rt._exists_s, rt._late_plain)
            except RuntimeError:  # shut down concurrently
                rt._refuse("closed")
            else:
                if in_time:
                    err, got = call.error, call.result
                else:
                    rt._abandoned("exists", brk)
        else:
            try:
                got = rt._inner.exists(keys)
            except Exception as e:
                err = e
        if err is None and got is not _UNANSWERED and (not isinstance(got, list) or len(got) != n):
            err = TransportError("exists returned a wrong number of answers", "transport_contract")
        if err is not None:
            if isinstance(err, ValueError):
                raise err
            rt._failed(err, brk)
        elif got is not _UNANSWERED:
            if not brk.quiet:  # a failure was counted meanwhile: this success resets it
                brk.record_success()
            answers: list[int | None] = got  # type: ignore[assignment]
            rt._record("t_exists", t0, n - count_is(answers, None), 0, True)
            return answers
        rt._record("t_exists", t0, 0, 0, False)
        return [None] * n
    if n == 0:
        return []
    t0 = time.perf_counter()
    if rt._closed:
        rt._refuse("closed")
        rt._record("t_exists", t0, 0, 0, False)
        return [None] * n
    # Transfers down: a hit could not be read, so nothing is reported present. The
    # query may serve as the transfer breaker's half-open probe (health() when
    # declared, else the query itself).
    # The probe counts against the query's own deadline.
    allowed, probe = rt._breaker.allow()
    left: float | None = rt._exists_s
    if allowed and probe and rt._probe_health:
        left = rt.probe_within("exists", rt._exists_s)
    if not allowed or left is None:
        rt._metrics.count("exists_refused_transfers_down")
        rt._refuse("breaker_open")
    elif not rt._exists_breaker.allow()[0]:
        rt._metrics.count("breaker_rejected")
        rt._refuse("exists_breaker_open")
    else:
        out: list[int | None]
        if n <= EXISTS_CHUNK:  # the usual query: one call, no copies
            got = _exists_one(rt, keys, left)
            ok = got is not None
            out = got if got is not None else [None] * n
        else:
            out = [None] * n
            ok = exists_chunked(rt, keys, out, left)
        if probe and not rt._probe_health:
            (rt._breaker.record_success if ok else rt._breaker.record_failure)()
        rt._record("t_exists", t0, n - count_is(out, None), 0, ok)
        return out
    rt._record("t_exists", t0, 0, 0, False)
    return [None] * n
