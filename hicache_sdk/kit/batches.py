"""Batch helpers: the contract's "first write wins" for a name given twice in one batch,
and counting (and swapping) answers by identity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["count_is", "first_occurrences", "swap_if_all"]


def count_is(items: Sequence[object], obj: object) -> int:
    """How many of ``items`` *are* ``obj`` (identity; ``list.count`` compares instead, and
    an ``int`` compared with ``None`` costs two ``NotImplemented`` round trips per item)."""
    return sum(1 for x in items if x is obj)


def swap_if_all(items: list[Any], old: object, new: object) -> bool:
    """When every item of the list ``items`` *is* ``old`` (identity), replace each by
    ``new`` in place and answer True; else leave ``items`` unchanged and answer False.
    ``TypeError`` unless ``items`` is a list."""
    if not isinstance(items, list):
        raise TypeError(f"swap_if_all: items must be a list, got {type(items).__name__}")
    if any(x is not old for x in items):
        return False
    items[:] = [new] * len(items)
    return True


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
