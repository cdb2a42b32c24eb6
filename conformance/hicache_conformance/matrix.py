"""The host-pool matrix the suite runs data tests over, full or pairwise.

Dimensions: attention kind (MHA / MLA), host layout, dtype and page size. The full
product is small enough for the in-process ``memory`` backend; against a real server the
suite uses a pairwise cover (every pair of values of any two dimensions appears in at
least one case), which keeps the run to a handful of cases.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PoolCase", "DIMENSIONS", "full_matrix", "pairwise", "pool_cases"]


@dataclass(frozen=True)
class PoolCase:
    """One host-pool configuration of the KV pool.

    ``kind``: ``"mha"`` or ``"mla"``; ``layout``: a host layout both kinds support;
    ``dtype``: a torch dtype name (``"bfloat16"``); ``page_size``: tokens per page.
    """

    kind: str = "mha"
    layout: str = "page_first"
    dtype: str = "bfloat16"
    page_size: int = 4

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.layout}-{self.dtype}-p{self.page_size}"


#: The values of each dimension (``page_head`` is MHA-only and is left out so every
#: combination is valid).
DIMENSIONS: dict[str, tuple[object, ...]] = {
    "kind": ("mha", "mla"),
    "layout": ("layer_first", "page_first", "page_first_direct"),
    "dtype": ("bfloat16", "float16", "float32"),
    "page_size": (1, 4),
}


def full_matrix(dims: dict[str, tuple[object, ...]] | None = None) -> list[PoolCase]:
    """Every combination of the dimensions."""
    d = DIMENSIONS if dims is None else dims
    names = list(d)
    return [PoolCase(**dict(zip(names, combo))) for combo in itertools.product(*(d[n] for n in names))]  # type: ignore[arg-type]


def pairwise(dims: dict[str, tuple[object, ...]] | None = None) -> list[PoolCase]:
    """A greedy all-pairs cover: every pair of values of any two dimensions appears in
    at least one returned case. Deterministic (same input, same output)."""
    d = DIMENSIONS if dims is None else dims
    names = list(d)
    uncovered: set[tuple[int, object, int, object]] = set()
    for i, j in itertools.combinations(range(len(names)), 2):
        for a in d[names[i]]:
            for b in d[names[j]]:
                uncovered.add((i, a, j, b))
    candidates = list(itertools.product(*(d[n] for n in names)))
    chosen: list[Sequence[object]] = []
    while uncovered:
        best = max(
            candidates,
            key=lambda c: sum(
                (i, c[i], j, c[j]) in uncovered for i, j in itertools.combinations(range(len(names)), 2)
            ),
        )
        for i, j in itertools.combinations(range(len(names)), 2):
            uncovered.discard((i, best[i], j, best[j]))
        chosen.append(best)
    return [PoolCase(**dict(zip(names, combo))) for combo in chosen]  # type: ignore[arg-type]


def pool_cases(mode: str) -> list[PoolCase]:
    """``"full"`` -> :func:`full_matrix`; ``"pairwise"`` -> :func:`pairwise`;
    ``"minimal"`` -> one MHA and one MLA case. Raises ``ValueError`` naming ``mode``."""
    if mode == "full":
        return full_matrix()
    if mode == "pairwise":
        return pairwise()
    if mode == "minimal":
        return [PoolCase("mha", "page_first", "bfloat16", 4), PoolCase("mla", "layer_first", "float16", 1)]
    raise ValueError(f"mode must be 'full', 'pairwise' or 'minimal', got {mode!r}")
