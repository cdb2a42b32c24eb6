"""Our ``default`` key scheme: one header object per page under a namespaced, fanned-out
directory-like name (see :class:`DefaultKeyScheme`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from ..sglang import versions
from .names import all_hex64, batch_names, check_page_key, exact_component, sanitize_component
from .scheme_base import KeyScheme, ObjectSpec
from .topology import Topology, _model_of

if TYPE_CHECKING:  # pragma: no cover
    from ..hostpool.layout import PoolLayout

__all__ = ["DefaultKeyScheme"]


class DefaultKeyScheme(KeyScheme):
    """Ours: ``{ns}/{model}/{pool}-{identity16}/{hash[:2]}/{hash}``. ``ns`` and ``model``
    are :func:`~hicache_sdk.keys.names.exact_component` encodings (``_`` when empty; no two
    names share one), the pool name is sanitised; ``/`` is the only separator and fans out
    by the first two hex chars of the hash. ``clear_prefix()`` is ``"{ns}/{model}/"``:
    exactly this model's objects in this namespace (model ``m`` never removes ``m_x``'s,
    namespace ``p`` never ``p2``'s).

    ``identity(pool)`` (sha256 digest) covers: scheme version, the raw model name, the
    pool name and ``pool.fingerprint()`` (dtype, layout, geometry), pp and attn-cp
    coordinates, tp coordinates for rank-sharded pools only, dcp coordinates (with
    logical page size and tp size, as SGLang) when ``dcp_size > 1``, and a digest of
    the secret ``namespace_salt``. Never the dp rank: DP replicas share pages.
    Page hashes must be 64 lowercase hex chars; where the installed SGLang stores
    speculative-decoding draft pages under ``<hash><suffix>`` (the profile's
    ``draft_key_suffix``, e.g. ``".draft"``), that form too (its own object, beside the
    page's).
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
        self._draft_suffix = versions.CURRENT.draft_key_suffix
        self._model_raw = _model_of(storage_config, model_name)
        self._model_dir = exact_component(self._model_raw)
        self._ns = exact_component(namespace)
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
        check_page_key(page_hash, self._draft_suffix)
        if not pool.has_buffer:
            return []
        prefix = self._ident(pool)[1]
        name = f"{prefix}{page_hash[:2]}/{page_hash}"
        self.check_storable([page_hash], [name])
        return [ObjectSpec(name, tuple(pool.flat_order))]

    def page_names(self, page_hashes: Sequence[str], pool: PoolLayout) -> list[str]:
        """Fast path of :meth:`page_objects` for a batch: the single object name of each
        page (its segments are always ``pool.flat_order``), identical to
        ``page_objects(h, pool)[0].name``. ``[]`` for a logical pool (no objects);
        ``ValueError`` names the first bad hash."""
        if not all_hex64(page_hashes):
            for h in page_hashes:
                check_page_key(h, self._draft_suffix)
        if not pool.has_buffer:
            return []
        prefix = self._ident(pool)[1]
        names = batch_names(page_hashes, prefix, "", 2)
        self.check_storable(page_hashes, names)
        return names

    def clear_prefix(self) -> str:
        return f"{self._ns}/{self._model_dir}/"
