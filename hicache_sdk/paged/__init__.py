"""The paged layer: one generic ``HiCacheStorage`` (:class:`PagedStorage`) over any
:class:`~hicache_sdk.transport.Transport`, with the SDK page header and the v2 merge."""

from __future__ import annotations

from .adapter import PagedStorage
from .header import HEADER_SIZE, HeaderError, PageHeader

__all__ = ["HEADER_SIZE", "HeaderError", "PageHeader", "PagedStorage"]
