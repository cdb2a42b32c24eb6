"""The adapter's fast path: a batch of pages of one pool as object *columns*.

A key scheme stores every page of a pool as the same list of objects (the ``default`` and
``sglang-file`` schemes: one object of all segments; ``sglang-mooncake``: a K and a V
object, ...). :meth:`KeyScheme.page_columns <hicache_sdk.keys.scheme_base.KeyScheme.page_columns>`
names a whole batch column by column, and a host pool whose page ``p`` has segment ``j`` at
``bases[j] + p * strides[j]`` (:func:`~hicache_sdk.hostpool.page_memory.linear_plan`) gives
every address of the batch in one numpy expression. So a batch costs a few list
comprehensions instead of one :class:`~hicache_sdk.paged.objects.ObjectIO` per object; the
results are identical to the per-object path (:mod:`.objects`), which remains for pools and
schemes without these properties.

Objects are column-major: object ``c * n + i`` is column ``c`` of page ``i``. Adjacent
segments of one object (``base_j + size_j == base_k`` with equal strides) are merged into
one run. Integrity trailers (``default`` scheme) are read into one scratch array and checked
in one vectorised comparison; written from one array built from a template.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..hostpool.page_memory import linear_plan
from ..kit.batches import first_occurrences
from ..transport import Segment, TransportError
from .header import PAGE_DIGEST_AT, TRAILER_SIZE, HeaderError, PageHeader, crc32_segments, page_records

if TYPE_CHECKING:  # pragma: no cover
    import numpy.typing as npt

    from ..keys.scheme_base import KeyScheme
    from .objects import ObjectEngine
    from .pools import PoolState

__all__ = ["Columns", "build_columns", "exists_columns", "read_columns", "write_columns"]


@dataclass
class Columns:
    """One batch of one pool, ready for one transport call (see the module docs)."""

    names: list[str]
    buffers: list[list[Segment]]
    sizes: list[int]  # stored size of each object (payload plus trailer, if any)
    payloads: list[int]  # payload bytes of each column
    n_pages: int
    identity: bytes | None  # header schemes: the pool's identity digest
    expected: npt.NDArray[np.uint8] | None  # header schemes with memory: the checksum-free records
    trailers: npt.NDArray[np.uint8] | None  # one row per object (read scratch / encoded)

    @property
    def n_cols(self) -> int:
        return len(self.payloads)

    def fold(self, ok: Sequence[bool]) -> list[bool]:
        """Per page: every object of the page is ``True``."""
        n = self.n_pages
        if self.n_cols == 1:
            return list(ok)
        if False not in ok:  # every object there (the usual hit): one C-speed scan
            return [True] * n
        if self.n_cols == 2:
            return list(map(operator.and_, ok[:n], ok[n:]))
        return [all(ok[c * n + i] for c in range(self.n_cols)) for i in range(n)]


def _runs(
    seg_idx: Sequence[int], bases: Sequence[int], strides: Sequence[int], sizes: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    rb: list[int] = []
    rs: list[int] = []
    rn: list[int] = []
    for j in seg_idx:
        b, s, n = bases[j], strides[j], sizes[j]
        if n <= 0:
            continue
        if rb and rs[-1] == s and rb[-1] + rn[-1] == b:
            rn[-1] += n
        else:
            rb.append(b)
            rs.append(s)
            rn.append(n)
    return rb, rs, rn


def _rows(
    pages: npt.NDArray[np.int64], rb: list[int], rs: list[int], rn: list[int], trailer_at: int | None
) -> list[list[Segment]]:
    """Each page's segments: the runs, then (``trailer_at``) one trailer row per page."""
    cols = [pages * s + b for b, s in zip(rb, rs)]
    sizes = list(rn)
    if trailer_at is not None:
        cols.append(np.arange(len(pages), dtype=np.int64) * TRAILER_SIZE + trailer_at)
        sizes.append(TRAILER_SIZE)
    if not cols:
        return [[] for _ in range(len(pages))]
    if len(cols) == 1:
        n0 = sizes[0]
        return [[(a, n0)] for a in cols[0].tolist()]
    if len(cols) == 2:
        n0, n1 = sizes
        return [[(a, n0), (b, n1)] for a, b in zip(cols[0].tolist(), cols[1].tolist())]
    if len(cols) == 3:
        n0, n1, n2 = sizes
        return [
            [(a, n0), (b, n1), (c, n2)]
            for a, b, c in zip(cols[0].tolist(), cols[1].tolist(), cols[2].tolist())
        ]
    table = np.stack(cols, axis=1).tolist()
    return [list(zip(row, sizes)) for row in table]


