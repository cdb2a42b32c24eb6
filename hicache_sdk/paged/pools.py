"""Registered pools as the adapter sees them, and the argument checks of the page APIs.

:class:`PoolState` binds a registered host pool to its :class:`PoolLayout` and to the
header identity of the key scheme; it turns ``(page hash, page memory)`` into the
:class:`~hicache_sdk.paged.objects.ObjectIO` list the engine moves. The ``check_*`` and
:func:`resolve_transfers` helpers validate arguments at the API boundary, before any I/O,
and raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..hostpool.layout import PoolLayout
from ..keys.scheme_base import KeyScheme
from ..spec import PoolHitPolicy, pool_name_str
from ..transport import Segment
from .header import TRAILER_SIZE
from .objects import ObjectIO

__all__ = [
    "PoolState",
    "TransferPlan",
    "check_keys",
    "check_policy",
    "host_page_starts",
    "resolve_transfers",
]


@dataclass(frozen=True)
class PoolState:
    """One registered pool: the pool object, its layout and its header identity digest
    (``None`` when the key scheme writes raw objects)."""

    name: str
    pool: Any
    layout: PoolLayout
    identity: bytes | None

    def objects(self, scheme: KeyScheme, page_hash: str, page_segs: Sequence[Segment]) -> list[ObjectIO]:
        """The objects of one page whose segments (``PoolLayout.segment_sizes`` order)
        live at ``page_segs``. An empty ``page_segs`` describes the objects without memory
        (for existence checks). ``ValueError`` from the scheme propagates."""
        sizes = self.layout.segment_sizes
        page = None
        if self.identity is not None:
            from .header import digest

            page = digest(page_hash)
        out = []
        for spec in scheme.page_objects(page_hash, self.layout):
            segs = tuple(page_segs[j] for j in spec.segments) if page_segs else ()
            out.append(
                ObjectIO(
                    name=spec.name,
                    segments=segs,
                    payload_len=sum(sizes[j] for j in spec.segments),
                    identity=self.identity,
                    page=page,
                )
            )
        return out

    def page_objects_fast(
        self, scheme: KeyScheme, page_hashes: Sequence[str], segs: Sequence[Sequence[Segment]]
    ) -> tuple[list[ObjectIO], list[int]] | None:
        """:meth:`objects` for a whole batch (page ``i``'s segments at ``segs[i]``, or no
        memory when ``segs`` is empty) through the scheme's :meth:`~KeyScheme.page_columns`,
        and each object's page index; ``None`` when the scheme has no fast path. Same objects
        as calling :meth:`objects` page by page (column-major order); a bad hash raises
        ``ValueError`` as there."""
        if not self.layout.has_buffer:
            return None
        cols = scheme.page_columns(page_hashes, self.layout)
        if cols is None:
            return None
        sizes = self.layout.segment_sizes
        ident = self.identity
        if ident is None:
            pages: Sequence[bytes | None] = [None] * len(page_hashes)
        else:
            from .header import page_digests

            joined = page_digests(page_hashes)
            pages = [joined[32 * i : 32 * i + 32] for i in range(len(page_hashes))]
        objs: list[ObjectIO] = []
        owners: list[int] = []
        for names, idx in cols:
            payload = sum(sizes[j] for j in idx)
            objs.extend(
                ObjectIO(
                    name=nm,
                    segments=tuple(segs[i][j] for j in idx) if segs else (),
                    payload_len=payload,
                    identity=ident,
                    page=pages[i],
                )
                for i, nm in enumerate(names)
            )
            owners.extend(range(len(names)))
        return objs, owners

    @property
    def object_size(self) -> int:
        """Stored size of a one-object page: the page bytes plus the SDK trailer when the
        scheme has one."""
        return self.layout.page_bytes + (TRAILER_SIZE if self.identity is not None else 0)

    def flat_page_segments(self, base: int) -> list[Segment]:
        """Segment memory (``segment_sizes`` order) of one page held as a flat buffer at
        ``base``, whose bytes are the segments concatenated in ``flat_order``."""
        sizes = self.layout.segment_sizes
        segs: list[Segment] = [(0, 0)] * len(sizes)
        off = 0
        for j in self.layout.flat_order:
            segs[j] = (base + off, sizes[j])
            off += sizes[j]
        return segs


def check_keys(keys: Any, arg: str = "keys") -> list[str]:
    """``keys`` as a list of ``str`` (a list or tuple of strings), else ``ValueError``."""
    if not isinstance(keys, (list, tuple)):
        raise ValueError(f"{arg} must be a list of str, got {type(keys).__name__}")
    if not keys or set(map(type, keys)) == {str}:  # fast path: no per-key Python call
        return list(keys)
    for i, k in enumerate(keys):
        if not isinstance(k, str):
            raise ValueError(f"{arg}[{i}] must be a str, got {type(k).__name__}")
    return list(keys)


def check_policy(policy: Any, arg: str) -> PoolHitPolicy:
    """ALL_PAGES / TRAILING_PAGES (by member or value); BLOCK_GROUPS and anything else
    raise ``ValueError`` (SGLang 0.5.23 declares BLOCK_GROUPS but nothing implements it)."""
    value = getattr(policy, "value", policy)
    if value == PoolHitPolicy.ALL_PAGES.value:
        return PoolHitPolicy.ALL_PAGES
    if value == PoolHitPolicy.TRAILING_PAGES.value:
        return PoolHitPolicy.TRAILING_PAGES
    raise ValueError(f"{arg}: unsupported hit policy {value!r} (only all_pages and trailing_pages)")


def host_page_starts(state: PoolState, host_indices: Any, n_keys: int, arg: str) -> list[int]:
    """Validate ``host_indices`` for ``n_keys`` pages of ``state``'s pool and return the
    first slot of each page (``ValueError`` naming ``arg``)."""
    from ..hostpool.describe import page_starts

    page_size = state.layout.page_size
    numel = getattr(host_indices, "numel", None)
    if callable(numel) and numel() != n_keys * page_size:
        raise ValueError(
            f"{arg}: has {numel()} entries, expected len(keys) * page_size = {n_keys} * {page_size}"
        )
    starts = page_starts(host_indices, page_size, getattr(state.pool, "size", None), arg=arg)
    if len(starts) != n_keys:
        raise ValueError(f"{arg}: describes {len(starts)} pages for {n_keys} keys")
    return starts


@dataclass(frozen=True)
class TransferPlan:
    """One validated v2 transfer: its pool, page hashes, first slot of each page."""

    name: str
    state: PoolState
    keys: list[str]
    starts: list[int]


def resolve_transfers(transfers: Any, lookup: Callable[[str], PoolState]) -> list[TransferPlan]:
    """Validate a v2 transfer list and resolve each transfer to its pool.

    * ``indices_from_pool``: a transfer whose ``keys`` or ``host_indices`` is ``None``
      takes them from the transfer of that pool in the same list (``ValueError`` if absent).
    * ``host_indices`` must hold ``len(keys) * pool.page_size`` aligned slots (stricter
      than SGLang, which logs and returns all-False).
    * two transfers for one pool in one call, an unregistered pool, or BLOCK_GROUPS raise.
    """
    if not isinstance(transfers, (list, tuple)):
        raise ValueError(f"transfers must be a list of PoolTransfer, got {type(transfers).__name__}")
    by_name: dict[str, Any] = {}
    for i, t in enumerate(transfers):
        name = pool_name_str(getattr(t, "name", None))
        if name in by_name:
            raise ValueError(f"transfers[{i}]: pool {name!r} appears twice in one call")
        by_name[name] = t
    plans = []
    for i, t in enumerate(transfers):
        name = pool_name_str(t.name)
        arg = f"transfers[{i}] ({name})"
        check_policy(getattr(t, "hit_policy", PoolHitPolicy.ALL_PAGES), arg)
        keys, host_indices = getattr(t, "keys", None), getattr(t, "host_indices", None)
        src_name = getattr(t, "indices_from_pool", None)
        if (keys is None or host_indices is None) and src_name is not None:
            src = by_name.get(pool_name_str(src_name))
            if src is None:
                raise ValueError(f"{arg}: indices_from_pool {pool_name_str(src_name)!r} has no transfer here")
            keys = src.keys if keys is None else keys
            host_indices = src.host_indices if host_indices is None else host_indices
        if keys is None:
            raise ValueError(f"{arg}: keys is None")
        if host_indices is None:
            raise ValueError(f"{arg}: host_indices is None")
        keys = check_keys(keys, f"{arg}.keys")
        state = lookup(name)
        starts = host_page_starts(state, host_indices, len(keys), f"{arg}.host_indices")
        plans.append(TransferPlan(name, state, keys, starts))
    return plans
