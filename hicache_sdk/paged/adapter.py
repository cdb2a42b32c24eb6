"""``PagedStorage``: the whole ``HiCacheStorage`` surface over any :class:`Transport`.

A backend author subclasses :class:`PagedStorage` and sets ``config_cls``, ``transport_cls``
(built as ``transport_cls(config)``; override :meth:`PagedStorage.create_transport` to build it
otherwise) and ``backend_name``. The class's ``capabilities`` are derived: the adapter's own
(:data:`~hicache_sdk.capabilities.ADAPTER`) plus ``transport_cls.capabilities``. A class that
restates them (the 0.1.0 style) must agree with its transport, or class creation raises one
``TypeError`` that names the change to make.
Everything else -- hit semantics, alignment checks, key naming, headers, pools, metrics,
failure reasons, host-memory registration -- lives here.

Behaviour worth knowing:

* Construction follows SGLang's dynamic loader, ``cls(storage_config, kwargs)``. The typed
  config is built from ``storage_config.extra_config`` overlaid with ``kwargs``; bad
  settings raise :class:`~hicache_sdk.errors.ConfigError` here. The key scheme is built here
  too (so ``clear()`` works before registration). The transport must connect lazily: an
  unreachable service never raises from the constructor.
* Page operations before ``register_mem_pool_host`` raise
  :class:`~hicache_sdk.errors.NotRegisteredError`.
* Argument errors (keys not a list of str, misaligned / out-of-range / wrong-length host
  indices, wrong flat tensors, unknown pools, BLOCK_GROUPS) raise ``ValueError`` naming the
  argument before any I/O; the host pool is untouched. I/O failures are misses.
* Writer role: a rank-replicated pool (MLA KV, ``layout.rank_replicated``) is written only
  by the storage writer (``storage_config.is_storage_writer``); on other ranks the write
  methods store nothing and report success (SGLang skips backup there anyway).
  Rank-sharded pools (MHA KV, Mamba) are written by every rank.
* v2 transfers whose ``host_indices`` length is not ``len(keys) * page_size`` raise
  ``ValueError`` (SGLang logs and returns all-False; we are stricter).
* Duplicate keys in one batch are fine (create-if-absent: the first write wins). Batches
  of any size are one transport call (no silent 128-page cap).
* After ``close()`` every page operation is a miss / ``False``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, List, Optional
from urllib.parse import unquote, urlsplit

from ..capabilities import ADAPTER, Capabilities
from ..config import BackendConfig
from ..errors import ConfigError
from ..keys.scheme_base import KeyScheme
from ..metrics.backend import Metrics
from ..resilience import FailureInjector, Resilience, wrap_transport
from ..spec import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
    pool_name_str,
)
from ..transport import Transport
from .columns import build_columns, exists_columns, read_columns, write_columns
from .generic import LegacyPathMixin
from .objectpath import ObjectPathMixin
from .objects import ObjectEngine, ObjectIO, fold_pages
from .pools import PoolState, check_keys, check_policy, host_page_starts, resolve_transfers
from .registration import PoolRegistryMixin

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["PagedStorage"]

log = logging.getLogger(__name__)

_KV = PoolName.KV.value


def _secrets_of(config: Any) -> list[str]:
    """The values :func:`~hicache_sdk.metrics.backend.redact` must hide for ``config``: its
    secret settings, and the password of any URL among its settings."""
    out: list[str] = []
    shown = config.redacted() if callable(getattr(config, "redacted", None)) else {}
    for name, text in shown.items():
        value = getattr(config, name, None)
        if not isinstance(value, str) or not value:
            continue
        if text == "***":
            out.append(value)
        elif "://" in value:
            try:
                password = urlsplit(value).password
            except ValueError:
                continue
            if password:
                out += [password, unquote(password)]
    return out


def _derive_capabilities(cls: type[PagedStorage]) -> Capabilities:
    """``cls.capabilities``: the adapter's own plus ``transport_cls.capabilities``.

    A class may still restate ``capabilities`` as the 0.1.0 docs showed (the store's
    capabilities, with or without the adapter's three). Beside ``transport_cls`` the
    restatement must agree with the transport's. In a class that does not set
    ``transport_cls`` itself (a transport built in ``create_transport``, or a subclass that
    adds ``fault_injection`` for its tests) it declares the store's capabilities. Either way the
    adapter's ``zero_copy``, ``hybrid_pools`` and ``mla`` are added: the adapter implements
    them for every transport."""
    tcls = cls.__dict__.get("transport_cls")
    if tcls is not None and not (isinstance(tcls, type) and issubclass(tcls, Transport)):
        raise TypeError(f"{cls.__name__}.transport_cls must be a Transport subclass, got {tcls!r}")
    own = cls.__dict__.get("capabilities")
    if own is not None and not isinstance(own, Capabilities):
        raise TypeError(
            f"{cls.__name__}.capabilities must be a hicache_sdk.Capabilities, got {type(own).__name__}"
        )
    if tcls is None:  # inherited transport (or one built in create_transport): own words count
        return ADAPTER.union(own) if own is not None else cls.capabilities
    derived = ADAPTER.union(tcls.capabilities)
    if own is not None and ADAPTER.union(own) != derived:
        differ = [n for n in Capabilities.names() if getattr(ADAPTER.union(own), n) != getattr(derived, n)]
        raise TypeError(
            f"{cls.__name__}.capabilities disagrees with {tcls.__name__}.capabilities on "
            f"{', '.join(differ)}: delete the `capabilities = ...` line of {cls.__name__} and declare "
            f"the store's capabilities on {tcls.__name__} only (a PagedStorage class derives its own "
            f"from transport_cls plus the adapter's zero_copy, hybrid_pools and mla)"
        )
    return derived


class PagedStorage(PoolRegistryMixin, ObjectPathMixin, LegacyPathMixin, HiCacheStorage):
    """One generic ``HiCacheStorage`` implementation over a :class:`Transport`.

    Thread-safe: SGLang calls it from four controller threads at once; every call uses
    its own scratch memory.
    """

    config_cls: ClassVar[type[BackendConfig]] = BackendConfig
    #: The transport class; ``capabilities`` is derived from it (see the module docs).
    transport_cls: ClassVar[type[Transport] | None] = None
    capabilities: ClassVar[Capabilities] = ADAPTER
    backend_name: ClassVar[str] = "paged"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.capabilities = _derive_capabilities(cls)

    def __init__(self, storage_config: Any = None, kwargs: Optional[Mapping[str, Any]] = None) -> None:
        self.storage_config: Any = storage_config if storage_config is not None else HiCacheStorageConfig()
        extra = getattr(self.storage_config, "extra_config", None) or {}
        if not isinstance(extra, Mapping):
            raise ConfigError(f"storage_config.extra_config must be a mapping, got {type(extra).__name__}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigError(f"kwargs must be a mapping, got {type(kwargs).__name__}")
        self.config: Any = self.config_cls.from_mapping({**extra, **(kwargs or {})})
        self.metrics = Metrics(secrets=_secrets_of(self.config))
        self.scheme: KeyScheme = self.create_key_scheme()
        self.raw_transport: Transport = self.create_transport(self.config)
        if not isinstance(self.raw_transport, Transport):
            raise TypeError(
                f"{type(self).__name__}.create_transport returned {type(self.raw_transport).__name__}, "
                "not a hicache_sdk.Transport"
            )
        self.raw_transport.failures.bind(self.metrics.error)
        self.scheme.bind_transport(self.raw_transport)  # its name rule (KeyScheme.check_storable)
        # The layers around the transport, innermost first: the existence cache, the
        # resilience policies (deadline, breaker, staging, retry), the negative cache.
        inner: Transport = self.raw_transport
        ttl = float(self.config.exists_cache_ttl())
        if ttl:
            from ..kit.existence import CachedExistence

            inner = CachedExistence(inner, ttl)
        injector = FailureInjector.from_env() if getattr(self.config, "inject_failures", False) else None
        self.transport: Transport = wrap_transport(
            inner, self.create_resilience(), self.metrics, injector=injector
        )
        if getattr(self.config, "negative_cache_ttl_s", 0):  # outermost: an abandoned read counts at once
            from ..kit.negative import NegativeCache

            self.transport = NegativeCache(
                self.transport, self.config.negative_cache_ttl_s, metrics=self.metrics
            )
        self._registered_memory: set[tuple[int, int]] = set()
        self._max_segments = max(1, int(self.transport.max_segments))
        self._engine = ObjectEngine(self.transport, self.metrics, checksum=bool(self.config.checksum))
        self._lock = threading.Lock()
        self._kv: PoolState | None = None
        self._pools: dict[str, PoolState] = {}
        self._closed = False

    # -- hooks for backend authors ----------------------------------------------------
    def create_transport(self, config: Any) -> Transport:
        """Build the transport from the typed config: ``transport_cls(config)`` by default.
        Must not connect eagerly (an unreachable service never fails construction)."""
        tcls = type(self).transport_cls
        if tcls is None:
            raise TypeError(f"{type(self).__name__}: set transport_cls or override create_transport()")
        return tcls(config)  # type: ignore[call-arg]

    def create_resilience(self) -> Resilience:
        """The resilience policies around the transport (deadline, breaker, staging,
        retry): by default the shared config keys' (:meth:`Resilience.from_config`), with no
        retry. Override to inject others, e.g. ``dataclasses.replace(super().create_resilience(),
        retry=Retry(ExponentialBackoff(), 2))``."""
        return Resilience.from_config(self.config)

    @classmethod
    def check_environment(cls) -> str | None:
        """Why this backend cannot run here (a missing library, binary or device), or
        ``None`` when it can. Called by ``hicache ping`` / the registry listing without
        constructing the backend; must be cheap and never raise. Default: ``None``."""
        return None

    def create_key_scheme(self) -> KeyScheme:
        """Build the key scheme named by ``config.key_scheme`` (override to customise)."""
        from ..keys.schemes import make_scheme

        return make_scheme(
            self.config.key_scheme,
            self.storage_config,
            model_name=self.config.model_name or getattr(self.storage_config, "model_name", None),
            namespace=self.config.namespace,
            namespace_salt=self.config.namespace_salt,
        )

    def _record(self, op: str, state: PoolState, results: Sequence[bool], t0: float) -> None:
        good = len(results) - results.count(False)
        self.metrics.record(
            op,
            pages=good,
            nbytes=good * state.layout.page_bytes,
            seconds=time.perf_counter() - t0,
            ok=all(results),
        )

    def _read(self, objs: Sequence[ObjectIO]) -> list[bool]:
        return [False] * len(objs) if self._closed else self._engine.read(objs)

    def _write(self, objs: Sequence[ObjectIO]) -> list[bool]:
        return [False] * len(objs) if self._closed else self._engine.write(objs)

    def _exists(self, objs: Sequence[ObjectIO]) -> list[bool]:
        return [False] * len(objs) if self._closed else self._engine.exists(objs)

    # -- existence ----------------------------------------------------------------------
    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """Consecutive pages from the start whose KV object(s) exist with the expected
        size (one transport call). A wrong-sized object is missing and gets deleted."""
        kv = self._require_kv_bytes("batch_exists")
        keys = check_keys(keys)
        cols = build_columns(kv, self.scheme, keys, None)
        t0 = time.perf_counter()
        if cols is not None:  # the column fast path: no per-page objects at all
            # the names as given: a repeated key is asked again
            per_key = exists_columns(self._engine, cols, self._closed)
        else:
            objs, owners = self._page_objects_nomem(kv, keys)
            per_key = fold_pages(len(keys), owners, self._exists(objs))
        hits = per_key.index(False) if False in per_key else len(per_key)
        self.metrics.record("exists", pages=hits, seconds=time.perf_counter() - t0)
        return hits

    def exists(self, key: str) -> bool:
        """Whether one page's KV object(s) exist (see :meth:`batch_exists`)."""
        if not isinstance(key, str):
            raise ValueError(f"key must be a str, got {type(key).__name__}")
        return self.batch_exists([key]) == 1

    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[List[PoolTransfer]] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> PoolTransferResult:
        """Fold KV existence with each extra pool's hit policy (spec 2.1), in one
        transport call. A TRAILING pool's window is ``max(1, len(transfer.keys))``; its
        key values are ignored: pool objects are looked up under the KV hashes. With a
        logical KV anchor the extra pools alone decide."""
        from .merge import PoolPresence, fold_exists_v2

        kv = self._require_kv("batch_exists_v2")
        keys = check_keys(keys)
        transfers = list(pool_transfers or [])
        specs: list[tuple[str, Any, int, PoolState]] = []
        for i, t in enumerate(transfers):
            name = pool_name_str(getattr(t, "name", None))
            policy = check_policy(getattr(t, "hit_policy", None), f"pool_transfers[{i}] ({name})")
            tkeys = getattr(t, "keys", None)
            window = max(1, len(tkeys)) if tkeys is not None else 1
            state = self._lookup(name) if name != _KV else kv
            specs.append((name, policy, window, state))
        logical = not kv.layout.has_buffer
        present: list[list[bool]] = []
        groups: list[tuple[list[ObjectIO], list[int]]] = []
        if not logical:
            groups.append(self._page_objects_nomem(kv, keys))
        for _, _, _, state in specs:
            groups.append(self._page_objects_nomem(state, keys))
        t0 = time.perf_counter()
        ok = self._exists([o for objs, _ in groups for o in objs])
        pos = 0
        for objs, owners in groups:
            present.append(fold_pages(len(keys), owners, ok[pos : pos + len(objs)]))
            pos += len(objs)
        kv_present = [True] * len(keys) if logical else present.pop(0)
        pools = [
            PoolPresence(name, policy, window, pres)
            for (name, policy, window, _), pres in zip(specs, present)
        ]
        result = fold_exists_v2(kv_present, pools, logical_kv_anchor=logical)
        self.metrics.record("exists", pages=result.kv_hit_pages, seconds=time.perf_counter() - t0)
        return result

    # -- v1 zero-copy ----------------------------------------------------------------------
    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Read page i into the KV host slots starting at ``host_indices[i * page_size]``.
        Per-key results; a miss (absent, torn, foreign, corrupt, I/O error) is ``False``
        and leaves those slots' content unspecified."""
        kv = self._require_kv_bytes("batch_get_v1")
        keys = check_keys(keys)
        starts = host_page_starts(kv, host_indices, len(keys), "host_indices")
        cols = build_columns(kv, self.scheme, keys, starts, max_segments=self._max_segments)
        if cols is not None:
            t0 = time.perf_counter()
            results = [False] * len(keys) if self._closed else read_columns(self._engine, cols)
            self._record("get_v1", kv, results, t0)
            return results
        objs, owners, finish = self._page_objects(kv, keys, starts, write=False)
        t0 = time.perf_counter()
        results = fold_pages(len(keys), owners, self._read(objs))
        if finish is not None:
            finish(results)
        self._record("get_v1", kv, results, t0)
        return results

    def batch_set_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Write page i from the KV host slots at ``host_indices[i * page_size]``
        (create-if-absent: an existing page is success and is not rewritten). On a
        non-writer rank of a rank-replicated pool nothing is written and all are ``True``."""
        kv = self._require_kv_bytes("batch_set_v1")
        keys = check_keys(keys)
        starts = host_page_starts(kv, host_indices, len(keys), "host_indices")
        if not self._may_write(kv):
            return [True] * len(keys)
        cols = build_columns(
            kv,
            self.scheme,
            keys,
            starts,
            write=True,
            checksum=self._engine.checksum,
            max_segments=self._max_segments,
        )
        if cols is not None:
            t0 = time.perf_counter()
            results = [False] * len(keys) if self._closed else write_columns(self._engine, cols)
            self._record("set_v1", kv, results, t0)
            return results
        objs, owners, _ = self._page_objects(kv, keys, starts, write=True)
        t0 = time.perf_counter()
        results = fold_pages(len(keys), owners, self._write(objs))
        self._record("set_v1", kv, results, t0)
        return results

    # -- v2 pools --------------------------------------------------------------------------
    def batch_get_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        """Per ``str(transfer.name)``, per-key read results (one transport call for all
        pools). A transfer named ``"kv"`` goes to the KV pool; see :func:`resolve_transfers`
        for the argument rules."""
        self._require_kv("batch_get_v2")
        plans = resolve_transfers(transfers, self._lookup)
        return self._v2_run("get_v2", plans, [False] * len(plans), write=False)

    def batch_set_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        """Write counterpart of :meth:`batch_get_v2`. Rank-replicated pools are written by
        the storage writer only (other ranks get all ``True``); rank-sharded pools
        (Mamba) by every rank."""
        self._require_kv("batch_set_v2")
        plans = resolve_transfers(transfers, self._lookup)
        skip = [not self._may_write(p.state) for p in plans]
        return self._v2_run("set_v2", plans, skip, write=True)

    # -- admin ----------------------------------------------------------------------------------
    @classmethod
    def capacity_config(cls, capacity_bytes: int) -> dict[str, Any]:
        """The config keys that bound this backend's stored bytes to ``capacity_bytes``
        (for backends that declare ``capacity_bound``; the conformance suite uses it).
        The default raises ``NotImplementedError``."""
        raise NotImplementedError(f"{cls.__name__} has no byte capacity setting")

    def batch_delete(self, keys: List[str]) -> None:
        """Remove the KV objects of these pages (an SDK extension, not in SGLang's ABC;
        ``hicache ping`` uses it to clean up). Missing pages are ignored; I/O errors are
        swallowed and counted."""
        kv = self._require_kv("batch_delete")
        keys = check_keys(keys)
        objs, _ = self._page_objects_nomem(kv, keys)
        try:
            self.transport.delete(list(dict.fromkeys(o.name for o in objs)))
        except Exception as e:
            self.metrics.failure("delete", e, self.raw_transport.io_errors)

    def clear(self) -> None:
        """Remove this backend's objects: exactly those under the key scheme's
        :meth:`~hicache_sdk.keys.scheme_base.KeyScheme.clear_prefix` (this model in this
        namespace). Raises :class:`~hicache_sdk.errors.ClearRefusedError` under a scheme that
        cannot scope it (``sglang-file``, ``sglang-mooncake``). Transport errors propagate
        (it is an admin call, not a batch)."""
        self.transport.clear(self.scheme.clear_prefix())

    def _sglang_layout(
        self,
        build: Callable[..., dict[str, Any]],
        *,
        scheme: str,
        names: str,
        sidecar_pool_specs: Any,
        swa_trailing_pages: int | None,
        page_size: int,
    ) -> dict[str, Any]:
        """``describe_l3_object_layout`` for a backend whose object names are SGLang's only
        under the key scheme ``scheme``: ``build`` (a :mod:`hicache_sdk.keys.l3_layout`
        builder) over the registered pools, or a disabled layout saying which scheme to set.
        ``NotRegisteredError`` before the KV pool is registered."""
        from ..keys.l3_layout import disabled_layout

        if self.config.key_scheme != scheme:
            return disabled_layout(
                f"key scheme {self.config.key_scheme!r} does not use {names} (set key_scheme to {scheme!r})",
                backend=self.backend_name,
                page_size=page_size,
            )
        kv = self._require_kv("describe_l3_object_layout")
        with self._lock:
            pools = [state.layout for state in self._pools.values()]
        return build(
            self.scheme,
            kv.layout,
            pools,
            sidecar_pool_specs=sidecar_pool_specs,
            swa_trailing_pages=swa_trailing_pages,
            page_size=page_size,
        )

    def get_stats(self) -> Any:
        """SGLang's ``StorageMetrics`` since the previous call."""
        return self.metrics.drain_storage_metrics()

    def close(self) -> None:
        """Close the transport. Idempotent; later page operations are misses."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.transport.close()
        except Exception as e:  # closing never fails the caller
            log.debug("transport close failed: %s", type(e).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(backend={self.backend_name!r}, key_scheme={self.config.key_scheme!r})"
