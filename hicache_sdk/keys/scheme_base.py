"""The key-scheme interface: how a page hash becomes physical objects."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .._ext import hotpath as _hotpath
from ..hostpool.layout import PoolLayout

__all__ = ["KeyScheme", "NamePlan", "ObjectSpec"]

#: How many names one builder keeps for reuse (:meth:`NamePlan.builder`): K and V of 2048
#: pages (SGLang 0.5.23 asks a request's whole candidate span at once: 128 Ki tokens at
#: 64-token pages), in about half a MiB. Names past it are made anew on every lookup.
NAMES_KEPT = 4096


@dataclass(frozen=True)
class ObjectSpec:
    """One physical object of one page: its name, and which of the page's segments
    (indices into ``PoolLayout.segment_sizes``, in the object's byte order) it holds."""

    name: str
    segments: tuple[int, ...]


@dataclass(frozen=True)
class NamePlan:
    """The names of a pool's pages as a template (:meth:`KeyScheme.name_plan`): object
    ``c`` of page ``h`` is ``prefix + (h[:fanout] + "/" if fanout else "") + h +
    suffixes[c]``, for a page hash that passes the scheme's check (``hex_only``: exactly
    64 lowercase hex chars; else a plain fragment, :func:`~hicache_sdk.keys.names.check_plain_fragment`).
    Equal, name for name, to :meth:`KeyScheme.page_columns` (column-major), which stays
    the checked path."""

    prefix: str
    suffixes: tuple[str, ...]
    fanout: int
    hex_only: bool

    def builder(self) -> Callable[[object], list[str] | None]:
        """``names(page_hashes)``: every object name of the batch, column-major, in one C
        call (no Python frame: a :class:`hicache_sdk._hotpath.Namer`), or ``None`` when it
        cannot vouch for the batch (not a list or tuple of plain ASCII ``str`` that pass
        the check): the caller then takes the checked path, which raises the precise
        ``ValueError`` or accepts. The builder keeps its first :data:`NAMES_KEPT` names and
        rewrites in place the ones its caller has let go of (no other reference at all),
        so a repeated lookup allocates and frees no names; a name still held anywhere is
        never touched. Without the C extension it always answers ``None``."""
        if _hotpath is None:
            return _no_names
        return _hotpath.Namer(self.prefix, self.suffixes, self.fanout, self.hex_only, NAMES_KEPT)

    def names(self, page_hashes: object) -> list[str] | None:
        """:meth:`builder`'s answer for ``page_hashes`` (new names, none kept)."""
        if _hotpath is None:
            return None
        return _hotpath.plan_names(self.prefix, self.suffixes, self.fanout, self.hex_only, page_hashes)


def _no_names(page_hashes: object) -> None:
    return None


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

    def name_plan(self, pool: PoolLayout) -> NamePlan | None:
        """The template of :meth:`page_columns`' names for ``pool`` (:class:`NamePlan`), for
        callers that need names only (existence): ``None`` (the default) when the scheme has
        none, for a logical pool, for a pool the scheme refuses, or while a transport name
        rule is bound (:meth:`check_storable` must then see every name)."""
        return None

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
