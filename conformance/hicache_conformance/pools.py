"""Host pools for the suite and helpers to fill and read their pages as bytes.

Whose pools: with SGLang installed (and its pool modules importable), the KV and SWA pools
are SGLang's own ``MHATokenToKVPoolHost`` / ``MLATokenToKVPoolHost``
(:mod:`hicache_conformance.sglang_pools`), so a backend is judged on the objects SGLang
really hands it; otherwise they come from :mod:`hicache_sdk.hostpool` (duck-compatible:
``page_size``, ``get_data_page(index, flat=True)``, ``set_from_flat_data_page``,
``get_dummy_flat_data_page``), with the attributes SGLang's pools have and backends read
(``target_layer_num``, ``is_stride_page_aligned()``, ``stores_page_envelope``, ``dcp_size``,
``dcp_rank``, ``logical_size``, ``logical_page_size``). :func:`set_source` picks
(``"auto"``, ``"sglang"`` or ``"sdk"``); :func:`source_info` says what was used and why.

The suite addresses page ``i`` of a pool at slot ``i * page_size``;
``host_indices(pool, first, n)`` gives the int64 slot indices of pages
``first .. first + n - 1``, in the form SGLang's controller passes them.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from typing import Any

import torch

from . import sglang_pools
from .matrix import PoolCase

__all__ = [
    "SMALL",
    "POOL_SOURCES",
    "set_source",
    "set_geometry",
    "GEOMETRIES",
    "source_info",
    "with_sglang_attributes",
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
    #: the indexer pool's per-layer row (the SDK's ``IndexerHostPool``)
    index_dim: int = 16
    pages: int = 300


SMALL = Geometry()
#: Every pool's page a multiple of 4 KiB at every dtype and page size of the matrix (MHA
#: ``2 * 8 * 128 * 2`` layers, MLA ``(1020 + 4) * 2``, SWA ``2 * 8 * 128``, indexer
#: ``1024 * 2`` elements per token, each at least 2 bytes): what a backend that moves pages
#: with O_DIRECT needs, as real model pages are.
BLOCK = Geometry(head_num=8, head_dim=128, kv_lora_rank=1020, qk_rope_head_dim=4, index_dim=1024)
#: ``--geometry`` names.
GEOMETRIES: dict[str, Geometry] = {"small": SMALL, "block": BLOCK}
_geometry = {"current": SMALL}


def set_geometry(name: str) -> None:
    """Choose the model geometry of the pools the suite builds (see :data:`GEOMETRIES`).
    Raises ``ValueError`` naming ``name`` for anything else."""
    if name not in GEOMETRIES:
        raise ValueError(f"geometry must be one of {', '.join(GEOMETRIES)}, got {name!r}")
    _geometry["current"] = GEOMETRIES[name]


#: ``auto``: SGLang's pools when they can be built here, else the SDK's; ``sglang``: SGLang's
#: or an error naming why not; ``sdk``: always the SDK's.
POOL_SOURCES: tuple[str, ...] = ("auto", "sglang", "sdk")
_source = {"want": "auto"}


def set_source(source: str) -> None:
    """Choose whose host pools the suite builds (see :data:`POOL_SOURCES`). Raises
    ``ValueError`` naming ``source`` for anything else."""
    if source not in POOL_SOURCES:
        raise ValueError(f"source must be one of {', '.join(POOL_SOURCES)}, got {source!r}")
    _source["want"] = source


def _use_sglang() -> bool:
    want = _source["want"]
    if want == "sdk":
        return False
    ok, why = sglang_pools.availability()
    if want == "sglang" and not ok:
        raise RuntimeError(f"host pools: SGLang's were asked for, but {why}")
    return ok


def source_info() -> dict[str, Any]:
    """What the suite builds now: ``{"kv": "sglang" | "hicache_sdk", "swa": ..., "indexer":
    "hicache_sdk", "sglang_version": str | None, "why": str}``."""
    use = _use_sglang() if _source["want"] != "sglang" else sglang_pools.availability()[0]
    _ok, why = sglang_pools.availability()
    who = "sglang" if use else "hicache_sdk"
    if _source["want"] == "sdk":
        why = "the SDK's pools were asked for"
    return {
        "kv": who,
        "swa": who,
        "indexer": "hicache_sdk",
        "indexer_why": "SGLang's DSA indexer pool needs a DSA device pool (a GPU model)",
        "sglang_version": sglang_pools.sglang_version(),
        "why": why,
    }


def _hostpool_class(name: str, module: str) -> Any:
    try:
        cls = getattr(importlib.import_module("hicache_sdk.hostpool"), name)
    except (ImportError, AttributeError):
        cls = getattr(importlib.import_module(f"hicache_sdk.hostpool.{module}"), name)
    return with_sglang_attributes(cls)


_WITH_ATTRS: dict[type, type] = {}


def with_sglang_attributes(cls: type) -> type:
    """A subclass of an SDK host pool class with the attributes SGLang 0.5.23's
    ``HostKVCache`` has and storage backends read (``sglang/srt/mem_cache/pool_host/base.py``
    and ``mha.py`` / ``mla.py``): ``target_layer_num`` (layers without draft layers),
    ``is_stride_page_aligned(page_size_bytes=4096)`` (per-page strides of a page-first
    layout are multiples of the OS page, as NIXL's O_DIRECT path checks),
    ``stores_page_envelope = False``, ``dcp_size = 1``, ``dcp_rank = 0``,
    ``logical_size`` and ``logical_page_size``. Attributes the class already has are kept."""
    if cls in _WITH_ATTRS:
        return _WITH_ATTRS[cls]

    def _init(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        if not hasattr(self, "target_layer_num") and hasattr(self, "layer_num"):
            self.target_layer_num = int(self.layer_num)
        for name, value in (("dcp_size", 1), ("dcp_rank", 0), ("stores_page_envelope", False)):
            if not hasattr(self, name):
                setattr(self, name, value)

    def is_stride_page_aligned(self: Any, page_size_bytes: int = 4096) -> bool:
        if self.layout not in ("page_first", "page_first_direct"):
            return False
        page = self.get_dummy_flat_data_page()
        halves = 2 if hasattr(self, "head_num") else 1  # an MHA page holds a K and a V half
        stride = page.numel() * page.element_size() // halves
        base = getattr(self, "kv_buffer", None)
        aligned_base = not isinstance(base, torch.Tensor) or base.data_ptr() % page_size_bytes == 0
        return stride % page_size_bytes == 0 and aligned_base

    attrs: dict[str, Any] = {"__init__": _init, "__module__": __name__}
    if not hasattr(cls, "is_stride_page_aligned"):
        attrs["is_stride_page_aligned"] = is_stride_page_aligned
    if not hasattr(cls, "logical_size"):
        attrs["logical_size"] = property(lambda self: int(self.size) * int(getattr(self, "dcp_size", 1)))
    if not hasattr(cls, "logical_page_size"):
        attrs["logical_page_size"] = property(
            lambda self: int(self.page_size) * int(getattr(self, "dcp_size", 1))
        )
    sub = type(cls.__name__, (cls,), attrs)
    sub.__qualname__ = cls.__qualname__
    _WITH_ATTRS[cls] = sub
    return sub


def make_kv_pool(case: PoolCase, geometry: Geometry | None = None, *, layer_num: int | None = None) -> Any:
    """A KV host pool for ``case`` (MHA or MLA) with room for ``geometry.pages`` pages
    (default: the :func:`set_geometry` one): SGLang's own when :func:`set_source` allows
    and it can be built, else the SDK's."""
    geometry = geometry or _geometry["current"]
    dtype = getattr(torch, case.dtype)
    size = geometry.pages * case.page_size
    layers = geometry.layer_num if layer_num is None else layer_num
    if case.kind not in ("mha", "mla"):
        raise ValueError(f"case.kind must be 'mha' or 'mla', got {case.kind!r}")
    if _use_sglang():
        common = {"layout": case.layout, "dtype": dtype, "page_size": case.page_size, "pages": geometry.pages}
        if case.kind == "mha":
            return sglang_pools.mha_pool(
                **common, layers=layers, heads=geometry.head_num, head_dim=geometry.head_dim
            )
        return sglang_pools.mla_pool(
            **common, layers=layers, kv_lora_rank=geometry.kv_lora_rank, rope_dim=geometry.qk_rope_head_dim
        )
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


def make_sidecar_pool(name: str, kv_case: PoolCase, geometry: Geometry | None = None) -> Any:
    """A sidecar pool by pool name: ``"indexer"`` (ALL_PAGES, shares KV indices, same
    page size) or ``"swa"`` (TRAILING_PAGES, an MHA-like pool at the KV page size)."""
    geometry = geometry or _geometry["current"]
    dtype = getattr(torch, kv_case.dtype)
    size = geometry.pages * kv_case.page_size
    if name == "indexer":
        try:
            cls = _hostpool_class("IndexerHostPool", "indexer")
        except (ImportError, AttributeError):
            cls = None
        if cls is not None:
            return cls(size, kv_case.page_size, geometry.layer_num, geometry.index_dim, dtype)
        cls = _hostpool_class("MHAHostPool", "mha")
        return cls(size, kv_case.page_size, 1, 1, geometry.index_dim, dtype=dtype, layout="page_first")
    if name == "swa":
        if _use_sglang():
            return sglang_pools.swa_pool(
                dtype=dtype,
                page_size=kv_case.page_size,
                pages=geometry.pages,
                heads=geometry.head_num,
                head_dim=geometry.head_dim,
            )
        try:
            cls = _hostpool_class("SWAHostPool", "swa")
        except (ImportError, AttributeError):
            cls = _hostpool_class("MHAHostPool", "mha")
        return cls(
            size, kv_case.page_size, 1, geometry.head_num, geometry.head_dim, dtype=dtype, layout="page_first"
        )
    raise ValueError(f"name must be 'indexer' or 'swa', got {name!r}")


def _in_pool(pool: Any, first_page: int, n_pages: int = 1) -> int:
    """``pool.page_size``, once pages ``first_page .. first_page + n_pages - 1`` are known
    to lie inside the pool: an index past its end would reach memory beyond it on a
    zero-copy path (SGLang computes page addresses without a bound check), so a test that
    asks for one fails here, naming the suite, not the backend."""
    ps = int(pool.page_size)
    size = getattr(pool, "size", None)
    if first_page < 0 or (size is not None and (first_page + n_pages) * ps > int(size)):
        raise IndexError(
            f"the suite addressed pages {first_page}..{first_page + n_pages - 1} of a host pool of "
            f"{int(size) // ps if size is not None else '?'} pages (a defect of the suite, not of the backend)"
        )
    return ps


def host_indices(pool: Any, first_page: int, n_pages: int) -> torch.Tensor:
    """int64 slot indices of pages ``first_page .. first_page + n_pages - 1``."""
    ps = _in_pool(pool, first_page, n_pages)
    return torch.arange(first_page * ps, (first_page + n_pages) * ps, dtype=torch.int64)


def _as_bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes())


def page_bytes(pool: Any, page: int) -> bytes:
    """The bytes of page ``page`` of ``pool`` in its flat order."""
    return _as_bytes(pool.get_data_page(page * _in_pool(pool, page), flat=True))


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
    pool.set_from_flat_data_page(page * _in_pool(pool, page), flat_tensor(pool, data))
    return data


def zero_page(pool: Any, page: int) -> None:
    """Overwrite page ``page`` with a recognisable sentinel (0x5A bytes)."""
    nbytes = len(_as_bytes(pool.get_dummy_flat_data_page()))
    pool.set_from_flat_data_page(page * _in_pool(pool, page), flat_tensor(pool, b"\x5a" * nbytes))


def page_key(namespace: str, label: object) -> str:
    """A 64-hex-digit page hash (the shape of SGLang's page keys) for ``label``."""
    return hashlib.sha256(f"{namespace}/{label}".encode()).hexdigest()
