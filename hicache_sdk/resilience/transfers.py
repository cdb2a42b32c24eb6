"""The transfer paths of :class:`~hicache_sdk.resilience.resilient.ResilientTransport`.

One of four, per call (see the module docs of :mod:`.resilient` for the rules):

* **inline** (``transfer_timeout_s == 0``): the caller's segments go straight to the
  transport, in the caller's thread;
* **quarantined** (the SDK owns the memory): straight to the transport on a worker; the
  quarantine keeps the slots out of reuse until the I/O ends;
* **cancellable** (the transport declares ``cancellable``): straight to the transport on a
  worker with a :class:`~hicache_sdk.kit.cancel.CancelToken`, cancelled at the deadline --
  once ``cancel()`` returns, the abandoned call can no longer touch the caller's memory;
* **staged**: through SDK-owned staging memory, in chunks of at most ``chunk_bytes``, all
  under one deadline read from the injected clock (a chunk never starts after it). Copies
  between staging and the caller's segments are one copy_runs call per chunk
  (:func:`hicache_sdk.kit.segments.copy_runs`, GIL released).

The rules in full (``caller_owns_memory`` is a ``ResilientTransport`` argument):

* ``caller_owns_memory=True`` (inside SGLang: the host pool is the caller's and its slots
  are reused as soon as we return): a read goes into SDK-owned staging and is copied
  into the caller's segments only when it completed in time (counted per object as
  ``staging_copies_in``); a write is snapshotted into staging *before* it is submitted
  (``staging_copies_out``), so an abandoned write can only ever publish the snapshot.
  Staging is released only when the I/O ends (``late_completions`` counts abandoned
  calls that ended). Large batches are split into chunks of at most a quarter of
  ``staging_bytes`` (so four caller threads can progress together), run one after another
  under the one deadline (read from the injected ``clock``; no chunk starts after it).
  No staging left: remaining objects miss (``staging_exhausted``).
* a transport that declares ``cancellable`` gets the caller's segments directly with a
  :class:`~hicache_sdk.kit.cancel.CancelToken`, cancelled at the deadline
  (``cancelled_at_deadline``): no staging copy, and no touch of the caller's memory after
  the cancel returns.
* ``caller_owns_memory=False`` (the SDK owns the pool): no staging; the caller's segments
  go straight to the transport, and a :class:`Quarantine` hook is told to ``hold`` them
  before the I/O starts and to ``release`` them when it ends (late, if abandoned).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ..kit.cancel import CancelToken
from ..kit.segments import copy_runs
from ..transport import Segments
from .protocols import bind
from .staging import StagingBuffer

if TYPE_CHECKING:  # pragma: no cover
    from .resilient import ResilientTransport

__all__ = ["chunk_bounds", "run_transfer"]

_OK, _ABANDONED = "ok", "abandoned"


def run_transfer(
    rt: ResilientTransport,
    op: str,
    keys: list[str],
    buffers: Sequence[Segments],
    sizes: list[int],
    out: list[bool],
    timeout: float,
) -> bool:
    """Move one admitted batch by the path the wrapper's settings select, within
    ``timeout`` (what is left of the transfer deadline after admission); fills ``out``.
    Returns whether the transport answered (False: refused / failed / past the deadline)."""
    if rt._transfer_s <= 0 or not rt._owns:
        return _direct(rt, op, keys, buffers, out, timeout)
    if rt._inner.cancellable:
        return _cancellable(rt, op, keys, buffers, out, timeout)
    return _staged(rt, op, keys, buffers, sizes, out, timeout)


def _inner_op(rt: ResilientTransport, op: str) -> Callable[..., list[bool]]:
    return rt._inner.read if op == "read" else rt._inner.write


def _take(rt: ResilientTransport, status: str, res: Any, n: int) -> list[bool] | None:
    if status != _OK:
        return None
    if isinstance(res, list) and len(res) == n:
        return [bool(x) for x in res]
    rt._metrics.error("transport_contract")
    return None


def _direct(
    rt: ResilientTransport,
    op: str,
    keys: list[str],
    buffers: Sequence[Segments],
    out: list[bool],
    timeout: float,
) -> bool:
    fn = _inner_op(rt, op)
    q = rt._quarantine if rt._transfer_s > 0 and not rt._owns else None
    release: Callable[[], None] | None = None
    if q is not None:
        q.hold(buffers)
        release = partial(q.release, buffers)
    try:
        status, res = rt._run(op, bind(fn, keys, buffers), timeout, release)
    except BaseException:
        if q is not None:
            q.release(buffers)
        raise
    if q is not None and status != _ABANDONED:
        q.release(buffers)
    got = _take(rt, status, res, len(keys))
    if got is None:
        return False
    out[:] = got
    return True


def _cancellable(
    rt: ResilientTransport,
    op: str,
    keys: list[str],
    buffers: Sequence[Segments],
    out: list[bool],
    timeout: float,
) -> bool:
    fn = _inner_op(rt, op)
    token = CancelToken()

    def call() -> list[bool]:
        return fn(keys, buffers, cancel=token)

    def on_abandon() -> None:
        token.cancel()  # returns once no guarded touch of caller memory is running
        rt._metrics.count("cancelled_at_deadline")

    status, res = rt._run(op, call, timeout, None, on_abandon=on_abandon)
    got = _take(rt, status, res, len(keys))
    if got is None:
        return False
    out[:] = got
    return True


def chunk_bounds(sizes: list[int], chunk_bytes: int) -> list[tuple[int, int]]:
    if sum(sizes) <= chunk_bytes:  # the usual batch: one chunk
        return [(0, len(sizes))]
    chunks: list[tuple[int, int]] = []
    start, acc = 0, 0
    for i, s in enumerate(sizes):
        if i > start and acc + s > chunk_bytes:
            chunks.append((start, i))
            start, acc = i, 0
        acc += s
    chunks.append((start, len(sizes)))
    return chunks


def _slots(sizes: list[int]) -> tuple[list[int], int]:
    """Each object's offset in one staging buffer, and the bytes the slots need. Each slot
    starts 4 KiB-aligned (64 B for objects under 4 KiB) and is rounded up to that step: a
    copy whose source and destination differ in alignment runs far slower on some CPUs
    (``rep movsb``), and an ``O_DIRECT`` read needs aligned memory."""
    if sizes and sizes.count(sizes[0]) == len(sizes):  # one size (pages of one pool)
        n = sizes[0]
        step = (n + 4095) & -4096 if n >= 4096 else (n + 63) & -64
        return [i * step for i in range(len(sizes))], step * len(sizes)
    offs: list[int] = []
    pos = 0
    for n in sizes:
        if n >= 4096:
            pos = (pos + 4095) & -4096
            offs.append(pos)
            pos += (n + 4095) & -4096
        else:
            offs.append(pos)  # always 64 B-aligned: every slot is a multiple of 64
            pos += (n + 63) & -64
    return offs, pos


def _runs(op: str, starts: list[int], buffers: Sequence[Segments]) -> list[tuple[int, int, int]]:
    """The ``(dst, src, n)`` copies between the objects' staging slots and their segments
    (caller -> staging for a write, staging -> caller for a read), per segment in order."""
    if set(map(len, buffers)) == {1}:  # one segment per object: the common case
        if op == "write":
            return [(s, segs[0][0], segs[0][1]) for s, segs in zip(starts, buffers)]
        return [(segs[0][0], s, segs[0][1]) for s, segs in zip(starts, buffers)]
    runs: list[tuple[int, int, int]] = []
    for off, segs in zip(starts, buffers):
        for addr, n in segs:
            runs.append((off, addr, n) if op == "write" else (addr, off, n))
            off += n
    return runs


def _staged(
    rt: ResilientTransport,
    op: str,
    keys: list[str],
    buffers: Sequence[Segments],
    sizes: list[int],
    out: list[bool],
    timeout: float,
) -> bool:
    fn = _inner_op(rt, op)
    clock = rt._clock
    deadline = clock() + timeout
    for a, b in chunk_bounds(sizes, rt._chunk_bytes):
        left = deadline - clock()
        if left <= 0:
            rt._metrics.count(f"deadline_{op}")
            rt._metrics.error("deadline")
            return False
        part = sizes[a:b]
        offs, need = _slots(part)
        buf = rt._staging.acquire(need)
        if buf is None:
            rt._metrics.count("staging_exhausted")
            rt._metrics.error("staging_exhausted")
            return False
        base = buf.address
        starts = [base + o for o in offs]
        staged = [[seg] for seg in zip(starts, part)]
        try:
            if op == "write":
                copy_runs(_runs(op, starts, buffers[a:b]))
                rt._metrics.count("staging_copies_out", b - a)
            status, res = rt._run(op, bind(fn, keys[a:b], staged), left, _releaser(rt, buf))
        except BaseException:
            rt._staging.release(buf)
            raise
        if status == _ABANDONED:
            return False  # staging is released by the late hook, when the I/O ends
        try:
            got = _take(rt, status, res, b - a)
            if got is None:
                return False
            if op == "read" and any(got):
                runs = _runs(op, starts, buffers[a:b])
                if all(got):
                    copy_runs(runs)
                    rt._metrics.count("staging_copies_in", b - a)
                else:
                    _copy_good(rt, runs, buffers, a, b, got)
            out[a:b] = got
        finally:
            rt._staging.release(buf)
    return True


def _copy_good(
    rt: ResilientTransport,
    runs: list[tuple[int, int, int]],
    buffers: Sequence[Segments],
    a: int,
    b: int,
    got: list[bool],
) -> None:
    """Copy only the objects that were read (a failed object's staging bytes are junk)."""
    keep: list[tuple[int, int, int]] = []
    pos = 0
    for i, good in zip(range(a, b), got):
        n = len(buffers[i])
        if good:
            keep.extend(runs[pos : pos + n])
        pos += n
    copy_runs(keep)
    rt._metrics.count("staging_copies_in", sum(got))


def _releaser(rt: ResilientTransport, buf: StagingBuffer) -> Callable[[], None]:
    return lambda: rt._staging.release(buf)
