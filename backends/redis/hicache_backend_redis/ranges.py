"""Ranged reads for the Redis transports: ``STRLEN`` and one ``GETRANGE`` per non-empty
range, pipelined in one round trip (redis-py; also on a cluster, where every command names
the one key). The size is checked first, so a range past the end is a miss, never a short
read. Redis pays a command per range, so the transport does not declare ranges cheap.
The cluster transport serves ranged reads by one whole read (the base class's fallback)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_sdk import TransportError
from hicache_sdk.kit.segments import memoryviews
from hicache_sdk.transport import Range, check_ranges, ranges_within, read_ranges_whole

__all__ = ["read_ranges_redis"]


def read_ranges_redis(transport: Any, key: str, ranges: Sequence[Range]) -> bool:
    """``transport.read_ranges(key, ranges)`` (see the module docs); never raises for an
    I/O failure."""
    checked = check_ranges(ranges)
    if hasattr(transport, "_rc"):  # a cluster: no single client to pipeline on
        return read_ranges_whole(transport, key, ranges)
    wanted = [(offset, n, segs) for offset, n, segs in checked if n]
    name = transport._prefix + key.encode()

    def run(r: Any) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        pipe.strlen(name)
        for offset, n, _ in wanted:
            pipe.getrange(name, offset, offset + n - 1)
        return list(pipe.execute(raise_on_error=False))

    try:
        got = transport._redis("read_ranges", run)
    except TransportError as e:
        transport.count_failure(e.reason)
        return False
    size = got[0] if got else None
    if not isinstance(size, int) or size <= 0:  # absent (no stored object is empty), or an error reply
        return False
    if not ranges_within(checked, size):
        transport.count_failure("out_of_range")
        return False
    for (_, n, segs), data in zip(wanted, got[1:]):
        if not isinstance(data, bytes) or len(data) != n:
            transport.count_failure("size_mismatch")
            return False
        pos = 0
        for view in memoryviews([s for s in segs if s[1]]):
            view[:] = data[pos : pos + view.nbytes]
            pos += view.nbytes
    return True
