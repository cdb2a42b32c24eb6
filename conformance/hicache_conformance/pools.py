"""Host pools for the suite and helpers to fill and read their pages as bytes.

Pools come from :mod:`hicache_sdk.hostpool` (duck-compatible with SGLang's host pools:
``page_size``, ``get_data_page(index, flat=True)``, ``set_from_flat_data_page``,
``get_dummy_flat_data_page``). The suite addresses page ``i`` of a pool at slot
``i * page_size``; ``host_indices(pool, first, n)`` gives the int64 slot indices of pages
``first .. first + n - 1``, in the form SGLang's controller passes them.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from typing import Any

import torch

from .matrix import PoolCase

__all__ = [
    "SMALL",
    "make_kv_pool",
    "make_sidecar_pool",
    "host_indices",
    "page_bytes",
    "fill_page",
    "pattern",
    "page_key",
]


@dataclass(frozen=True)
class Geometry:
    """Small model geometry: big enough to have several segments, small enough that a
    130-page batch is a few hundred KiB."""

    layer_num: int = 2
    head_num: int = 2
    head_dim: int = 8
    kv_lora_rank: int = 12
    qk_rope_head_dim: int = 4
    pages: int = 300


SMALL = Geometry()


def _hostpool_class(name: str, module: str) -> Any:
    try:
        return getattr(importlib.import_module("hicache_sdk.hostpool"), name)
    except (ImportError, AttributeError):
        return getattr(importlib.import_module(f"hicache_sdk.hostpool.{module}"), name)


def make_kv_pool(case: PoolCase, geometry: Geometry = SMALL, *, layer_num: int | None = None) -> Any:
    """A KV host pool for ``case`` (MHA or MLA) with room for ``geometry.pages`` pages."""
    dtype = getattr(torch, case.dtype)
    size = geometry.pages * case.page_size
    layers = geometry.layer_num if layer_num is None else layer_num
    if case.kind == "mha":
        cls = _hostpool_class("MHAHostPool", "mha")
        return cls(
            size,
            case.page_size,
            layers,
            geometry.head_num,
            geometry.head_dim,
            dtype=dtype,
            layout=case.layout,
        )
    if case.kind == "mla":
        cls = _hostpool_class("MLAHostPool", "mla")
        return cls(
            size,
            case.page_size,
            layers,
            geometry.kv_lora_rank,
            geometry.qk_rope_head_dim,
            dtype=dtype,
            layout=case.layout,
        )
    raise ValueError(f"case.kind must be 'mha' or 'mla', got {case.kind!r}")


def make_sidecar_pool(name: str, kv_case: PoolCase, geometry: Geometry = SMALL) -> Any:
    """A sidecar pool by pool name: ``"indexer"`` (ALL_PAGES, shares KV indices, same
    page size) or ``"swa"`` (TRAILING_PAGES, an MHA-like pool at the KV page size)."""
    dtype = getattr(torch, kv_case.dtype)
    size = geometry.pages * kv_case.page_size
    if name == "indexer":
        try:
            cls = _hostpool_class("IndexerHostPool", "indexer")
        except (ImportError, AttributeError):
            cls = None
        if cls is not None:
            return cls(size, kv_case.page_size, geometry.layer_num, 16, dtype)
        cls = _hostpool_class("MHAHostPool", "mha")
        return cls(size, kv_case.page_size, 1, 1, 16, dtype=dtype, layout="page_first")
    if name == "swa":
        try:
            cls = _hostpool_class("SWAHostPool", "swa")
        except (ImportError, AttributeError):
            cls = _hostpool_class("MHAHostPool", "mha")
        return cls(
            size, kv_case.page_size, 1, geometry.head_num, geometry.head_dim, dtype=dtype, layout="page_first"
        )
    raise ValueError(f"name must be 'indexer' or 'swa', got {name!r}")


def host_indices(pool: Any, first_page: int, n_pages: int) -> torch.Tensor:
    """int64 slot indices of pages ``first_page .. first_page + n_pages - 1``."""
    ps = int(pool.page_size)
    return torch.arange(first_page * ps, (first_page + n_pages) * ps, dtype=torch.int64)


def _as_bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes())


def page_bytes(pool: Any, page: int) -> bytes:
    """The bytes of page ``page`` of ``pool`` in its flat order."""
    return _as_bytes(pool.get_data_page(page * int(pool.page_size), flat=True))


def pattern(seed: str, nbytes: int) -> bytes:
    """``nbytes`` deterministic pseudo-random bytes derived from ``seed``."""
    out = bytearray()
    counter = 0
    while len(out) < nbytes:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:nbytes])


def flat_tensor(pool: Any, data: bytes) -> torch.Tensor:
    """A flat tensor of the pool's dtype holding ``data`` (one page)."""
    dummy = pool.get_dummy_flat_data_page()
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return raw.view(dummy.dtype).clone()


def fill_page(pool: Any, page: int, seed: str) -> bytes:
    """Fill page ``page`` of ``pool`` with bytes derived from ``seed``; return them."""
    nbytes = len(_as_bytes(pool.get_dummy_flat_data_page()))
    data = pattern(seed, nbytes)
    pool.set_from_flat_data_page(page * int(pool.page_size), flat_tensor(pool, data))
    return data


def zero_page(pool: Any, page: int) -> None:
    """Overwrite page ``page`` with a recognisable sentinel (0x5A bytes)."""
    nbytes = len(_as_bytes(pool.get_dummy_flat_data_page()))
    pool.set_from_flat_data_page(page * int(pool.page_size), flat_tensor(pool, b"\x5a" * nbytes))


def page_key(namespace: str, label: object) -> str:
    """A 64-hex-digit page hash (the shape of SGLang's page keys) for ``label``."""
    return hashlib.sha256(f"{namespace}/{label}".encode()).hexdigest()
