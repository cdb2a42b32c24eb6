"""The L3 object layout a KV-aware router reads to rebuild object names from page hashes.

SGLang 0.5.23 serves ``MooncakeStore.describe_l3_object_layout(sidecar_pool_specs=...,
swa_trailing_pages=..., page_size=...)`` at ``/get_hicache_l3_cache_layout``.
:func:`mooncake_layout` gives the same answer, after a JSON round trip, for the objects
the ``sglang-mooncake`` key scheme names (which are SGLang's), so a backend of ours under
that scheme can offer the same method:

``{"enabled": bool, "backend": "mooncake", "page_size": int, "hicache_object_layout":
{"pools": [{"pool": name, "suffixes": [...], "hit_policy": "all_pages" |
"trailing_pages", "trailing_pages"?: int}, ...], "key_prefix": str | None,
"is_mla_backend": bool, "pp_rank": int, "pp_size": int}, "reason"?: str}``.

Object ``i`` of page ``h`` of a pool is ``f"{key_prefix}_{h}{suffixes[i]}"``, or
``f"{h}{suffixes[i]}"`` when ``key_prefix`` is ``None``. As in SGLang the layout is
disabled (``enabled: false`` with a ``reason``) when one scheduler cannot name every
object: an MHA model (keys carry the tp rank), a rank-sharded sidecar pool (Mamba, an MHA
draft or draft-SWA pool), or a trailing-pages pool without a positive window.

:func:`file_layout` describes the ``sglang-file`` scheme's names in the same shape (our
schema; SGLang has no file layout): ``"backend": "file"``, ``key_prefix`` always
``None``, and each pool's ``suffixes`` end with ``.bin``; it adds ``tp_rank`` and
``tp_size`` (MHA names carry both, so a router can enumerate the ranks) and is never
disabled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..hostpool.layout import PoolLayout
from .scheme_base import KeyScheme

__all__ = ["disabled_layout", "file_layout", "mooncake_layout"]

#: A page hash used only to read the name suffixes off the scheme.
_PROBE_HASH = "0" * 64
_MHA_REASON = "External L3 lookup requires rank-replicated/MLA pools"
_AUX_REASON = "Auxiliary L3 pools are not rank-replicated/MLA"


def _name(value: Any) -> str:
    """A pool name or policy, ours or SGLang's (``str`` enums), as its string value."""
    return str(getattr(value, "value", value))


def disabled_layout(
    reason: str, *, backend: str | None = None, page_size: int | None = None
) -> dict[str, Any]:
    """SGLang's ``disabled_l3_layout``: no pools, and why."""
    return {
        "enabled": False,
        "backend": backend,
        "page_size": page_size,
        "hicache_object_layout": {"pools": []},
        "reason": reason,
    }


def suffixes(scheme: KeyScheme, pool: PoolLayout) -> list[str]:
    """What follows ``[key_prefix_]<hash>`` in each object name of a page of ``pool``."""
    prefix = getattr(scheme, "config_prefix", None)
    head = f"{prefix}_{_PROBE_HASH}" if prefix else _PROBE_HASH
    out = []
    for spec in scheme.page_objects(_PROBE_HASH, pool):
        if not spec.name.startswith(head):  # pragma: no cover - every SGLang name does
            raise ValueError(f"object name {spec.name!r} does not start with prefix and hash")
        out.append(spec.name[len(head) :])
    return out


def _sidecar_entries(
    scheme: KeyScheme,
    pools: Sequence[PoolLayout],
    sidecar_pool_specs: Iterable[Any],
    swa_trailing_pages: int | None,
    page_size: int,
    backend: str,
) -> list[dict[str, Any]] | dict[str, Any]:
    """The entries of the sidecar pools, or a disabled layout (a trailing-pages pool
    without a positive window), as SGLang's loop over ``registered_pools``."""
    specs = {_name(s.pool_name): s for s in sidecar_pool_specs}
    windows: dict[str, int | None] = {"mamba": 1, "swa": swa_trailing_pages}
    out: list[dict[str, Any]] = []
    for pool in pools:
        spec = specs.get(pool.name)
        if spec is not None:
            policy = _name(spec.hit_policy)
        else:
            policy = "trailing_pages" if pool.name in windows else "all_pages"
        entry: dict[str, Any] = {"pool": pool.name, "suffixes": suffixes(scheme, pool), "hit_policy": policy}
        if policy == "trailing_pages":
            source = _name(spec.indices_from_pool) if spec is not None else pool.name
            window = windows.get(source)
            if window is None or window <= 0:
                return disabled_layout(
                    f"Unknown or non-positive trailing-page window for pool {pool.name}",
                    backend=backend,
                    page_size=page_size,
                )
            entry["trailing_pages"] = window
        out.append(entry)
    return out


