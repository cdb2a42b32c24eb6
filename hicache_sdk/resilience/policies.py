"""The policies the resilience layer composes around a transport: small frozen objects that a
backend or a user configures and injects (``ResilientTransport`` builds its breakers,
worker pool and staging memory from them).

* :class:`Deadline` -- how long a caller waits for existence and for transfers, and how
  many abandoned calls may run on before the breaker is held open;
* :class:`Breaker` -- how many consecutive failures open the circuit breaker, and how long
  it stays open before a probe;
* :class:`Staging` -- how much SDK-owned memory deadline-bound transfers may stage through,
  and how a batch is laid out in it;
* :class:`~hicache_sdk.resilience.retry.Retry` -- how often an I/O failure is retried within
  the deadline (none by default);
* :class:`Resilience` -- the four together. ``Resilience.from_config(config)`` reads the
  shared ``BackendConfig`` keys (``exists_timeout_s``, ``transfer_timeout_s``,
  ``breaker_failures``, ``breaker_reset_s``, ``max_abandoned``, ``staging_bytes``, and
  ``follow_caller_cpu`` where the config has it): the default way to build them.

Example, a backend that retries twice with exponential back-off::

    class MyStorage(PagedStorage):
        def create_resilience(self) -> Resilience:
            return dataclasses.replace(
                Resilience.from_config(self.config),
                retry=Retry(ExponentialBackoff(base_s=0.01, cap_s=0.1), 2),
            )
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..transport import Segments
from .breaker import CircuitBreaker
from .retry import Retry

__all__ = ["Breaker", "Deadline", "Quarantine", "Resilience", "ResilienceConfig", "Staging"]


class ResilienceConfig(Protocol):
    """The config fields :meth:`Resilience.from_config` reads (every
    :class:`~hicache_sdk.config.BackendConfig` has them)."""

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


@dataclass(frozen=True)
class Deadline:
    """``exists_s``: the most a caller waits for an existence query (and for a health probe);
    ``transfer_s``: for a read, write or delete. ``0`` runs the call inline in the caller's
    thread, bounded only by the transport's own timeouts. Everything a call does -- a health
    probe of the breaker, retries, the staging copies, the existence check after a failed
    read -- counts against the one deadline of the caller's batch. ``max_abandoned``: calls
    that outlived their deadline and still run before the transfer breaker is held open.
    ``follow_caller_cpu``: wake a call's worker on the caller's CPU (an opt-in; see
    :mod:`~hicache_sdk.resilience.deadline`)."""

    exists_s: float = 0.2
    transfer_s: float = 5.0
    max_abandoned: int = 8
    follow_caller_cpu: bool = False

    def __post_init__(self) -> None:
        if not (self.exists_s >= 0 and self.transfer_s >= 0):
            raise ValueError(
                f"exists_s and transfer_s must be >= 0, got {self.exists_s!r}, {self.transfer_s!r}"
            )
        if self.max_abandoned < 0:
            raise ValueError(f"max_abandoned must be >= 0, got {self.max_abandoned!r}")

    def seconds(self, op: str) -> float:
        """The deadline of ``op``: ``exists_s`` for ``"exists"`` and ``"health"``, else
        ``transfer_s``."""
        return self.exists_s if op in ("exists", "health") else self.transfer_s


@dataclass(frozen=True)
class Breaker:
    """``failures`` consecutive failures open a breaker; after ``reset_s`` one probe goes
    through (see :class:`~hicache_sdk.resilience.breaker.CircuitBreaker`)."""

    failures: int = 5
    reset_s: float = 1.0

    def __post_init__(self) -> None:
        if self.failures < 1:
            raise ValueError(f"failures must be >= 1, got {self.failures!r}")
        if not self.reset_s >= 0:
            raise ValueError(f"reset_s must be >= 0, got {self.reset_s!r}")

    def create(
        self, *, clock: Callable[[], float] = time.monotonic, on_state: Callable[[str], None] | None = None
    ) -> CircuitBreaker:
        """A new breaker with this policy."""
        return CircuitBreaker(self.failures, self.reset_s, clock=clock, on_state=on_state)


@dataclass(frozen=True)
class Staging:
    """``capacity``: the most bytes of staging memory (in use plus cached). A batch is moved
    in chunks of at most ``capacity // callers`` bytes, so that ``callers`` threads can
    progress at once; each object gets its own aligned slot (:meth:`slots`)."""

    capacity: int = 256 << 20
    callers: int = 4

    def __post_init__(self) -> None:
        if self.capacity < 0 or self.callers < 1:
            raise ValueError(
                f"capacity must be >= 0 and callers >= 1, got {self.capacity!r}, {self.callers!r}"
            )

    @property
    def chunk_bytes(self) -> int:
        return max(self.capacity // self.callers, 1)

    def chunks(self, sizes: Sequence[int]) -> list[tuple[int, int]]:
        """``(start, end)`` index ranges of consecutive objects of at most
        :attr:`chunk_bytes` bytes in all (an object larger than that is a chunk alone)."""
        limit = self.chunk_bytes
        if sum(sizes) <= limit:  # the usual batch: one chunk
            return [(0, len(sizes))]
        out: list[tuple[int, int]] = []
        start, acc = 0, 0
        for i, s in enumerate(sizes):
            if i > start and acc + s > limit:
                out.append((start, i))
                start, acc = i, 0
            acc += s
        out.append((start, len(sizes)))
        return out

    @staticmethod
    def slots(sizes: Sequence[int]) -> tuple[list[int], int]:
        """Each object's offset in one staging buffer, and the bytes the slots need. Each slot
        starts 4 KiB-aligned (64 B for objects under 4 KiB) and is rounded up to that step: a
        copy whose source and destination differ in alignment runs far slower on some CPUs,
        and an ``O_DIRECT`` read needs aligned memory."""
        if sizes and sizes.count(sizes[0]) == len(sizes):  # one size (pages of one pool)
            n = sizes[0]
            step = (n + 4095) & -4096 if n >= 4096 else (n + 63) & -64
            return [i * step for i in range(len(sizes))], step * len(sizes)
        offs: list[int] = []
        pos = 0
        for n in sizes:
            if n >= 4096:
                pos = (pos + 4095) & -4096
                offs.append(pos)
                pos += (n + 4095) & -4096
            else:
                offs.append(pos)  # always 64 B-aligned: every slot is a multiple of 64
                pos += (n + 63) & -64
        return offs, pos

    @staticmethod
    def runs(
        to_staging: bool, starts: Sequence[int], buffers: Sequence[Segments]
    ) -> list[tuple[int, int, int]]:
        """The ``(dst, src, n)`` copies between the objects' slots at ``starts`` and their
        segments: caller -> staging (``to_staging``, a write's snapshot) or staging -> caller
        (a read's result), per segment in order."""
        if set(map(len, buffers)) == {1}:  # one segment per object: the common case
            if to_staging:
                return [(s, segs[0][0], segs[0][1]) for s, segs in zip(starts, buffers)]
            return [(segs[0][0], s, segs[0][1]) for s, segs in zip(starts, buffers)]
        out: list[tuple[int, int, int]] = []
        for off, segs in zip(starts, buffers):
            for addr, n in segs:
                out.append((off, addr, n) if to_staging else (addr, off, n))
                off += n
        return out


@dataclass(frozen=True)
class Resilience:
    """Every policy around one transport (module docs)."""

    deadline: Deadline = field(default_factory=Deadline)
    breaker: Breaker = field(default_factory=Breaker)
    staging: Staging = field(default_factory=Staging)
    retry: Retry = field(default_factory=Retry)

    @classmethod
    def from_config(cls, config: ResilienceConfig, *, retry: Retry | None = None) -> Resilience:
        """The policies the shared config keys select (no retry unless ``retry``); a config
        without ``follow_caller_cpu`` leaves it off."""
        return cls(
            Deadline(
                float(config.exists_timeout_s),
                float(config.transfer_timeout_s),
                int(config.max_abandoned),
                bool(getattr(config, "follow_caller_cpu", False)),
            ),
            Breaker(int(config.breaker_failures), float(config.breaker_reset_s)),
            Staging(int(config.staging_bytes)),
            retry if retry is not None else Retry(),
        )
