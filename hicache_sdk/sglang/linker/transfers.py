"""SGLang's transfers, as a :class:`~hicache_sdk.sglang.linker.TransportLinker` moves them:
each pool's page keys and device slots, checked, before anything is queued.

A transfer names a logical pool (``kv``, ``swa``, ``mamba``); its ``device_indices`` (else
its ``host_indices``) are the view's host indices, ``page_size`` slots a page, each page
starting on a page boundary inside the pool. For SGLang's pool group (DSA, DeepSeek V4), its
``resolve_transfers`` expands the ``kv`` and ``swa`` transfers into one per physical pool,
with the ``ALL_PAGES`` rule for the pools the KV pages address and the source's rule (the SWA
window's ``TRAILING_PAGES``) for the others. Bad arguments raise ``ValueError`` naming what
is wrong: a pool the linker does not serve, two transfers of one pool, keys that are not
``str``, a count of slots that is not a whole page per key, an unaligned or out-of-range
page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from ...spec import PoolName, PoolTransfer, pool_name_str
from .models import ModelViews

__all__ = ["PoolBatch", "lookup_request", "pool_batches", "pool_transfer"]

_KV = PoolName.KV.value


class PoolBatch:
    """One queued transfer of one pool: page keys and their device slots."""

    __slots__ = ("keys", "indices")

    def __init__(self, keys: list[str], indices: torch.Tensor) -> None:
        self.keys = keys
        self.indices = indices


def pool_batches(model: ModelViews, transfers: Sequence[Any], op: str) -> dict[str, PoolBatch] | None:
    """Each pool's keys and device slots, the KV pool first (``None`` when the KV transfer
    has no keys; for SGLang's pool group, when it resolves to none: see :func:`_resolve`);
    ``ValueError`` naming what is wrong (``op``: ``load`` or ``offload``)."""
    names = _names(model, transfers, op)
    if model.group is not None:
        load = op == "load"
        resolved = _resolve(model, transfers, names, allow_partial=True, allow_missing_kv=load)
        out = {}
        for t in resolved:
            name = pool_name_str(t.name)
            batch = _batch(model, t.keys, t.host_indices, name, op)
            if batch is not None:
                out[name] = batch
        return out or None
    if names.count(_KV) != 1:
        raise ValueError(f"{op}: expected one KV transfer, got {names.count(_KV)}")
    out = {}
    for name in sorted(names, key=lambda n: n != _KV):
        t = transfers[names.index(name)]
        indices = t.device_indices if t.device_indices is not None else t.host_indices
        batch = _batch(model, t.keys, indices, name, op)
        if batch is None and name == _KV:
            return None
        if batch is not None:
            out[name] = batch
    return out


def lookup_request(model: ModelViews, transfers: list[Any]) -> tuple[list[str], list[Any]] | None:
    """What ``lookup`` asks the backend's ``batch_exists_v2``: the KV keys and the other
    pools' transfers (for SGLang's pool group, every pool it resolves the transfers to);
    ``None`` when nothing can be restorable (no KV keys; a pool's transfer the group needs
    is missing). ``ValueError`` for a pool the linker does not serve."""
    names = [pool_name_str(getattr(t, "name", None)) for t in transfers]
    keys = list(transfers[names.index(_KV)].keys or []) if _KV in names else []
    if not keys:
        return None
    served = _logical_pools(model)
    unknown = [n for n in names if n not in served]
    if unknown:
        raise ValueError(f"lookup: TransportLinker serves the pools {served} here, got {unknown}")
    if model.group is not None:
        resolved = _resolve(model, transfers, names, allow_partial=False, allow_missing_kv=False)
        if not resolved:  # a pool's transfer is missing: nothing is restorable
            return None
        return keys, [t for t in resolved if pool_name_str(t.name) != _KV]
    return keys, [t for t, n in zip(transfers, names) if n != _KV]


def pool_transfer(batches: Sequence[PoolBatch], name: Any = PoolName.KV) -> PoolTransfer:
    """One backend transfer of pool ``name`` over ``batches``, in order."""
    keys = [k for b in batches for k in b.keys]
    indices = torch.cat([b.indices for b in batches]) if len(batches) > 1 else batches[0].indices
    return PoolTransfer(name=name, host_indices=indices, keys=keys)


def _names(model: ModelViews, transfers: Sequence[Any], op: str) -> list[str]:
    """The pool name of each transfer; ``ValueError`` for a pool this linker does not serve,
    or two transfers of one pool."""
    if not isinstance(transfers, (list, tuple)):
        raise ValueError(f"{op}: transfers must be a list of PoolTransfer, got {type(transfers).__name__}")
    names = [pool_name_str(getattr(t, "name", None)) for t in transfers]
    served = _logical_pools(model)
    others = [n for n in names if n not in served]
    if others:
        raise ValueError(f"{op}: TransportLinker serves the pools {served} here, got transfers for {others}")
    if len(set(names)) != len(names):
        raise ValueError(f"{op}: more than one transfer for a pool: {names}")
    return names


def _logical_pools(model: ModelViews) -> list[str]:
    """The pools SGLang's transfers name: the views' pools, or for SGLang's pool group the
    pools its entries take their keys and slots from (``kv``, ``swa``)."""
    if model.group is None:
        return sorted(model.views)
    return sorted({pool_name_str(s) for s in model.group.sources.values()})


def _resolve(
    model: ModelViews,
    transfers: Sequence[Any],
    names: list[str],
    *,
    allow_partial: bool,
    allow_missing_kv: bool,
) -> list[Any]:
    """SGLang's pool group's expansion of the transfers into one per physical pool
    (``DevicePoolGroup.resolve_transfers``: each entry takes its source's keys and slots,
    and the ``ALL_PAGES`` rule when the source is the KV pool, the source's rule otherwise);
    ``[]`` when it finds nothing to move."""
    group = model.group
    assert group is not None
    sources = {pool_name_str(s): s for s in group.sources.values()}
    named = [
        t if t.name is sources[n] else dataclasses.replace(t, name=sources[n])
        for t, n in zip(transfers, names)
    ]
    resolved: list[Any] = group.resolve_transfers(
        named, allow_partial=allow_partial, allow_missing_kv=allow_missing_kv
    )
    return resolved


def _batch(model: ModelViews, keys: Any, indices: Any, name: str, op: str) -> PoolBatch | None:
    keys = list(keys or [])
    if not keys:
        return None
    if not all(isinstance(k, str) for k in keys):
        raise ValueError(f"{op}: transfer keys must be str")
    if not isinstance(indices, torch.Tensor):
        raise ValueError(f"{op}: the {name} transfer has no device_indices tensor")
    indices = indices.detach().to(device="cpu", dtype=torch.int64).flatten()
    view = model.views[name]
    if indices.numel() != len(keys) * view.page_size:
        where = "" if name == _KV else f" of the {name} pool"
        raise ValueError(
            f"{op}: {indices.numel()} device indices for {len(keys)} pages{where} of {view.page_size} slots"
        )
    from ...hostpool.describe import page_starts

    arg = f"{op}: device_indices" if name == _KV else f"{op}: {name} device_indices"
    page_starts(indices, view.page_size, view.size, arg=arg)
    return PoolBatch(keys, indices)