def mooncake_layout(
    scheme: KeyScheme,
    kv: PoolLayout,
    pools: Sequence[PoolLayout],
    *,
    sidecar_pool_specs: Iterable[Any],
    swa_trailing_pages: int | None,
    page_size: int,
) -> dict[str, Any]:
    """SGLang 0.5.23's ``MooncakeStore.describe_l3_object_layout`` for a ``sglang-mooncake``
    scheme: ``kv`` is the registered anchor pool, ``pools`` the other registered pools in
    registration order (see the module docs for the answer's shape). ``ValueError`` for a
    pool the scheme cannot name."""
    sc = scheme.storage_config
    pool_list: list[dict[str, Any]] = []
    layout: dict[str, Any] = {
        "enabled": True,
        "backend": "mooncake",
        "page_size": page_size,
        "hicache_object_layout": {
            "pools": pool_list,
            "key_prefix": getattr(scheme, "config_prefix", None),
            "is_mla_backend": bool(getattr(sc, "is_mla_model", False)),
            "pp_rank": int(getattr(sc, "pp_rank", 0) or 0),
            "pp_size": int(getattr(sc, "pp_size", 1) or 1),
        },
    }
    if not layout["hicache_object_layout"]["is_mla_backend"]:
        layout.update(enabled=False, reason=_MHA_REASON)
        return layout
    if kv.has_buffer:
        pool_list.append({"pool": "kv", "suffixes": suffixes(scheme, kv), "hit_policy": "all_pages"})
    entries = _sidecar_entries(scheme, pools, sidecar_pool_specs, swa_trailing_pages, page_size, "mooncake")
    if isinstance(entries, dict):
        return entries
    pool_list.extend(entries)
    by_name = {p.name: p for p in pools}
    draft, draft_swa = by_name.get("draft"), by_name.get("draft_swa")
    if (
        "mamba" in by_name
        or (draft is not None and draft.kind != "mla")
        or (draft_swa is not None and draft_swa.kind == "mha")
    ):
        layout.update(enabled=False, reason=_AUX_REASON)
    elif not pool_list:
        layout.update(enabled=False, reason="No physical L3 pools are registered")
    return layout


def file_layout(
    scheme: KeyScheme,
    kv: PoolLayout,
    pools: Sequence[PoolLayout],
    *,
    sidecar_pool_specs: Iterable[Any] = (),
    swa_trailing_pages: int | None = None,
    page_size: int,
) -> dict[str, Any]:
    """The ``sglang-file`` scheme's object names in the shape of :func:`mooncake_layout`
    (our schema, see the module docs): file ``f"{h}{suffix}"`` in the backend's directory."""
    sc = scheme.storage_config
    pool_list: list[dict[str, Any]] = []
    if kv.has_buffer:
        pool_list.append({"pool": "kv", "suffixes": suffixes(scheme, kv), "hit_policy": "all_pages"})
    entries = _sidecar_entries(scheme, pools, sidecar_pool_specs, swa_trailing_pages, page_size, "file")
    if isinstance(entries, dict):
        return entries
    pool_list.extend(entries)
    return {
        "enabled": True,
        "backend": "file",
        "page_size": page_size,
        "hicache_object_layout": {
            "pools": pool_list,
            "key_prefix": None,
            "is_mla_backend": bool(getattr(sc, "is_mla_model", False)),
            "tp_rank": int(getattr(sc, "tp_rank", 0) or 0),
            "tp_size": int(getattr(sc, "tp_size", 1) or 1),
            "pp_rank": int(getattr(sc, "pp_rank", 0) or 0),
            "pp_size": int(getattr(sc, "pp_size", 1) or 1),
        },
    }
