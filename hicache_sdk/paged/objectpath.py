"""The per-object path of :class:`~hicache_sdk.paged.adapter.PagedStorage`: pages as
:class:`~hicache_sdk.paged.objects.ObjectIO` lists, for pools and key schemes the column fast
path (:mod:`.columns`) does not cover (pools without linear page memory, flat-page pools,
schemes without ``page_columns``, v2 batches).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from ..keys.scheme_base import KeyScheme
from ..metrics.backend import Metrics
from ..transport import Segment
from .generic import flat_batch, new_flat_page
from .objects import ObjectIO, fold_pages
from .pools import PoolState, TransferPlan

__all__ = ["ObjectPathHost", "ObjectPathMixin", "page_objects"]


class ObjectPathHost(Protocol):
    """What :class:`ObjectPathMixin` needs from the class it is mixed into
    (:class:`~hicache_sdk.paged.adapter.PagedStorage`)."""

    @property
    def scheme(self) -> KeyScheme: ...
    @property
    def metrics(self) -> Metrics: ...
    def _read(self, objs: Sequence[ObjectIO]) -> list[bool]: ...
    def _write(self, objs: Sequence[ObjectIO]) -> list[bool]: ...


def page_objects(
    scheme: KeyScheme, state: PoolState, keys: Sequence[str], starts: Sequence[int], *, write: bool
) -> tuple[list[ObjectIO], list[int], Callable[[Sequence[bool]], None] | None]:
    """The objects of pages ``keys`` at slots ``starts`` of ``state``'s pool under
    ``scheme``, their owning key index, and (pools without zero-copy page meta only) a
    finisher that copies successfully read flat pages into the pool."""
    from ..hostpool.describe import has_page_segments, page_segments

    finish: Callable[[Sequence[bool]], None] | None = None
    if has_page_segments(state.pool):
        segs = page_segments(state.pool, state.layout, list(starts))
    else:
        segs, finish = _copy_pages(state, starts, write)
    fast = state.page_objects_fast(scheme, keys, segs)
    if fast is not None:
        return fast[0], fast[1], finish
    objs, owners = flat_batch(scheme, state, keys, segs)
    return objs, owners, finish


def _copy_pages(
    state: PoolState, starts: Sequence[int], write: bool
) -> tuple[list[list[Segment]], Callable[[Sequence[bool]], None] | None]:
    """Fallback for pools without zero-copy meta: one flat page copy per page
    (``get_data_page`` / ``set_from_flat_data_page``)."""
    pool = state.pool
    if write:
        flats = [pool.get_data_page(s, flat=True).contiguous() for s in starts]
    else:
        flats = [new_flat_page(state) for _ in starts]
    for f in flats:
        if f.numel() * f.element_size() != state.layout.page_bytes:
            raise ValueError(f"pool {state.name!r}: a flat page is not {state.layout.page_bytes} bytes")
    segs = [state.flat_page_segments(int(f.data_ptr())) for f in flats]

    def finish(results: Sequence[bool]) -> None:
        for s, f, ok in zip(starts, flats, results):
            if ok and not write:
                pool.set_from_flat_data_page(s, f)

    return segs, finish


class ObjectPathMixin:
    """Object plumbing shared by the adapter's page methods (:class:`ObjectPathHost`)."""

    # -- plumbing ------------------------------------------------------------------------
    def _page_objects(
        self: ObjectPathHost, state: PoolState, keys: Sequence[str], starts: Sequence[int], *, write: bool
    ) -> tuple[list[ObjectIO], list[int], Callable[[Sequence[bool]], None] | None]:
        """:func:`page_objects` under this backend's key scheme."""
        return page_objects(self.scheme, state, keys, starts, write=write)

    def _page_objects_nomem(
        self: ObjectPathHost, state: PoolState, keys: Sequence[str]
    ) -> tuple[list[ObjectIO], list[int]]:
        """The objects of these pages with no memory attached (for existence / delete)."""
        fast = state.page_objects_fast(self.scheme, keys, ())
        return fast if fast is not None else flat_batch(self.scheme, state, keys, [()] * len(keys))

    # -- v2 pools ------------------------------------------------------------------------
    def _v2_run(
        self: ObjectPathHost, op: str, plans: Sequence[TransferPlan], skip: Sequence[bool], write: bool
    ) -> dict[str, list[bool]]:
        empty: tuple[list[ObjectIO], list[int], None] = ([], [], None)
        groups = [
            empty if s else page_objects(self.scheme, p.state, p.keys, p.starts, write=write)
            for p, s in zip(plans, skip)
        ]
        flat: list[ObjectIO] = [o for objs, _, _ in groups for o in objs]
        t0 = time.perf_counter()
        ok = (self._write if write else self._read)(flat) if flat else []
        out: dict[str, list[bool]] = {}
        pos = 0
        good_pages = good_bytes = 0
        for p, s, (objs, owners, finish) in zip(plans, skip, groups):
            res = [True] * len(p.keys) if s else fold_pages(len(p.keys), owners, ok[pos : pos + len(objs)])
            pos += len(objs)
            if finish is not None:
                finish(res)
            out[p.name] = res
            if not s:
                n = sum(res)
                good_pages += n
                good_bytes += n * p.state.layout.page_bytes
        if flat:
            self.metrics.record(
                op,
                pages=good_pages,
                nbytes=good_bytes,
                seconds=time.perf_counter() - t0,
                ok=all(all(r) for r in out.values()),
            )
        return out
