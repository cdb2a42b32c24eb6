"""Hybrid (sidecar) pools on the read and write paths (spec 1.4, 2.1-2.4, 5.2-5.5, 5.8).

A :class:`Sidecar` declares one extra host pool next to the KV pool:

* **KV-derived** (``kv_derived=True``, ALL_PAGES; the DSA indexer, draft KV): shares the KV
  host slot indices and the KV page hashes (``indices_from_pool=KV``). The read path fetches
  it in the same 128-page chunk as the KV with ``batch_get_v2`` and *clamps*: the chunk hit
  is the minimum of the KV leading run and each such pool's leading run.
* **Trailing** (``kv_derived=False``, TRAILING_PAGES; Mamba state with ``window_pages=1``,
  SWA with ``window_pages = ceil(window / page_size)``): own host slots (``pool.page_size``
  slots per KV page). Only the last ``N`` pages before an endpoint must hold it, so stored
  endpoints are sparse. The read path reads it after every KV chunk fully succeeded, keyed
  by the last ``N`` hashes of the agreed hit (``_sync_trailing_keys``), and acceptance is
  **all-or-nothing**: KV short of the planned hit, or any such pool's leading run short of
  its keys, discards the whole prefetch (``sidecar_miss`` / ``hybrid_incomplete``).

The content of a sidecar page in this model is :func:`side_page` of (page hash, pool name),
so a state committed under the wrong prefix is caught (:func:`side_page_ok`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hicache_sdk.spec import PoolHitPolicy, PoolName, PoolTransfer, pool_name_str

PLACEHOLDER = "__placeholder__"  # 0.5.23's TRAILING keys until _sync_trailing_keys re-points them


@dataclass(frozen=True, eq=False)
class Sidecar:
    """One extra pool. ``pool`` is its host pool (``MambaHostPool``, ``SWAHostPool``,
    ``IndexerHostPool``, ...), registered with the backend under ``name`` by the caller.

    Raises ``ValueError`` for an empty name or ``"kv"``, BLOCK_GROUPS or an unknown policy,
    a KV-derived pool that is not ALL_PAGES, a trailing pool that is not TRAILING_PAGES (this
    model stages no non-KV-derived ALL_PAGES pools), or ``window_pages < 1``."""

    name: str
    pool: Any
    hit_policy: PoolHitPolicy = PoolHitPolicy.TRAILING_PAGES
    window_pages: int = 1
    kv_derived: bool = False

    def __post_init__(self) -> None:
        name = pool_name_str(self.name)
        if name == PoolName.KV.value:
            raise ValueError("Sidecar.name: 'kv' is the anchor pool, not a sidecar")
        object.__setattr__(self, "name", name)
        value = getattr(self.hit_policy, "value", self.hit_policy)
        if value not in (PoolHitPolicy.ALL_PAGES.value, PoolHitPolicy.TRAILING_PAGES.value):
            raise ValueError(f"Sidecar {name!r}: unsupported hit_policy {value!r}")
        policy = PoolHitPolicy(value)
        object.__setattr__(self, "hit_policy", policy)
        if self.kv_derived and policy is not PoolHitPolicy.ALL_PAGES:
            raise ValueError(f"Sidecar {name!r}: a KV-derived pool must be ALL_PAGES")
        if not self.kv_derived and policy is not PoolHitPolicy.TRAILING_PAGES:
            raise ValueError(f"Sidecar {name!r}: a pool with its own slots must be TRAILING_PAGES")
        if (
            isinstance(self.window_pages, bool)
            or not isinstance(self.window_pages, int)
            or self.window_pages < 1
        ):
            raise ValueError(f"Sidecar {name!r}: window_pages must be an int >= 1, got {self.window_pages!r}")

    @property
    def trailing(self) -> bool:
        return self.hit_policy is PoolHitPolicy.TRAILING_PAGES

    @property
    def slots_per_page(self) -> int:
        return int(self.pool.page_size)


@dataclass(eq=False)
class SideRead:
    """A trailing pool's part of one prefetch: window, keys (the last ``window`` hashes of
    the hit), staging slots, and the agreed leading run after the read (``None`` until then)."""

    sc: Sidecar
    window: int
    keys: list[str] = field(default_factory=list)
    slots: torch.Tensor | None = None
    hits: int | None = None


def transfer(name: str, **fields: Any) -> PoolTransfer:
    """A :class:`PoolTransfer` for pool ``name`` (a plain string; SGLang accepts any)."""
    return PoolTransfer(name=name, **fields)  # type: ignore[arg-type]


def exists_transfers(sidecars: Sequence[Sidecar], span_pages: int, at_root: bool) -> list[PoolTransfer]:
    """The ``pool_transfers`` of the hit query. A trailing pool's window is
    ``min(window_pages, span_pages)`` at the root; a mid-tree span shorter than the window
    skips that pool entirely (spec 2.1, SWA)."""
    out: list[PoolTransfer] = []
    for sc in sidecars:
        if sc.kv_derived:
            out.append(transfer(sc.name, hit_policy=PoolHitPolicy.ALL_PAGES, indices_from_pool=PoolName.KV))
            continue
        n = min(sc.window_pages, span_pages)
        if n < sc.window_pages and not at_root:
            continue
        out.append(transfer(sc.name, keys=[PLACEHOLDER] * n, hit_policy=PoolHitPolicy.TRAILING_PAGES))
    return out


def side_page(hash_hex: str, sc: Sidecar) -> torch.Tensor:
    """Deterministic flat page of pool ``sc`` for the page with hash ``hash_hex``."""
    dummy = sc.pool.get_dummy_flat_data_page()
    salt = sum(sc.name.encode()) * 7919
    seed = int(hash_hex[:12], 16) + salt
    vals = (torch.arange(dummy.numel(), dtype=torch.int64) * 17 + seed) % 251
    return vals.to(dummy.dtype)


def write_side_page(sc: Sidecar, slot: int, hash_hex: str) -> None:
    """Fill the page starting at host slot ``slot`` of ``sc.pool`` (the device -> host copy
    of this model: sidecar state is produced when the page is backed up to host)."""
    sc.pool.set_from_flat_data_page(int(slot), side_page(hash_hex, sc))


def side_page_ok(sc: Sidecar, slot: int, hash_hex: str) -> bool:
    want = side_page(hash_hex, sc)
    got = sc.pool.get_data_page(int(slot), flat=True).reshape(-1)
    return got.numel() == want.numel() and torch.equal(got.to(want.dtype), want)


def leading(results: Sequence[Any]) -> int:
    """Leading run of truthy results."""
    n = 0
    while n < len(results) and results[n]:
        n += 1
    return n
