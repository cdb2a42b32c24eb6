"""Key schemes: SGLang 0.5.23's file and Mooncake naming, and our ``default`` scheme.

Use :func:`make_scheme`. ``storage_config`` is duck-typed (ours or SGLang's
``HiCacheStorageConfig``): fields are read with ``getattr`` and SGLang's defaults
(single rank, no PP/CP/DCP, not MLA).

* ``"sglang-file"``: exactly HiCacheFile's flat file names, one raw object per page
  (segments in ``pool.flat_order``, i.e. ``get_data_page(flat=True)`` bytes).
* ``"sglang-mooncake"``: exactly MooncakeStore's object keys (K/V objects for MHA, one
  ``__k`` object for MLA, the sidecar suffixes of ``_get_hybrid_page_component_keys``).
* ``"default"``: ours, one object per page with a header, under
  ``{namespace|_}/{model}/{pool}-{identity16}/{hash[:2]}/{hash}``.

A logical KV anchor pool (``has_buffer=False``) has no objects in any scheme (``[]``),
so its existence is vacuously true, as Mooncake's logical anchor treats it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

from .names import (
    check_hex_page_hash,
    check_plain_fragment,
    sanitize_component,
    sglang_model_name,
)
from .scheme_base import KeyScheme, ObjectSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..hostpool.layout import PoolLayout

__all__ = [
    "Topology",
    "DefaultKeyScheme",
    "SGLangFileKeyScheme",
    "SGLangMooncakeKeyScheme",
    "SCHEMES",
    "make_scheme",
]


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


def _all_hex64(hashes: Sequence[str]) -> bool:
    """Whether every entry is a ``str`` of exactly 64 lowercase hex chars, in a few
    C-level passes over the batch (no per-hash Python call). ``False`` means "check them
    one by one" (the slow path names the bad one)."""
    if not hashes or set(map(type, hashes)) != {str} or set(map(len, hashes)) != {64}:
        return False
    joined = "".join(hashes)
    try:
        # fromhex skips whitespace and accepts A-F: the round trip through hex() (always
        # lowercase, no whitespace) is equal only for pure lowercase hex input.
        return bytes.fromhex(joined).hex() == joined
    except ValueError:
        return False


def _all_plain(hashes: Sequence[str]) -> bool:
    """Bulk form of :func:`check_plain_fragment` over a batch: ``True`` only when every
    entry surely passes it (``False``: check one by one, which raises on the bad one)."""
    if not hashes or set(map(type, hashes)) != {str} or "" in hashes:
        return False
    joined = "/".join(hashes)  # a separator no valid hash holds, so nothing spans two
    return (
        joined.count("/") == len(hashes) - 1
        and "\\" not in joined
        and ".." not in joined
        and joined.isprintable()  # false for any control char (and some rare others)
    )


