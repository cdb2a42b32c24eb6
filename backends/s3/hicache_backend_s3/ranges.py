"""Ranged reads for :class:`~.s3_transport.S3Transport`: one ``HEAD`` for the object's
size (a range past the end is a miss, never a short read), then one ranged ``GET``
(``Range: bytes=a-b``) per non-empty range, its body streamed into the range's segments.
S3 pays a request per range, so the transport does not declare ranges cheap."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_sdk.transport import Range, check_ranges, check_reason, ranges_within

from .client import classify
from .segio import read_body_into, segment_views

__all__ = ["read_ranges_s3"]


def _count(transport: Any, e: BaseException) -> None:
    try:
        transport.count_failure(check_reason(classify(e)))
    except (ValueError, TypeError):
        transport.count_failure("io")


def read_ranges_s3(transport: Any, key: str, ranges: Sequence[Range]) -> bool:
    """``transport.read_ranges(key, ranges)`` (see the module docs); never raises for an
    I/O failure."""
    checked = check_ranges(ranges)
    if transport._closed:
        return False
    name = transport._key(key)
    try:
        size = int(transport._fast.head_object(Bucket=transport.bucket, Key=name)["ContentLength"])
    except Exception as e:
        if classify(e) != "missing":
            _count(transport, e)
        return False
    if not ranges_within(checked, size):
        transport.count_failure("out_of_range")
        return False
    for offset, n, segs in checked:
        if not n:
            continue
        try:
            r = transport._xfer.get_object(
                Bucket=transport.bucket, Key=name, Range=f"bytes={offset}-{offset + n - 1}"
            )
        except Exception as e:
            if classify(e) != "missing":
                _count(transport, e)
            return False
        body = r["Body"]
        try:
            if int(r.get("ContentLength", -1)) != n or not read_body_into(
                body, segment_views([s for s in segs if s[1]])
            ):
                transport.count_failure("size_mismatch")
                return False
        except Exception as e:
            _count(transport, e)
            return False
        finally:
            body.close()
    return True
