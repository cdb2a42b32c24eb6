"""Ranged reads for :class:`~.s3_transport.S3Transport`: one ``HEAD`` for the object's
size (a range past the end is a miss, never a short read), then one ranged ``GET``
(``Range: bytes=a-b``) per non-empty range, its body streamed into the range's segments.
S3 pays a request per range, so the transport does not declare ranges cheap."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hicache_sdk.transport import Range, check_ranges, check_reason, ranges_within

from .client import classify
from .segio import read_body_into, segment_views

__all__ = ["read_ranges_s3"]


def _count(count_failure: Callable[[str], None], e: BaseException) -> None:
    try:
        count_failure(check_reason(classify(e)))
    except (ValueError, TypeError):
        count_failure("io")


def read_ranges_s3(
    head: Callable[[], dict[str, Any]],
    get_range: Callable[[str], dict[str, Any]],
    count_failure: Callable[[str], None],
    ranges: Sequence[Range],
) -> bool:
    """A ranged read of one object (see the module docs): ``head()`` is its ``HEAD``,
    ``get_range("bytes=a-b")`` a ranged ``GET``, ``count_failure(reason)`` the
    transport's failure counter. Never raises for an I/O failure."""
    checked = check_ranges(ranges)
    try:
        size = int(head()["ContentLength"])
    except Exception as e:
        if classify(e) != "missing":
            _count(count_failure, e)
        return False
    if not ranges_within(checked, size):
        count_failure("out_of_range")
        return False
    for offset, n, segs in checked:
        if not n:
            continue
        try:
            r = get_range(f"bytes={offset}-{offset + n - 1}")
        except Exception as e:
            if classify(e) != "missing":
                _count(count_failure, e)
            return False
        body = r["Body"]
        try:
            if int(r.get("ContentLength", -1)) != n or not read_body_into(
                body, segment_views([s for s in segs if s[1]])
            ):
                count_failure("size_mismatch")
                return False
        except Exception as e:
            _count(count_failure, e)
            return False
        finally:
            body.close()
    return True