def build_columns(
    state: PoolState,
    scheme: KeyScheme,
    keys: Sequence[str],
    starts: Sequence[int] | None,
    *,
    write: bool = False,
    checksum: bool = False,
    max_segments: int = 1 << 30,
) -> Columns | None:
    """The batch of pages ``keys`` at slots ``starts`` (``None``: names only, for existence
    and deletion), or ``None`` when the scheme or the pool has no fast path. ``ValueError``
    from the scheme propagates (before any I/O)."""
    layout = state.layout
    plan = linear_plan(state.pool, layout) if starts is not None else None
    if starts is not None and plan is None:
        return None
    spec = scheme.page_columns(keys, layout)
    if spec is None:
        return None
    n = len(keys)
    header = state.identity is not None
    seg_sizes = layout.segment_sizes
    payloads = [sum(seg_sizes[j] for j in idx) for _, idx in spec]
    extra = TRAILER_SIZE if header else 0
    names: list[str] = []
    sizes: list[int] = []
    for (col, _), p in zip(spec, payloads):  # list extends (C speed), not a comprehension
        names += col
        sizes += [p + extra] * n
    expected = trailers = None
    if header and starts is not None:  # names only (exists, delete) need no records
        assert state.identity is not None
        expected = page_records(state.identity, keys, payloads)
        if write and not checksum:
            trailers = expected
        else:  # read scratch, or per-object records encoded below (they need the payload's crc)
            trailers = np.empty((len(names), TRAILER_SIZE), dtype=np.uint8)
    buffers: list[list[Segment]] = []
    if starts is not None:
        assert plan is not None
        bases, strides = plan
        runs = [_runs(idx, bases, strides, seg_sizes) for _, idx in spec]
        if any(len(rb) + (1 if header else 0) > max_segments for rb, _, _ in runs):
            return None  # the per-object path stages such objects
        base = trailers.__array_interface__["data"][0] if trailers is not None else 0
        pages = np.asarray(starts, dtype=np.int64) // layout.page_size
        for c, (rb, rs, rn) in enumerate(runs):
            at = base + c * n * TRAILER_SIZE if trailers is not None else None
            buffers += _rows(pages, rb, rs, rn, at)
        if header and write and checksum:
            assert trailers is not None and state.identity is not None and expected is not None
            for o, segs in enumerate(buffers):
                c, i = divmod(o, n) if n else (0, 0)
                rec = PageHeader(
                    state.identity, _digest_of(expected, i), payloads[c], crc32_segments(segs[:-1])
                )
                trailers[o] = np.frombuffer(rec.encode(), dtype=np.uint8)
    return Columns(names, buffers, sizes, payloads, n, state.identity, expected, trailers)


def _digest_of(records: npt.NDArray[np.uint8], i: int) -> bytes:
    """Page ``i``'s digest, as written in its (column 0) record."""
    return records[i, PAGE_DIGEST_AT : PAGE_DIGEST_AT + 32].tobytes()


def _call(engine: ObjectEngine, op: str, cols: Columns) -> list[bool] | None:
    t = engine.transport
    try:
        sized = engine.sized
        if sized is not None:  # the resilience layer: checked, list[bool] of the right length
            return sized.transfer_sized(op, cols.names, cols.buffers, cols.sizes)
        got = (t.read if op == "read" else t.write)(cols.names, cols.buffers)
        if len(got) != len(cols.names):
            raise TransportError(f"{op} returned a wrong number of answers", "protocol")
        return [bool(x) for x in got]
    except ValueError:
        raise
    except Exception as e:
        engine._failed(op, e)
        return None


