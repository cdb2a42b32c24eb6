"""The parallel topology of one rank and the storage-config helpers every scheme uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["Topology"]


def _int_field(cfg: Any, name: str, default: int, minimum: int) -> int:
    value = getattr(cfg, name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"storage_config.{name} must be an int >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class Topology:
    """The parallel coordinates of one rank, read from a duck-typed storage config."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    dcp_rank: int = 0
    dcp_size: int = 1
    logical_page_size: Optional[int] = None
    is_mla_model: bool = False
    should_split_heads: bool = False
    tp_lcm_size: Optional[int] = None

    @classmethod
    def from_config(cls, cfg: Any) -> Topology:
        """Read and validate; ``ValueError`` names the bad field."""
        vals = {
            n: _int_field(cfg, n, d, m)
            for n, d, m in (
                ("tp_rank", 0, 0),
                ("tp_size", 1, 1),
                ("pp_rank", 0, 0),
                ("pp_size", 1, 1),
                ("attn_cp_rank", 0, 0),
                ("attn_cp_size", 1, 1),
                ("dcp_rank", 0, 0),
                ("dcp_size", 1, 1),
            )
        }
        for rank, size in (("tp_rank", "tp_size"), ("pp_rank", "pp_size"), ("attn_cp_rank", "attn_cp_size")):
            if vals[rank] >= vals[size]:
                raise ValueError(f"storage_config.{rank}={vals[rank]} must be < {size}={vals[size]}")
        if vals["dcp_rank"] >= vals["dcp_size"]:
            raise ValueError("storage_config.dcp_rank must be < dcp_size")
        lps = getattr(cfg, "logical_page_size", None)
        if vals["dcp_size"] > 1 and (
            isinstance(lps, bool) or not isinstance(lps, int) or lps <= 0 or lps % vals["dcp_size"]
        ):
            raise ValueError(
                f"storage_config.logical_page_size must be a positive multiple of dcp_size, got {lps!r}"
            )
        lcm = getattr(cfg, "tp_lcm_size", None)
        split = bool(getattr(cfg, "should_split_heads", False))
        if split and (not isinstance(lcm, int) or lcm <= 0 or lcm % vals["tp_size"]):
            raise ValueError(
                f"storage_config.tp_lcm_size must be a positive multiple of tp_size, got {lcm!r}"
            )
        return cls(
            **vals,
            logical_page_size=lps if vals["dcp_size"] > 1 else None,
            is_mla_model=bool(getattr(cfg, "is_mla_model", False)),
            should_split_heads=split,
            tp_lcm_size=lcm,
        )


def _model_of(storage_config: Any, model_name: Optional[str]) -> str:
    name = model_name if model_name is not None else getattr(storage_config, "model_name", None)
    if name is not None and not isinstance(name, str):
        raise ValueError(f"model_name must be a str or None, got {type(name).__name__}")
    return name or ""


def _reject_namespace(scheme: str, namespace: str, namespace_salt: Optional[str]) -> None:
    if namespace or namespace_salt:
        raise ValueError(
            f"namespace/namespace_salt are only supported by the 'default' key scheme; "
            f"{scheme!r} names objects exactly as SGLang does"
        )
