"""Batch helpers: the contract's "first write wins" for a name given twice in one batch,
and counting (and swapping) answers by identity."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._ext import hotpath as _hotpath

__all__ = ["count_is", "first_occurrences", "swap_if_all"]


def _count_is(items: Sequence[object], obj: object) -> int:
    return sum(1 for x in items if x is obj)


def _swap_if_all(items: list[Any], old: object, new: object) -> bool:
    if not isinstance(items, list):
        raise TypeError(f"swap_if_all: items must be a list, got {type(items).__name__}")
    if any(x is not old for x in items):
        return False
    items[:] = [new] * len(items)
    return True


#: ``count_is(items, obj)``: how many of ``items`` *are* ``obj`` (identity). ``list.count``
#: compares instead, and an ``int`` against ``None`` costs two ``NotImplemented`` round trips
#: per item (5 us for a 256-answer ``exists``); the C function itself (no Python frame)
#: where the extension built.
count_is: Callable[[Sequence[object], object], int] = _hotpath.count_is if _hotpath is not None else _count_is

#: ``swap_if_all(items, old, new)``: when every item of the list ``items`` *is* ``old``
#: (identity), replace each by ``new`` in place and answer True; else leave ``items``
#: unchanged, False. A transport's all-present answer built in the list its client just
#: returned (still in the caches) instead of a new list (2.7 us per 256-key lookup after a
#: remote call, ``docs/backends/mooncake.md``).
swap_if_all: Callable[[list[Any], object, object], bool] = (
    _hotpath.swap_if_all if _hotpath is not None else _swap_if_all
)


def first_occurrences(names: Sequence[str]) -> tuple[list[int], list[int]] | None:
    """``None`` when every name is distinct; else ``(keep, owner)``: ``keep`` the index of
    each distinct name's first occurrence, in order, and ``owner[i]`` the position in
    ``keep`` whose result entry ``i`` shares. Write ``[x[j] for j in keep]`` once, then
    answer ``[result[owner[i]] for i in range(len(names))]``: the first copy wins."""
    if len(set(names)) == len(names):  # the common case, at C speed
        return None
    first: dict[str, int] = {}
    for nm in names:
        first.setdefault(nm, len(first))
    if len(first) == len(names):
        return None
    keep = [-1] * len(first)
    owner = []
    for i, nm in enumerate(names):
        j = first[nm]
        if keep[j] < 0:
            keep[j] = i
        owner.append(j)
    return keep, owner
