"""The schemes that reproduce SGLang 0.5.23's exact object names: HiCacheFile's flat file
names (``sglang-file``) and MooncakeStore's object keys (``sglang-mooncake``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from ..errors import ClearRefusedError
from .names import all_hex64, batch_names, check_plain_fragment, sanitize_component, sglang_model_name
from .scheme_base import KeyScheme, ObjectSpec
from .topology import Topology, _model_of, _reject_namespace

if TYPE_CHECKING:  # pragma: no cover
    from ..hostpool.layout import PoolLayout

__all__ = ["SGLangFileKeyScheme", "SGLangMooncakeKeyScheme"]


def _all_plain(hashes: Sequence[str]) -> bool:
    """Bulk form of :func:`check_plain_fragment` over a batch: ``True`` only when every
    entry surely passes it (``False``: check one by one, which raises on the bad one).
    SGLang's own hashes (64 lowercase hex chars) pass in a few C-level passes."""
    if all_hex64(hashes):
        return True
    if not hashes or set(map(type, hashes)) != {str} or "" in hashes:
        return False
    joined = "/".join(hashes)  # a separator no valid hash holds, so nothing spans two
    return (
        joined.count("/") == len(hashes) - 1
        and "\\" not in joined
        and ".." not in joined
        and joined.isprintable()  # false for any control char (and some rare others)
    )


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
    both. Page hashes are any plain-safe fragment whose file name the bound transport can
    store (the file backend refuses a name starting with ``.`` or longer than 255 bytes:
    ``ValueError`` naming the hash, before any I/O). ``clear_prefix()`` refuses: the model
    is a suffix of each name, so no prefix holds exactly this model's files (SGLang's own
    ``clear()`` empties the whole directory, every model's files included)."""

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
        self.check_storable([page_hash], [f"{stem}.bin"])
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
        names = batch_names(page_hashes, "", self._name_suffix(pool))
        self.check_storable(page_hashes, names)
        return names

    def _name_suffix(self, pool: PoolLayout) -> str:
        """What follows the page hash in the name of a page of ``pool``."""
        pool_name = sanitize_component(pool.name)
        if pool_name == "kv":
            return f"{self.config_suffix}.bin"
        cfg = self.tp_config_suffix if pool_name == "mamba" else self.config_suffix
        return f".{pool_name}{cfg}.bin"

    def clear_prefix(self) -> str:
        raise ClearRefusedError(
            f"clear() refused under key scheme 'sglang-file': SGLang's file names end with the model "
            f"(<hash>{self.config_suffix}.bin), so no prefix holds exactly this model's files and "
            f"clearing would remove every model's pages in the directory; remove the directory's "
            f"files yourself, or use the 'default' key scheme, whose clear() is scoped to one model"
        )


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
    ``clear_prefix()`` refuses: model names and tags may contain ``_``, so ``"{prefix}_"``
    would also hold other models' objects (``llama_`` holds ``llama_70b_...``), and without a
    prefix every object goes; SGLang's own ``clear()`` removes the whole store.
    """

    name: ClassVar[str] = "sglang-mooncake"

    def _build_names(self) -> None:
        #: per pool layout, each object's name suffix and segments (see page_columns)
        self._suffixes: dict[PoolLayout, list[tuple[str, tuple[int, ...]]]] = {}
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
        objs = self._page_objects(page_hash, pool)
        self.check_storable([page_hash], [o.name for o in objs])
        return objs

    def _page_objects(self, page_hash: str, pool: PoolLayout) -> list[ObjectSpec]:
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
        one page's objects and the names from one f-string per object. Every name passes
        the transport's rule (:meth:`check_storable`), as on the per-page path."""
        if not _all_plain(page_hashes):
            for h in page_hashes:
                check_plain_fragment(h, "page_hash")
        if not page_hashes:
            return []
        pre = self._name_prefix()
        out = []
        for suffix, segments in self._shape(pool, page_hashes[0]):
            names = batch_names(page_hashes, pre, suffix)
            self.check_storable(page_hashes, names)
            out.append((names, segments))
        return out

    def _name_prefix(self) -> str:
        return f"{self.config_prefix}_" if self.config_prefix else ""

    def _shape(self, pool: PoolLayout, page_hash: str) -> list[tuple[str, tuple[int, ...]]]:
        """Each object's name suffix and segments for a page of ``pool`` (derived from the
        page ``page_hash``, once: they depend on the pool, never on the hash). ``ValueError``
        for a pool the scheme refuses."""
        shape = self._suffixes.get(pool)
        if shape is None:
            tagged = f"{self._name_prefix()}{page_hash}"
            shape = [
                (spec.name[len(tagged) :], spec.segments) for spec in self._page_objects(page_hash, pool)
            ]
            self._suffixes[pool] = shape
        return shape

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
        scope = f"prefix {self.config_prefix + '_'!r}" if self.config_prefix else "no prefix"
        raise ClearRefusedError(
            f"clear() refused under key scheme 'sglang-mooncake': its object names start with "
            f"{scope}, and model names and tags may contain '_', so that would also remove other "
            f"models' pages (model 'm' would remove 'm_x''s); remove them with the store's own "
            f"tools, or use the 'default' key scheme, whose clear() is scoped to one model"
        )