class DefaultKeyScheme(KeyScheme):
    """Ours: ``{ns}/{model}/{pool}-{identity16}/{hash[:2]}/{hash}`` (``ns`` is ``_`` when
    the namespace is empty). Components are sanitised; ``/`` is the only separator and
    fans out by the first two hex chars of the hash. ``clear_prefix()`` is ``"{ns}/"``:
    with an empty namespace that is ``"_/"``, the root of every un-namespaced
    default-scheme object (other namespaces are untouched).

    ``identity(pool)`` (sha256 digest) covers: scheme version, the raw model name, the
    pool name and ``pool.fingerprint()`` (dtype, layout, geometry), pp and attn-cp
    coordinates, tp coordinates for rank-sharded pools only, dcp coordinates (with
    logical page size and tp size, as SGLang) when ``dcp_size > 1``, and a digest of
    the secret ``namespace_salt``. Never the dp rank: DP replicas share pages.
    Page hashes must be 64 lowercase hex chars.
    """

    name: ClassVar[str] = "default"
    has_header: ClassVar[bool] = True
    VERSION: ClassVar[str] = "hicache-default-v1"

    def __init__(
        self,
        storage_config: Any,
        *,
        model_name: Optional[str] = None,
        namespace: str = "",
        namespace_salt: Optional[str] = None,
    ) -> None:
        # The secret salt is not kept: only its digest (below) is.
        super().__init__(storage_config, model_name=model_name, namespace=namespace)
        if not isinstance(namespace, str):
            raise ValueError(f"namespace must be a str, got {type(namespace).__name__}")
        if namespace_salt is not None and not isinstance(namespace_salt, str):
            raise ValueError("namespace_salt must be a str or None")
        self._topo = Topology.from_config(storage_config)
        self._model_raw = _model_of(storage_config, model_name)
        self._model_dir = sanitize_component(self._model_raw)
        self._ns = sanitize_component(namespace)
        self._salt_digest = (
            None
            if namespace_salt is None
            else hashlib.sha256(b"hicache-namespace-salt-v1\0" + namespace_salt.encode()).hexdigest()
        )
        self._cache: dict[PoolLayout, tuple[bytes, str]] = {}

    def __repr__(self) -> str:
        salted = self._salt_digest is not None
        return f"DefaultKeyScheme(namespace={self._ns!r}, model={self._model_raw!r}, salted={salted})"

    def _identity_doc(self, pool: PoolLayout) -> dict[str, Any]:
        t = self._topo
        doc: dict[str, Any] = {
            "scheme": self.VERSION,
            "model": self._model_raw,
            "pool": pool.name,
            "fingerprint": pool.fingerprint(),
            "pp": [t.pp_rank, t.pp_size],
            "attn_cp": [t.attn_cp_rank, t.attn_cp_size],
            "salt": self._salt_digest,
        }
        if not pool.rank_replicated:
            doc["tp"] = [t.tp_rank, t.tp_size]
        if t.dcp_size > 1:
            doc["dcp"] = [t.dcp_rank, t.dcp_size, t.logical_page_size, t.tp_size]
        return doc

    def _ident(self, pool: PoolLayout) -> tuple[bytes, str]:
        hit = self._cache.get(pool)
        if hit is None:
            raw = json.dumps(self._identity_doc(pool), sort_keys=True, separators=(",", ":")).encode()
            digest = hashlib.sha256(raw).digest()
            hit = (
                digest,
                f"{self._ns}/{self._model_dir}/{sanitize_component(pool.name)}-{digest.hex()[:16]}/",
            )
            self._cache[pool] = hit
        return hit

    def identity(self, pool: PoolLayout) -> bytes:
        return self._ident(pool)[0]

    def page_objects(self, page_hash: str, pool: PoolLayout) -> list[ObjectSpec]:
        check_hex_page_hash(page_hash)
        if not pool.has_buffer:
            return []
        prefix = self._ident(pool)[1]
        return [ObjectSpec(f"{prefix}{page_hash[:2]}/{page_hash}", tuple(pool.flat_order))]

    def page_names(self, page_hashes: Sequence[str], pool: PoolLayout) -> list[str]:
        """Fast path of :meth:`page_objects` for a batch: the single object name of each
        page (its segments are always ``pool.flat_order``), identical to
        ``page_objects(h, pool)[0].name``. ``[]`` for a logical pool (no objects);
        ``ValueError`` names the first bad hash."""
        if not _all_hex64(page_hashes):
            for h in page_hashes:
                check_hex_page_hash(h)
        if not pool.has_buffer:
            return []
        prefix = self._ident(pool)[1]
        return [f"{prefix}{h[:2]}/{h}" for h in page_hashes]

    def clear_prefix(self) -> str:
        return f"{self._ns}/"


class _SGLangNamedScheme(KeyScheme):
    """Base of the schemes that reproduce SGLang's exact object names: those names carry
    no namespace or salt (configuring one is a ``ValueError``), and they are built once,
    at construction, from the parallel topology and SGLang's form of the model name
    (``self._topo``, ``self._model``) by :meth:`_build_names`."""

    def __init__(
        self,
        storage_config: Any,
        *,
        model_name: Optional[str] = None,
        namespace: str = "",
        namespace_salt: Optional[str] = None,
    ) -> None:
        _reject_namespace(self.name, namespace, namespace_salt)
        super().__init__(storage_config, model_name=model_name)
        self._topo = Topology.from_config(storage_config)
        self._model = sglang_model_name(_model_of(storage_config, model_name))
        self._build_names()

    def _build_names(self) -> None:
        raise NotImplementedError


