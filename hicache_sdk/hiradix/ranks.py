"""Rank consensus: the MIN all-reduce of hit counts and acknowledgements.

:class:`LocalGroup` is one rank (identity). :class:`GlooGroup` reduces over a
``torch.distributed`` process group (gloo, CPU tensors). Every rank must call the same
sequence of reductions; a rank whose operation was cancelled still calls, contributing 0.

The group is the ranks that serve **the same requests**: with DP attention, each DP replica
(``attn_tp_size = tp_size // dp_size`` consecutive ranks) schedules its own requests, so the
reduction must run on that replica's attention-TP group (:meth:`GlooGroup.attention_tp`),
never on the whole TP group: there a replica waits for collectives the other replicas never
issue (sgl-project/sglang#7158). A rank whose backend never returns still joins every
collective when the read path bounds its calls (``ReadPathConfig.io_timeout_s``): the call
is abandoned and the rank contributes a miss.
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

    @classmethod
    def attention_tp(cls, dp_size: int, group: Any = None, timeout: Any = None) -> GlooGroup:
        """This rank's attention-TP group with DP attention: the ranks of ``group`` (the TP
        group; ``None``: the default group) split into ``dp_size`` replicas of consecutive
        ranks (SGLang: ``dp_rank = tp_rank // attn_tp_size``). Every rank of ``group`` must
        call this (``new_group`` is collective), in the same order. ``timeout`` (a
        ``datetime.timedelta``) bounds each collective of the new group.

        Raises ``ValueError`` when the group's size is not a multiple of ``dp_size``."""
        import torch.distributed as dist

        world = dist.get_world_size(group)
        if dp_size < 1 or world % dp_size:
            raise ValueError(f"dp_size must divide the TP group's size {world}, got {dp_size}")
        ranks = dist.get_process_group_ranks(group) if group is not None else list(range(world))
        attn = world // dp_size
        me = dist.get_rank()
        mine: Any = None
        for d in range(dp_size):
            members = ranks[d * attn : (d + 1) * attn]
            kw = {} if timeout is None else {"timeout": timeout}
            sub = dist.new_group(members, backend="gloo", **kw)
            if me in members:
                mine = sub
        return cls(mine)


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
