"""The key-scheme interface: how a page hash becomes physical objects."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..hostpool.layout import PoolLayout

__all__ = ["KeyScheme", "ObjectSpec"]


@dataclass(frozen=True)
class ObjectSpec:
    """One physical object of one page: its name, and which of the page's segments
    (indices into ``PoolLayout.segment_sizes``, in the object's byte order) it holds."""

    name: str
    segments: tuple[int, ...]


class KeyScheme(ABC):
    """Maps ``(page_hash, pool)`` to the objects that store that page.

    A scheme is bound to one deployment identity at construction:
    ``storage_config`` (duck-typed ``HiCacheStorageConfig``: ranks, sizes, model name,
    ``is_mla_model``), plus the SDK-level ``model_name`` override, ``namespace`` and secret
    ``namespace_salt``. Pool geometry comes from :class:`PoolLayout` at call time.

    ``has_header``: objects start with the SDK page header (only the ``default`` scheme).

    **Storable names.** A scheme refuses, with a ``ValueError`` naming the page hash and
    before any I/O, every page whose object name its transport could not store. The
    transport declares its rule by a ``check_names(names)`` method that raises
    ``ValueError`` for a name it cannot store (the file transport: no component starting
    with ``.``, none over 255 bytes, ...); :meth:`bind_transport` adopts it (the paged
    adapter calls it once, after building the transport) and every scheme passes the
    names it makes through :meth:`check_storable`. A transport without ``check_names``
    stores any name the scheme makes.
    """

    name: ClassVar[str]
    has_header: ClassVar[bool] = False
    #: The transport's name rule (:meth:`bind_transport`); ``None``: every name is storable.
    _storable: Callable[[Sequence[str]], object] | None = None

    def __init__(
        self,
        storage_config: Any,
        *,
        model_name: str | None = None,
        namespace: str = "",
        namespace_salt: str | None = None,
    ) -> None:
        self.storage_config = storage_config
        self.model_name = model_name
        self.namespace = namespace
        self.namespace_salt = namespace_salt

    @abstractmethod
    def page_objects(self, page_hash: str, pool: PoolLayout) -> list[ObjectSpec]:
        """The objects of one page of ``pool``. Raises ``ValueError`` for a page hash or
        pool name that cannot be named safely, or a pool this scheme cannot store."""

    @abstractmethod
    def clear_prefix(self) -> str:
        """The object-name prefix that holds exactly the objects this instance names, and
        nothing another model, namespace or deployment could own: it ends at a delimiter
        that no name component contains. ``clear()`` removes what starts with it. A scheme
        whose names cannot be told apart by a prefix raises
        :class:`~hicache_sdk.errors.ClearRefusedError` saying why."""

    def page_columns(
        self, page_hashes: Sequence[str], pool: PoolLayout
    ) -> list[tuple[list[str], tuple[int, ...]]] | None:
        """Fast path of :meth:`page_objects` for a batch, column by column: for each
        object a page of ``pool`` is stored as (the same for every page), the names of that
        object for every page and the page segments it holds. Must equal calling
        :meth:`page_objects` page by page (same names, same segments, same ``ValueError``
        for a bad hash). ``[]`` for a logical pool. ``None`` (the default unless the
        scheme has ``page_names``): no fast path, the adapter goes page by page."""
        fast = getattr(self, "page_names", None)
        if fast is None:
            return None
        names: list[str] = fast(page_hashes, pool)
        if not pool.has_buffer:
            return []
        return [(names, tuple(pool.flat_order))]

    def bind_transport(self, transport: object) -> None:
        """Adopt ``transport.check_names`` (when it has one) as the rule of
        :meth:`check_storable`; see the class docs."""
        check = getattr(transport, "check_names", None)
        self._storable = check if callable(check) else None

    def check_storable(self, page_hashes: Sequence[str], names: Sequence[str]) -> None:
        """Raise ``ValueError`` naming the page hash when the bound transport refuses one
        of ``names``; ``names[i]`` belongs to ``page_hashes[i]``, or all of them to the
        single hash given (a page stored as several objects). The whole batch is checked
        at once; only a refused batch is checked name by name to find the culprit."""
        check = self._storable
        if check is None or not names:
            return
        try:
            check(names)
            return
        except ValueError:
            pass
        for i, n in enumerate(names):
            try:
                check([n])
            except ValueError as e:
                h = page_hashes[i] if len(page_hashes) == len(names) else page_hashes[0]
                raise ValueError(
                    f"page_hash {h!r}: this backend cannot store its object name {n!r} ({e})"
                ) from None
        raise ValueError(f"page_hash: the backend refused the object names {list(names)[:3]!r}...")

    def identity(self, pool: PoolLayout) -> bytes:
        """Bytes the default scheme's page header carries to reject foreign pages
        (layout fingerprint plus the parallel identity). Schemes without a header may
        return ``b""``."""
        return b""