class SGLangFileKeyScheme(_SGLangNamedScheme):
    """HiCacheFile 0.5.23: ``<hash><config_suffix>.bin`` for KV and
    ``<hash>.<pool><suffix>.bin`` for other pools (``tp_config_suffix`` for ``mamba``,
    ``config_suffix`` otherwise). ``tp_config_suffix = _{model}_{tp_rank}_{tp_size}{shard}``;
    ``config_suffix`` drops the tp part when ``is_mla_model`` (SGLang decides by the
    config flag, not the pool); ``shard`` = ``_{pp_size}_{pp_rank}`` if pp>1, then
    ``_cp{rank}_{size}`` if attn-cp>1; DCP>1 appends ``_tp{tp}_dcp{r}_{n}_page{lp}`` to
    both. Page hashes are any plain-safe fragment. ``clear_prefix()`` is ``""`` (SGLang
    clears the whole directory)."""

    name: ClassVar[str] = "sglang-file"

    def _build_names(self) -> None:
        t, model = self._topo, self._model
        shard = f"_{t.pp_size}_{t.pp_rank}" if t.pp_size > 1 else ""
        if t.attn_cp_size > 1:
            shard += f"_cp{t.attn_cp_rank}_{t.attn_cp_size}"
        self.tp_config_suffix = f"_{model}_{t.tp_rank}_{t.tp_size}{shard}"
        self.config_suffix = f"_{model}{shard}" if t.is_mla_model else self.tp_config_suffix
        if t.dcp_size > 1:
            dcp = f"_tp{t.tp_size}_dcp{t.dcp_rank}_{t.dcp_size}_page{t.logical_page_size}"
            self.config_suffix += dcp
            self.tp_config_suffix += dcp

    def page_objects(self, page_hash: str, pool: PoolLayout) -> list[ObjectSpec]:
        check_plain_fragment(page_hash, "page_hash")
        if not pool.has_buffer:
            return []
        pool_name = sanitize_component(pool.name)
        if pool_name == "kv":
            stem = f"{page_hash}{self.config_suffix}"
        else:
            suffix = self.tp_config_suffix if pool_name == "mamba" else self.config_suffix
            stem = f"{page_hash}.{pool_name}{suffix}"
        return [ObjectSpec(f"{stem}.bin", tuple(pool.flat_order))]

    def page_names(self, page_hashes: Sequence[str], pool: PoolLayout) -> list[str]:
        """Fast path of :meth:`page_objects` for a batch (one object per page, segments
        in ``pool.flat_order``): the names, identical to ``page_objects(h, pool)[0].name``.
        ``[]`` for a logical pool; ``ValueError`` names the first bad hash."""
        if not _all_plain(page_hashes):
            for h in page_hashes:
                check_plain_fragment(h, "page_hash")
        if not pool.has_buffer:
            return []
        pool_name = sanitize_component(pool.name)
        if pool_name == "kv":
            suffix = f"{self.config_suffix}.bin"
        else:
            cfg = self.tp_config_suffix if pool_name == "mamba" else self.config_suffix
            suffix = f".{pool_name}{cfg}.bin"
        return [f"{h}{suffix}" for h in page_hashes]

    def clear_prefix(self) -> str:
        return ""


# Page-packed single-object pools named ``_{mla}_{pool}`` (DSA indexer, DSV4 side pools).
_DSV4 = "c1 c1_indexer c1_indexer_scale c2 c2_indexer c2_indexer_scale c4 c4_rope c4_indexer "
_DSV4 += "c4_indexer_scale c128 c128_rope c4_state c4_indexer_state c128_state"
_MLA_PACKED_POOLS = frozenset({"indexer", "draft_indexer"} | {f"deepseek_v4_{c}" for c in _DSV4.split()})


