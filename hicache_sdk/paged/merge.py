"""Folding per-pool existence into one v2 hit (SGLang 0.5.23 ``batch_exists_v2``).

:func:`fold_exists_v2` is the restorable-endpoint intersection of File and Mooncake
0.5.23 (spec 2.1). :func:`fold_min_of_maxima` is the older rule (spec 2.2, still in
``SimHiCacheStorage``), kept for tests and documentation: it can choose an endpoint that
some pool cannot restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..spec import PoolHitPolicy, PoolTransferResult

__all__ = ["PoolPresence", "fold_exists_v2", "fold_min_of_maxima", "pool_endpoints"]


@dataclass(frozen=True)
class PoolPresence:
    """Existence of one extra pool, aligned with the KV keys.

    ``present[i]``: the pool's object(s) for KV page ``i`` all exist. ``window``: the
    TRAILING window as SGLang infers it, ``len(transfer.keys)`` (``N = max(1, window)``;
    ignored for ALL_PAGES). ``present`` may be shorter than the KV prefix: missing
    entries count as absent.
    """

    name: str
    policy: PoolHitPolicy
    window: int
    present: Sequence[bool]


def _kv_prefix(kv_present: Sequence[bool]) -> int:
    for i, ok in enumerate(kv_present):
        if not ok:
            return i
    return len(kv_present)


def pool_endpoints(pool: PoolPresence, kv_pages: int) -> tuple[list[int], int]:
    """``(endpoints, boundary)`` of one pool over prefixes ``1..kv_pages``.

    ALL_PAGES: endpoints ``1..b`` with ``b`` the first page in ``[0, kv_pages)`` lacking
    the pool. TRAILING_PAGES: ``p`` is an endpoint when pages ``[max(0, p-N), p)`` all
    hold the pool; the boundary is the largest endpoint (0 when none). Any other policy
    (BLOCK_GROUPS included) raises ``ValueError``, as File and Mooncake do."""
    present = pool.present

    def has(i: int) -> bool:
        return i < len(present) and bool(present[i])

    policy = getattr(pool.policy, "value", pool.policy)
    if policy == PoolHitPolicy.ALL_PAGES.value:
        boundary = next((i for i in range(kv_pages) if not has(i)), kv_pages)
        return list(range(1, boundary + 1)), boundary
    if policy == PoolHitPolicy.TRAILING_PAGES.value:
        n = max(1, pool.window)
        # run[p] = number of consecutive present pages ending just before p.
        endpoints: list[int] = []
        run = 0
        for p in range(1, kv_pages + 1):
            run = run + 1 if has(p - 1) else 0
            if run >= min(n, p):
                endpoints.append(p)
        return endpoints, (endpoints[-1] if endpoints else 0)
    raise ValueError(f"Unsupported pool hit policy: {pool.policy!r} (pool {pool.name!r})")


def fold_exists_v2(
    kv_present: Sequence[bool],
    pools: Sequence[PoolPresence],
    *,
    logical_kv_anchor: bool = False,
) -> PoolTransferResult:
    """Spec 2.1: the usable hit and the restorable endpoints.

    ``kv_pages`` is the leading run of ``kv_present`` (``len(kv_present)`` with
    ``logical_kv_anchor``: the extra pools alone decide). ``kv_pages == 0`` gives
    ``(0, {}, [])``. Otherwise ``R = {1..kv_pages}`` is intersected with each pool's
    endpoints in order, stopping early (later pools unchecked, unrecorded, and their
    policy not validated) once ``R`` is empty. ``extra_pool_hit_pages`` holds
    ``"kv": kv_pages`` and each checked pool's own boundary when > 0 (a repeated name
    keeps the later value). ``kv_hit_pages = max(R)`` (0 if empty) and
    ``restorable_prefix_pages = sorted(R)``.
    """
    kv_pages = len(kv_present) if logical_kv_anchor else _kv_prefix(kv_present)
    if kv_pages == 0:
        return PoolTransferResult(0, {}, [])
    hits: dict[str, int] = {"kv": kv_pages}
    restorable = list(range(1, kv_pages + 1))
    for pool in pools:
        if not restorable:
            break
        endpoints, boundary = pool_endpoints(pool, kv_pages)
        if boundary:
            hits[str(getattr(pool.name, "value", pool.name))] = boundary
        allowed = set(endpoints)
        restorable = [p for p in restorable if p in allowed]
    return PoolTransferResult(restorable[-1] if restorable else 0, hits, restorable)


def fold_min_of_maxima(
    kv_present: Sequence[bool],
    pools: Sequence[PoolPresence],
    *,
    logical_kv_anchor: bool = False,
) -> PoolTransferResult:
    """Spec 2.2 (File <= 0.5.20, Mooncake <= 0.5.18, ``SimHiCacheStorage``):
    ``min(kv_pages, each pool's boundary)``, no endpoint list
    (``restorable_prefix_pages=None``); stops at the first pool that brings the hit to
    0, as ``SimHiCacheStorage`` does. Can pick an endpoint that a TRAILING pool
    cannot restore: kept only to document and test that difference."""
    kv_pages = len(kv_present) if logical_kv_anchor else _kv_prefix(kv_present)
    if kv_pages == 0:
        return PoolTransferResult(0, {}, None)
    hits: dict[str, int] = {"kv": kv_pages}
    final = kv_pages
    for pool in pools:
        if final == 0:
            break
        _, boundary = pool_endpoints(pool, kv_pages)
        if boundary:
            hits[str(getattr(pool.name, "value", pool.name))] = boundary
        final = min(final, boundary)
    return PoolTransferResult(final, hits, None)
