"""Layer-by-layer loads through a transport's ranged reads (``Transport.read_ranges``).

Used only where the raw transport reads ranges natively and cheaply (``cheap_ranges``:
the file and Mooncake transports) and the key scheme stores one object per page with the
SDK's integrity trailer (the ``default`` scheme). Each page object holds every K layer,
then every V layer (:func:`~.view.layer_ranges`). Layers are read in groups
(:func:`layer_groups`: layer 0 alone, then 1, 2-3, 4-7, ...), one ranged read per page per
group (a range per K and V run of the group's layers), into the device pool's segments; a
group's layers are marked complete when every page's group has landed. So layer 0 lands
after one small read per page, and a 32-layer batch takes 6 reads per page, not 32. Integrity holds as for whole reads:

* layer 0's read includes each page's trailer, so identity, page and length are checked
  before any layer completes (a foreign or torn page fails the batch at once);
* the payload checksum, when the page carries one, is checked once the last layer has
  landed, before that layer completes, so a mismatch makes ``finish`` return ``False``.

The ranged reads go through the backend's resilience layer (its
:class:`~hicache_sdk.transport.RangedReads`): one call per layer for every page of the
batch, all under one transfer deadline for the whole batch (as one whole read of the
batch would be), the transfer breaker, and staging (a read the deadline abandons lands in
SDK-owned memory, never in the device pool). A refused, failed or abandoned layer fails
the batch: ``finish_layer_wise_loading`` returns ``False``, nothing raises.
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
    __slots__ = ("name", "by_offset", "trailer", "obj")

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.name: str = obj.name
        self.by_offset: dict[int, Segment] = {}
        pos = 0
        for seg in obj.segments:
            self.by_offset[pos] = seg
            pos += seg[1]
        self.trailer = (ctypes.c_char * TRAILER_SIZE)()


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

    def _pages(self, keys: Sequence[str], starts: Sequence[int]) -> list[_Page]:
        from ...hostpool.describe import page_segments

        kv = self.store._require_kv("linker load")
        segs = page_segments(self.view, kv.layout, starts)
        pages = []
        for key, page_segs in zip(keys, segs):
            objs = kv.objects(self.store.scheme, key, page_segs)
            if len(objs) != 1 or not objs[0].has_header:
                raise ValueError("ranged loads need one trailered object per page")
            pages.append(_Page(objs[0]))
        return pages

    def load(self, counter: Any, index: int, keys: Sequence[str], starts: Sequence[int]) -> None:
        """Read every layer of the pages ``keys`` into the slots starting at ``starts``,
        completing each layer on ``counter`` (batch ``index``) once it has landed. Raises
        on the first failure (the caller fails the batch)."""
        pages = self._pages(keys, starts)
        scope = self.scoped.deadline_scope("read") if self.scoped is not None else contextlib.nullcontext()
        with scope:
            self._load(counter, index, pages)

    def _load(self, counter: Any, index: int, pages: list[_Page]) -> None:
        groups = layer_groups(len(self.layers))
        last = len(groups) - 1
        names = [page.name for page in pages]
        headers: list[PageHeader] = []
        for g, group in enumerate(groups):
            batch: list[list[Range]] = []
            for page in pages:
                ranges = self._group_ranges(page, group)
                if g == 0:
                    ranges.append((page.obj.payload_len, [(ctypes.addressof(page.trailer), TRAILER_SIZE)]))
                batch.append(ranges)
            got = self.ranged.read_ranges_batch(names, batch)
            if not all(got):
                raise OSError(f"page {got.index(False)}: layers {group.start}-{group.stop - 1} did not read")
            for i, page in enumerate(pages):
                if g == 0:
                    try:
                        header = PageHeader.decode(bytes(page.trailer))
                        header.check(
                            identity=page.obj.identity, page=page.obj.page, payload_len=page.obj.payload_len
                        )
                    except HeaderError as e:
                        raise OSError(f"page {i}: integrity record: {e}") from None
                    headers.append(header)
            if g == last:
                for i, (page, header) in enumerate(zip(pages, headers)):
                    if header.checksum is not None and crc32_segments(page.obj.segments) != header.checksum:
                        raise OSError(f"page {i}: checksum mismatch")
            for layer in group:
                counter.complete(index, layer)

    def _group_ranges(self, page: _Page, group: range) -> list[Range]:
        """The ranges of layers ``group`` in ``page``: one per part (K, V; MLA: one), each
        covering the group's consecutive layers of that part, into their segments."""
        first = self.layers[group.start]
        return [
            (off, [page.by_offset[self.layers[layer][part][0]] for layer in group])
            for part, (off, _) in enumerate(first)
        ]