class SGLangMooncakeKeyScheme(_SGLangNamedScheme):
    """MooncakeStore 0.5.23 object keys: ``[prefix_]<hash><suffix>`` where
    ``prefix = "_".join([extra_backend_tag?, model?, tp{tp}_dcp{n}_page{lp}_pp{pp}_cp{cp}?])``
    (the DCP part only when dcp>1). ``mha = "{tp_rank}"`` (``"{tp_rank}_{pp_rank}"`` when
    pp>1); ``mla = ""`` (``"{pp_rank}"`` when pp>1; ``"dcp{r}_cp{c}[_{pp}]"`` when dcp>1).

    KV: MHA ``_{mha}_k`` (segment 0) and ``_{mha}_v`` (segment 1), page-first layouts only
    (``layer_first`` raises ``ValueError``, as Mooncake does); with head split
    (``should_split_heads``) one K/V pair per virtual rank, which needs a pool exposing
    ``2 * split`` segments ``(k0, v0, k1, v1, ...)``. MLA: one ``_{mla}_k`` object of all
    segments (note ``__k`` when pp=1, dcp=1). Sidecars as ``_get_hybrid_page_component_keys``:
    mamba ``_{mha}_temporal`` (absent when the pool has no or a 0-byte temporal segment)
    then ``_{mha}_conv_{i}``; swa/draft/
    draft_swa K/V or packed by pool kind; indexer/draft_indexer/deepseek_v4_* packed as
    ``_{mla}_{pool}``. Any other pool raises ``ValueError``. Unlike SGLang's v2 path (which
    names an MHA ``kv`` transfer ``_{mla}_k``), ``kv`` always uses the v1 names above.
    ``clear_prefix()`` is ``"{prefix}_"`` (``""`` without a prefix); SGLang's own
    ``clear()`` removes the whole cluster.
    """

    name: ClassVar[str] = "sglang-mooncake"

    def _build_names(self) -> None:
        t, model = self._topo, self._model
        parts: list[str] = []
        extra = getattr(self.storage_config, "extra_config", None) or {}
        tag = extra.get("extra_backend_tag") if isinstance(extra, dict) else None
        if tag is not None:
            parts.append(check_plain_fragment(str(tag), "extra_backend_tag"))
        if model:
            parts.append(model)
        if t.dcp_size > 1:
            parts.append(
                f"tp{t.tp_size}_dcp{t.dcp_size}_page{t.logical_page_size}_pp{t.pp_size}_cp{t.attn_cp_size}"
            )
        self.config_prefix: Optional[str] = "_".join(parts) if parts else None
        pp = f"_{t.pp_rank}" if t.pp_size > 1 else ""
        self.mha_suffix = f"{t.tp_rank}{pp}"
        self.mla_suffix = f"{t.pp_rank}" if t.pp_size > 1 else ""
        if t.dcp_size > 1:
            self.mla_suffix = f"dcp{t.dcp_rank}_cp{t.attn_cp_rank}{pp}"
        self.split_factor = 0
        self.split_suffixes: list[str] = []
        if t.should_split_heads and not t.is_mla_model:
            assert t.tp_lcm_size is not None
            self.split_factor = t.tp_lcm_size // t.tp_size
            base = t.tp_rank * self.split_factor
            self.split_suffixes = [f"{base + i}{pp}" for i in range(self.split_factor)]

    def _kv_mha(self, tagged: str, pool: PoolLayout, tag: str = "") -> list[ObjectSpec]:
        if pool.layout == "layer_first":
            raise ValueError(
                "Mooncake layer_first multi-buffer is only supported for MLA host KV pool. "
                "Use page_first/page_first_direct for MHA."
            )
        n = len(pool.segment_sizes)
        if self.split_factor and not tag:
            if n != 2 * self.split_factor:
                raise ValueError(
                    f"head split by {self.split_factor} needs a pool with {2 * self.split_factor} "
                    f"per-head-group segments (k0, v0, k1, v1, ...); pool {pool.name!r} has {n}"
                )
            return [
                ObjectSpec(f"{tagged}_{s}_{kv}", (2 * i + j,))
                for i, s in enumerate(self.split_suffixes)
                for j, kv in enumerate("kv")
            ]
        if n != 2:
            raise ValueError(f"MHA pool {pool.name!r} must have 2 segments (k, v) per page, has {n}")
        return [
            ObjectSpec(f"{tagged}_{self._mha(pool)}{tag}_k", (0,)),
            ObjectSpec(f"{tagged}_{self._mha(pool)}{tag}_v", (1,)),
        ]

    def _mha(self, pool: PoolLayout) -> str:
        if self.split_factor:
            raise ValueError(f"pool {pool.name!r}: rank-sharded sidecars are not supported with head split")
        return self.mha_suffix

    def page_objects(self, page_hash: str, pool: PoolLayout) -> list[ObjectSpec]:
        check_plain_fragment(page_hash, "page_hash")
        if not pool.has_buffer:
            return []
        tagged = f"{self.config_prefix}_{page_hash}" if self.config_prefix else page_hash
        name = sanitize_component(pool.name)
        packed = tuple(range(len(pool.segment_sizes)))
        mla = self.mla_suffix
        is_mla = self._topo.is_mla_model
        if name == "kv":
            return [ObjectSpec(f"{tagged}_{mla}_k", packed)] if is_mla else self._kv_mha(tagged, pool)
        if name == "mamba":
            return self._mamba(tagged, pool)
        if name in _MLA_PACKED_POOLS:
            return [ObjectSpec(f"{tagged}_{mla}_{name}", packed)]
        replicated = pool.kind == "mla" or pool.rank_replicated
        if name == "draft":
            if pool.kind == "mla":
                return [ObjectSpec(f"{tagged}_{mla}_draft_k", packed)]
            return self._kv_mha(tagged, pool, "_draft")
        if name == "draft_swa":
            if replicated:
                return [ObjectSpec(f"{tagged}_{mla}_draft_swa", packed)]
            return self._kv_mha(tagged, pool, "_draft_swa")
        if name == "swa":
            if is_mla:
                return [ObjectSpec(f"{tagged}_{mla}_swa", packed)]
            if len(pool.segment_sizes) == 2:
                return self._kv_mha(tagged, pool, "_swa")
        raise ValueError(f"Unsupported Mooncake hybrid pool name: {pool.name!r} (kind {pool.kind!r})")

    def page_columns(
        self, page_hashes: Sequence[str], pool: PoolLayout
    ) -> list[tuple[list[str], tuple[int, ...]]] | None:
        """Fast path of :meth:`page_objects` (see the base class): every name is
        ``[prefix_]<hash><suffix>`` with one suffix per object, so the suffixes come from
        one page's objects and the names from one f-string per object."""
        if not _all_plain(page_hashes):
            for h in page_hashes:
                check_plain_fragment(h, "page_hash")
        if not page_hashes:
            return []
        first = page_hashes[0]
        tagged = f"{self.config_prefix}_{first}" if self.config_prefix else first
        pre = f"{self.config_prefix}_" if self.config_prefix else ""
        out = []
        for spec in self.page_objects(first, pool):
            suffix = spec.name[len(tagged) :]
            out.append(([f"{pre}{h}{suffix}" for h in page_hashes], spec.segments))
        return out

    def _mamba(self, tagged: str, pool: PoolLayout) -> list[ObjectSpec]:
        mha = self._mha(pool)
        geometry = dict(pool.geometry)
        sizes = pool.segment_sizes
        # Conv count: the ``conv_{i}_ndim`` geometry entries that hostpool.describe
        # records, else a ``conv_num`` entry, else "segment 0 is the temporal state".
        described = sum(1 for k in geometry if k.startswith("conv_") and k.endswith("_ndim"))
        conv_num = described or geometry.get("conv_num", len(sizes) - 1)
        first_conv = len(sizes) - conv_num
        if first_conv not in (0, 1):
            raise ValueError(f"mamba pool {pool.name!r}: {len(sizes)} segments for {conv_num} conv states")
        out = [ObjectSpec(f"{tagged}_{mha}_temporal", (0,))] if first_conv == 1 and sizes[0] > 0 else []
        out += [ObjectSpec(f"{tagged}_{mha}_conv_{i}", (first_conv + i,)) for i in range(conv_num)]
        return out

    def clear_prefix(self) -> str:
        return f"{self.config_prefix}_" if self.config_prefix else ""


SCHEMES: dict[str, Callable[..., KeyScheme]] = {
    DefaultKeyScheme.name: DefaultKeyScheme,
    SGLangFileKeyScheme.name: SGLangFileKeyScheme,
    SGLangMooncakeKeyScheme.name: SGLangMooncakeKeyScheme,
}


def make_scheme(
    name: str,
    storage_config: Any,
    *,
    model_name: Optional[str] = None,
    namespace: str = "",
    namespace_salt: Optional[str] = None,
) -> KeyScheme:
    """Build the key scheme called ``name`` for one rank.

    ``model_name`` overrides ``storage_config.model_name``. ``namespace`` and the secret
    ``namespace_salt`` are ``default``-scheme only (``ValueError`` elsewhere: SGLang
    names cannot carry them). Raises ``ValueError`` listing the valid names for an
    unknown scheme, and naming the field for an invalid config.
    """
    factory = SCHEMES.get(name) if isinstance(name, str) else None
    if factory is None:
        raise ValueError(f"unknown key scheme {name!r}; valid names: {', '.join(sorted(SCHEMES))}")
    return factory(storage_config, model_name=model_name, namespace=namespace, namespace_salt=namespace_salt)