def read_columns(engine: ObjectEngine, cols: Columns) -> list[bool]:
    """Read the batch; per page ``True`` when every object arrived whole and, under a
    header scheme, its trailer is this page's. Corrupt objects are deleted; failed ones
    get one existence check (which deletes wrong-sized ones), as on the per-object path,
    unless no object arrived at all."""
    n_obj = len(cols.names)
    if n_obj == 0:
        return [True] * cols.n_pages
    with engine.deadline("read"):
        return _read_columns(engine, cols)


def _read_columns(engine: ObjectEngine, cols: Columns) -> list[bool]:
    n_obj = len(cols.names)
    ok = _call(engine, "read", cols)
    if ok is None:
        return [False] * cols.n_pages
    bad: list[str] = []
    if cols.trailers is not None:
        assert cols.expected is not None
        want = cols.expected
        # rows compared as 12 machine words each (TRAILER_SIZE = 96), not 96 bytes
        same = (cols.trailers.view(np.uint64) == want.view(np.uint64)).all(axis=1)
        differ = [] if same.all() else np.flatnonzero(~same).tolist()
        for o in [o for o in differ if ok[o]]:
            reason = _check_record(cols, o)
            if reason is not None:
                ok[o] = False
                bad.append(cols.names[o])
                engine.metrics.error(f"header_{reason}")
    engine.delete_corrupt(bad)
    # When nothing arrived (the call failed or missed its deadline: a frozen or unreachable
    # store), an existence check would spend a second timeout after the first, past the
    # caller's deadline; a wrong-sized object is removed by the next existence query anyway.
    failed = (
        [] if all(ok) or not any(ok) else [o for o in range(n_obj) if not ok[o] and cols.names[o] not in bad]
    )
    if failed:
        engine.exists_named([cols.names[o] for o in failed], [cols.sizes[o] for o in failed])
    return cols.fold(ok)


def _check_record(cols: Columns, o: int) -> str | None:
    """Why object ``o``'s trailer is not valid for it (``None``: valid, e.g. it carries a
    checksum that matches)."""
    assert cols.trailers is not None and cols.identity is not None and cols.expected is not None
    c, i = divmod(o, cols.n_pages)
    try:
        record = PageHeader.decode(cols.trailers[o].tobytes())
        record.check(identity=cols.identity, page=_digest_of(cols.expected, i), payload_len=cols.payloads[c])
        if record.checksum is not None and crc32_segments(cols.buffers[o][:-1]) != record.checksum:
            raise HeaderError("checksum")
    except HeaderError as e:
        return e.reason
    return None


def write_columns(engine: ObjectEngine, cols: Columns) -> list[bool]:
    """Write the batch (create-if-absent); per page ``True`` when all its objects exist.
    A name given more than once (a duplicate page key) is written once, from its first
    occurrence, and every occurrence gets that result: the first write wins."""
    if not cols.names:
        return [True] * cols.n_pages
    with engine.deadline("write"):
        return _write_columns(engine, cols)


def _write_columns(engine: ObjectEngine, cols: Columns) -> list[bool]:
    dup = first_occurrences(cols.names)
    if dup is not None:
        keep, owner = dup
        sub = replace(
            cols,
            names=[cols.names[o] for o in keep],
            buffers=[cols.buffers[o] for o in keep],
            sizes=[cols.sizes[o] for o in keep],
        )
        part = _call(engine, "write", sub)
        if part is None:
            return [False] * cols.n_pages
        return cols.fold([part[j] for j in owner])
    got = _call(engine, "write", cols)
    if got is None:
        return [False] * cols.n_pages
    return cols.fold(got)


def exists_columns(engine: ObjectEngine, cols: Columns, closed: bool = False) -> list[bool]:
    """Per page: every object present with its stored size (wrong-sized ones are deleted).
    One transport call with the names as given: a repeated page key is asked again (the
    transport answers duplicates alike; hashing every batch's names to spare the rare repeat
    would cost every query)."""
    if closed:
        return [False] * cols.n_pages
    if not cols.names:
        return [True] * cols.n_pages
    with engine.deadline("exists"):
        return cols.fold(engine.exists_named(cols.names, cols.sizes, distinct=True))
