"""Ranged reads for the Redis transports: ``STRLEN`` and one ``GETRANGE`` per non-empty
range, pipelined in one round trip (redis-py). The size is checked first, so a range past
the end is a miss, never a short read. Redis pays a command per range, so the transport does
not declare ranges cheap. The cluster transport serves ranged reads by one whole read (the
base class's fallback)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hicache_sdk import TransportError
from hicache_sdk.kit.segments import memoryviews
from hicache_sdk.transport import Range, check_ranges, ranges_within

__all__ = ["read_ranges_redis"]


def read_ranges_redis(
    run: Callable[[Callable[[Any], list[Any]]], list[Any]],
    name: bytes,
    count_failure: Callable[[str], None],
    ranges: Sequence[Range],
) -> bool:
    """A ranged read of the key ``name`` (see the module docs): ``run(fn)`` calls ``fn`` with
    the transport's redis-py client under its deadline and error mapping (``TransportError``),
    ``count_failure(reason)`` is the transport's failure counter. Never raises for an I/O
    failure."""
    checked = check_ranges(ranges)
    wanted = [(offset, n, segs) for offset, n, segs in checked if n]

    def pipelined(r: Any) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        pipe.strlen(name)
        for offset, n, _ in wanted:
            pipe.getrange(name, offset, offset + n - 1)
        return list(pipe.execute(raise_on_error=False))

    try:
        got = run(pipelined)
    except TransportError as e:
        count_failure(e.reason)
        return False
    size = got[0] if got else None
    if not isinstance(size, int) or size <= 0:  # absent (no stored object is empty), or an error reply
        return False
    if not ranges_within(checked, size):
        count_failure("out_of_range")
        return False
    for (_, n, segs), data in zip(wanted, got[1:]):
        if not isinstance(data, bytes) or len(data) != n:
            count_failure("size_mismatch")
            return False
        pos = 0
        for view in memoryviews([s for s in segs if s[1]]):
            view[:] = data[pos : pos + view.nbytes]
            pos += view.nbytes
    return True
