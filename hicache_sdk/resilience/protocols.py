"""Small pieces of :mod:`hicache_sdk.resilience.resilient`: the config and quarantine
protocols, argument checks and error reasons."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..transport import Segments, TransportError

__all__ = ["ABANDON_COUNTER", "Quarantine", "ResilienceConfig", "bind", "error_reason", "segment_sizes"]

ABANDON_COUNTER = {
    "exists": "abandoned_exists",
    "read": "abandoned_reads",
    "write": "abandoned_writes",
    "delete": "abandoned_deletes",
    "health": "abandoned_health",
}


class ResilienceConfig(Protocol):
    """The config fields the wrapper reads (every :class:`~hicache_sdk.config.BackendConfig`
    has them)."""

    @property
    def exists_timeout_s(self) -> float: ...
    @property
    def transfer_timeout_s(self) -> float: ...
    @property
    def breaker_failures(self) -> int: ...
    @property
    def breaker_reset_s(self) -> float: ...
    @property
    def max_abandoned(self) -> int: ...
    @property
    def staging_bytes(self) -> int: ...


class Quarantine(Protocol):
    """Keeps caller-owned slots out of reuse while an I/O on them may still run."""

    def hold(self, buffers: Sequence[Segments]) -> None: ...

    def release(self, buffers: Sequence[Segments]) -> None: ...


def segment_sizes(name: str, buffers: Sequence[Segments]) -> list[int]:
    out = []
    for i, segs in enumerate(buffers):
        total = 0
        for addr, n in segs:
            if n < 0 or (n and not addr):
                raise ValueError(f"{name}[{i}]: bad segment ({addr}, {n})")
            total += n
        out.append(total)
    return out


def bind(
    fn: Callable[[Sequence[str], Sequence[Segments]], list[bool]],
    keys: list[str],
    bufs: Sequence[Segments],
) -> Callable[[], list[bool]]:
    return lambda: fn(keys, bufs)


def error_reason(e: BaseException) -> str:
    return e.reason if isinstance(e, TransportError) else type(e).__name__
