"""Rank consensus: the MIN all-reduce of hit counts and acknowledgements.

:class:`LocalGroup` is one rank (identity). :class:`GlooGroup` reduces over a
``torch.distributed`` process group (gloo, CPU tensors). Every rank must call the same
sequence of reductions; a rank whose operation was cancelled still calls, contributing 0.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class RankGroup(Protocol):
    rank: int
    world_size: int

    def min_ints(self, values: list[int]) -> list[int]: ...


class LocalGroup:
    rank = 0
    world_size = 1

    def min_ints(self, values: list[int]) -> list[int]:
        return list(values)


class GlooGroup:
    """MIN reductions over ``group`` (``None``: the default group)."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self._group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)

    def min_ints(self, values: list[int]) -> list[int]:
        t = torch.tensor(values, dtype=torch.int64)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MIN, group=self._group)
        return [int(v) for v in t.tolist()]


def restorable_flags(span_pages: int, hit_pages: int, restorable: list[int] | None) -> list[int]:
    """A rank's 0/1 flag vector of length ``span_pages + 1`` (spec 2.3, TRAILING pools):
    flag[0] = 1 and flag[p] = 1 for every restorable endpoint p <= hit (``None``: all of 1..hit)."""
    flags = [0] * (span_pages + 1)
    flags[0] = 1
    points = range(1, hit_pages + 1) if restorable is None else [p for p in restorable if 0 < p <= hit_pages]
    for p in points:
        flags[p] = 1
    return flags


def agreed_endpoint(group: RankGroup, span_pages: int, hit_pages: int, restorable: list[int] | None) -> int:
    """The largest page count restorable on every rank (MIN of the flag vectors)."""
    flags = group.min_ints(restorable_flags(span_pages, hit_pages, restorable))
    return max(p for p, f in enumerate(flags) if f)
