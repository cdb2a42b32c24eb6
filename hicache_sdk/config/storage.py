"""``HiCacheStorageConfig``: SGLang 0.5.23's storage configuration (its fields, defaults and
meaning), with a repr that never prints a secret. Re-exported by :mod:`hicache_sdk.spec`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["HiCacheStorageConfig"]


class HiCacheStorageConfig:
    """Parallel identity and settings handed to a backend constructor.

    Fields and their order match SGLang 0.5.23. Construct it **by keyword**: SGLang
    changed the positional order between releases. Unlike SGLang, every field has a
    default (single-rank, non-MLA), and unknown keyword arguments -- fields added by a
    newer SGLang -- are accepted and kept in :attr:`unknown_fields` instead of raising.

    Raises ``ValueError`` for invalid DCP settings, exactly where SGLang does.
    """

    __slots__ = (
        "tp_rank",
        "tp_size",
        "pp_rank",
        "pp_size",
        "attn_cp_rank",
        "attn_cp_size",
        "is_mla_model",
        "enable_storage_metrics",
        "is_page_first_layout",
        "model_name",
        "tp_lcm_size",
        "should_split_heads",
        "dp_rank",
        "extra_config",
        "dcp_size",
        "dcp_rank",
        "logical_page_size",
        "unknown_fields",
    )

    def __init__(
        self,
        tp_rank: int = 0,
        tp_size: int = 1,
        pp_rank: int = 0,
        pp_size: int = 1,
        attn_cp_rank: int = 0,
        attn_cp_size: int = 1,
        is_mla_model: bool = False,
        enable_storage_metrics: bool = False,
        is_page_first_layout: bool = False,
        model_name: Optional[str] = None,
        tp_lcm_size: Optional[int] = None,
        should_split_heads: bool = False,
        dp_rank: int = 0,
        extra_config: Optional[dict[str, Any]] = None,
        dcp_size: int = 1,
        dcp_rank: int = 0,
        logical_page_size: Optional[int] = None,
        **unknown_fields: Any,
    ) -> None:
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.pp_rank = pp_rank
        self.pp_size = pp_size
        self.attn_cp_rank = attn_cp_rank
        self.attn_cp_size = attn_cp_size
        self.is_mla_model = is_mla_model
        self.enable_storage_metrics = enable_storage_metrics
        self.is_page_first_layout = is_page_first_layout
        self.model_name = model_name
        self.tp_lcm_size = tp_lcm_size
        self.should_split_heads = should_split_heads
        self.dp_rank = dp_rank
        self.extra_config = extra_config
        self.dcp_size = dcp_size
        self.dcp_rank = dcp_rank
        self.logical_page_size = logical_page_size
        self.unknown_fields: dict[str, Any] = dict(unknown_fields)
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.dcp_size < 1 or not 0 <= self.dcp_rank < self.dcp_size:
            raise ValueError("Invalid DCP size or rank for HiCache storage.")
        if self.dcp_size == 1:
            return
        if not self.is_mla_model:
            raise ValueError("DCP storage shard identity currently requires MLA.")
        if (
            self.tp_size % self.dcp_size != 0
            or not 0 <= self.tp_rank < self.tp_size
            or self.tp_rank % self.dcp_size != self.dcp_rank
        ):
            raise ValueError("DCP storage requires contiguous DCP groups within TP.")
        if (
            self.logical_page_size is None
            or self.logical_page_size <= 0
            or self.logical_page_size % self.dcp_size != 0
        ):
            raise ValueError("DCP storage requires a DCP-aligned logical page size.")

    @property
    def is_storage_writer(self) -> bool:
        """Whether this rank writes KV: every rank for MHA; for rank-replicated (MLA)
        KV only the rank whose ``tp_rank == dcp_rank`` (TP rank 0 without DCP)."""
        return not self.is_mla_model or self.tp_rank == self.dcp_rank

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HiCacheStorageConfig):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, like SGLang's dataclass

    def __repr__(self) -> str:
        # extra_config may hold credentials: show its keys only.
        parts = []
        for n in self.__slots__:
            v = getattr(self, n)
            if n == "extra_config" and v is not None:
                # Any mapping (dict, MappingProxyType, ...) or anything else: never a value.
                if isinstance(v, Mapping):
                    shown = "{" + ", ".join(f"{k!r}: ..." for k in v) + "}"
                else:
                    shown = f"<{type(v).__name__}>"
                parts.append(f"{n}={shown}")
            elif n == "unknown_fields":
                if v:
                    parts.append(f"{n}={sorted(v)!r}")
            else:
                parts.append(f"{n}={v!r}")
        return f"HiCacheStorageConfig({', '.join(parts)})"
