"""Layer-by-layer loads through a transport's ranged reads (``Transport.read_ranges``).

Used only where the raw transport reads ranges natively and cheaply (``cheap_ranges``:
the file and Mooncake transports) and the key scheme stores one object per page with the
SDK's integrity trailer (the ``default`` scheme). Each page object holds every K layer,
then every V layer (:func:`~.view.layer_ranges`). Layers are read in groups
(:func:`layer_groups`: layer 0 alone, then 1, 2-3, 4-7, ...), one ranged read per page per
group (a range per K and V run of the group's layers), into the device pool's segments; a
group's layers are marked complete when every page's group has landed, in layer order. So
layer 0 lands after one small read per page, and a 32-layer batch takes 6 reads per page,
not 32. Each group is one call for every page of the batch (a transport that offers
:class:`~hicache_sdk.transport.RangedReads` itself, as the file and Mooncake transports do,
gets it whole: Mooncake reads every page's ranges in one session). Integrity holds as for
whole reads:

* layer 0's read includes each page's trailer, so identity, page and length are checked
  before any layer completes (a foreign or torn page fails the batch at once);
* the payload checksum, when the page carries one, is checked once the last layer has
  landed, before that layer completes, so a mismatch makes ``finish`` return ``False``.

The ranged reads go through the backend's resilience layer (its
:class:`~hicache_sdk.transport.RangedReads`): one call per layer group for every page of the
batch, all under one transfer deadline for the whole batch (as one whole read of the
batch would be), the transfer breaker, and staging (a read the deadline
abandons lands in SDK-owned memory, never in the device pool). A refused, failed or
abandoned layer fails the batch: ``finish_layer_wise_loading`` returns ``False``, nothing
raises.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Sequence
from typing import Any

from ...paged.header import TRAILER_SIZE, HeaderError, PageHeader, crc32_segments
from ...transport import DeadlineScoped, Range, RangedReads, Segment, Transport, has_read_ranges
from .view import DeviceKVView, layer_groups, layer_ranges

__all__ = ["RangedLoader", "ranged_reads_usable"]


def ranged_reads_usable(store: Any) -> bool:
    """Whether ``store`` (a ``PagedStorage``) serves layer-by-layer loads: a raw transport
    with cheap native ranged reads, reached through a transport that reads ranges of many
    objects under one deadline (the resilience layer), and a key scheme with one trailered
    object per page."""
    raw = getattr(store, "raw_transport", None)
    wrapped = getattr(store, "transport", None)
    scheme = getattr(store, "scheme", None)
    return (
        isinstance(raw, Transport)
        and isinstance(wrapped, Transport)
        and wrapped.offers(RangedReads) is not None
        and has_read_ranges(raw)
        and bool(raw.cheap_ranges)
        and bool(getattr(scheme, "has_header", False))
    )


class _Page:
    __slots__ = ("name", "segs", "trailer", "obj", "_buf")

    def __init__(self, obj: Any, buf: Any, trailer: int) -> None:
        self.obj = obj
        self._buf = buf  # keeps the batch's trailer memory alive
        self.name: str = obj.name
        self.segs: tuple[Segment, ...] = obj.segments
        self.trailer = trailer  # the address of this page's TRAILER_SIZE bytes


class RangedLoader:
    """Loads a batch layer by layer (see the module docs)."""

    def __init__(self, store: Any, view: DeviceKVView) -> None:
        wrapped: Transport = store.transport
        ranged = wrapped.offers(RangedReads)
        if ranged is None:
            raise ValueError(f"{type(wrapped).__name__} does not read ranges of many objects at once")
        self.ranged: RangedReads = ranged
        self.scoped = wrapped.offers(DeadlineScoped)
        self.store = store
        self.view = view
        self.layers = layer_ranges(view)
        self._run_cache: dict[range, list[tuple[int, int, int]]] = {}

    def _pages(self, keys: Sequence[str], starts: Sequence[int]) -> list[_Page]:
        from ...hostpool.describe import page_segments

        kv = self.store._require_kv("linker load")
        segs = page_segments(self.view, kv.layout, starts)
        fast = kv.page_objects_fast(self.store.scheme, list(keys), segs)
        if fast is not None and fast[1] == list(range(len(keys))):
            objs = fast[0]
        else:
            objs = []
            for key, page_segs in zip(keys, segs):
                one = kv.objects(self.store.scheme, key, page_segs)
                if len(one) != 1:
                    raise ValueError("ranged loads need one trailered object per page")
                objs.append(one[0])
        if not all(obj.has_header for obj in objs):
            raise ValueError("ranged loads need one trailered object per page")
        trailers = (ctypes.c_char * (TRAILER_SIZE * len(objs)))()
        base = ctypes.addressof(trailers)
        return [_Page(obj, trailers, base + i * TRAILER_SIZE) for i, obj in enumerate(objs)]

    def load(self, counter: Any, index: int, keys: Sequence[str], starts: Sequence[int]) -> None:
        """Read every layer of the pages ``keys`` into the slots starting at ``starts``,
        completing each layer on ``counter`` (batch ``index``) once it has landed. Raises
        on the first failure (the caller fails the batch)."""
        pages = self._pages(keys, starts)
        groups = layer_groups(len(self.layers))
        last = len(groups) - 1
        scope = self.scoped.deadline_scope("read") if self.scoped is not None else contextlib.nullcontext()
        with scope:
            headers: list[PageHeader] = []
            for g, group in enumerate(groups):
                self._read(pages, group, trailer=g == 0)
                if g == 0:
                    headers = self._check_headers(pages)
                if g == last:
                    self._check_sums(pages, headers)
                for layer in group:
                    counter.complete(index, layer)

    def _read(self, pages: list[_Page], group: range, trailer: bool = False) -> None:
        """One ranged read of layers ``group`` of every page (and each page's trailer);
        ``OSError`` when a page did not read."""
        batch: list[list[Range]] = []
        for page in pages:
            ranges = self._group_ranges(page, group)
            if trailer:
                ranges.append((page.obj.payload_len, [(page.trailer, TRAILER_SIZE)]))
            batch.append(ranges)
        got = self.ranged.read_ranges_batch([page.name for page in pages], batch)
        if not all(got):
            raise OSError(f"page {got.index(False)}: layers {group.start}-{group.stop - 1} did not read")

    @staticmethod
    def _check_headers(pages: list[_Page]) -> list[PageHeader]:
        headers = []
        for i, page in enumerate(pages):
            try:
                header = PageHeader.decode(ctypes.string_at(page.trailer, TRAILER_SIZE))
                header.check(identity=page.obj.identity, page=page.obj.page, payload_len=page.obj.payload_len)
            except HeaderError as e:
                raise OSError(f"page {i}: integrity record: {e}") from None
            headers.append(header)
        return headers

    @staticmethod
    def _check_sums(pages: list[_Page], headers: list[PageHeader]) -> None:
        for i, (page, header) in enumerate(zip(pages, headers)):
            if header.checksum is not None and crc32_segments(page.obj.segments) != header.checksum:
                raise OSError(f"page {i}: checksum mismatch")

    def _group_ranges(self, page: _Page, group: range) -> list[Range]:
        """The ranges of layers ``group`` in ``page``: one per part (K, V; MLA: one), each
        covering the group's consecutive layers of that part, into their segments."""
        segs = page.segs
        return [(off, segs[a:b]) for off, a, b in self._runs(group, segs)]

    def _runs(self, group: range, segs: Sequence[Segment]) -> list[tuple[int, int, int]]:
        """``(offset, first, stop)`` per part: the group's bytes of that part start at
        ``offset`` in the object and are the page's segments ``first:stop`` (every page
        of the view has the same segment layout, so this is worked out once)."""
        runs = self._run_cache.get(group)
        if runs is None:
            index: dict[int, int] = {}
            pos = 0
            for i, (_, n) in enumerate(segs):
                index[pos] = i
                pos += n
            runs = []
            for part, (off, _) in enumerate(self.layers[group.start]):
                idx = [index[self.layers[layer][part][0]] for layer in group]
                if idx != list(range(idx[0], idx[0] + len(idx))):
                    raise ValueError("a part's layers are not consecutive segments of the page")
                runs.append((off, idx[0], idx[-1] + 1))
            self._run_cache[group] = runs
        return runs
