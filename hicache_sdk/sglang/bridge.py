"""The bridge that loads our backends inside SGLang (0.5.3 to 0.5.23) through its ``dynamic`` backend.

SGLang is started with::

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
      '{"backend_name": "hicache_sdk", "module_path": "hicache_sdk.sglang",
        "class_name": "HiCacheSDKStorage", "interface_v1": 1,
        "backend": "file", "backend_config": {...}}'

SGLang's factory imports this module, checks ``issubclass(HiCacheSDKStorage,
sglang...HiCacheStorage)`` and calls ``HiCacheSDKStorage(storage_config, {})``. The bridge
resolves ``extra_config["backend"]`` by name (runtime registration, installed entry point
in group ``hicache_sdk.backends``, or a ``"module:Class"`` path), builds it with
:func:`hicache_sdk.registry.create_backend` and forwards every ``HiCacheStorage`` call.

Which ``HiCacheStorage`` the bridge subclasses (decided once, when this module is imported):

* SGLang's ``sglang.srt.mem_cache.hicache_storage`` already imported (always the case
  inside SGLang: its factory imports it before loading us) -> the bridge subclasses
  **both** ours and SGLang's ABC, so SGLang's ``issubclass`` check and ours both pass;
* SGLang installed but not imported yet -> it is imported now (so that a process that
  imports this module before SGLang still gets a class SGLang accepts); any failure of
  that import (a broken or GPU-less install) is logged and the bridge falls back to
  ours alone;
* SGLang absent -> ours alone. Importing this module never requires SGLang.

Subclassing (rather than ``ABC.register``) is the robust choice: ``register`` needs
SGLang's class at hand, so it would have to happen at the same moment anyway, and a real
subclass also inherits any default SGLang adds to its ABC later.

Values crossing the boundary:

* SGLang's ``PoolTransfer``, ``PoolName`` and ``HiCacheStorageExtraInfo`` go to the inner
  backend unchanged (it reads them by attribute and pool names by value).
* ``batch_exists_v2`` returns SGLang's ``PoolTransferResult`` and ``get_stats`` SGLang's
  ``StorageMetrics`` whenever SGLang is loaded (its metrics logger asserts ``isinstance``);
  otherwise the inner backend's objects are returned (:mod:`hicache_sdk.sglang.types`).
* Inside SGLang, SGLang's own failure-injector variables are SGLang's job (its factory wraps
  the bridge in its injector); the SDK reads them only when a caller asks for them
  (``FailureInjector.from_env(sglang_variables=True)``), so they are never applied twice.

Checks (:mod:`hicache_sdk.sglang.checks`): ``extra_config["interface_v1"]`` is set from
what the inner backend implements (SGLang reads it from that dict after constructing us);
``on_host_pools_registered`` refuses host layouts the bridge cannot serve (on releases whose
controller never calls that hook -- the profile's ``calls_on_host_pools_registered`` -- each
pool is checked as it is registered instead); ``close()`` closes the inner backend once.

Releases: the bridge follows the installed SGLang's contract profile
(:data:`hicache_sdk.sglang.versions.CURRENT`). Constructed under an SGLang outside the
supported range, it raises :class:`~hicache_sdk.sglang.versions.UnsupportedSGLangError`
with one message naming the installed version and the range; while SGLang's scheduler starts
up, :class:`~hicache_sdk.sglang.versions.UnsupportedSGLangExit` with that message instead (a
``SystemExit``: SGLang's factory and scheduler log every ``Exception`` with a traceback, and
let this one through, so the scheduler process ends printing that one line).

Configuration: the inner backend sees ``extra_config`` without the loader keys
(``backend_name``, ``module_path``, ``class_name``, ``interface_v1``, ``backend``,
``backend_config``) and the bridge's own ``metrics_port``/``metrics_addr`` (an optional
Prometheus endpoint, :mod:`hicache_sdk.metrics.endpoint`); any other top-level key (e.g.
SGLang's injected ``file_storage_path``) is kept, and ``backend_config`` is merged over it.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import logging
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, List, Optional

from ..config import LOADER_KEYS
from ..metrics.endpoint import BRIDGE_KEYS, start_endpoint
from ..spec import (
    HiCacheStorage,
    HiCacheStorageExtraInfo,
    PoolTransfer,
    PoolTransferResult,
)
from . import versions
from .checks import choose_interface_v1, unservable_pool
from .types import (
    SGLANG_METRICS_MODULE,
    SGLANG_STORAGE_MODULE,
    to_sglang_metrics,
    to_sglang_transfer_result,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "BRIDGE_EXTRA_CONFIG",
    "SGLANG_METRICS_MODULE",
    "SGLANG_STORAGE_MODULE",
    "HiCacheSDKStorage",
    "sglang_storage_base",
]

log = logging.getLogger(__name__)

#: The loader keys SGLang's ``dynamic`` backend needs to construct the bridge.
BRIDGE_EXTRA_CONFIG: Mapping[str, Any] = {
    "backend_name": "hicache_sdk",
    "module_path": "hicache_sdk.sglang",
    "class_name": "HiCacheSDKStorage",
    "interface_v1": 1,
}


def _load_sglang_storage_module() -> ModuleType | None:
    mod = sys.modules.get(SGLANG_STORAGE_MODULE)
    if mod is not None:
        return mod
    try:
        spec = importlib.util.find_spec("sglang")
        if spec is None or spec.origin is None:  # absent, or a bare namespace folder
            return None
        return importlib.import_module(SGLANG_STORAGE_MODULE)
    except Exception as e:  # a broken SGLang install must not break this import
        log.warning(
            "SGLang is installed but %s does not import (%s: %s); HiCacheSDKStorage will not "
            "be a subclass of SGLang's HiCacheStorage",
            SGLANG_STORAGE_MODULE,
            type(e).__name__,
            e,
        )
        return None


def _sglang_base_class() -> type | None:
    mod = _load_sglang_storage_module()
    base = getattr(mod, "HiCacheStorage", None) if mod is not None else None
    if isinstance(base, type) and base is not HiCacheStorage:
        return base
    return None


_SGLANG_BASE = _sglang_base_class()


def sglang_storage_base() -> type | None:
    """SGLang's ``HiCacheStorage`` class that :class:`HiCacheSDKStorage` subclasses, or
    ``None`` when SGLang was not importable when this module was imported."""
    return _SGLANG_BASE


if TYPE_CHECKING:
    _Base = HiCacheStorage
elif _SGLANG_BASE is not None:
    _Base = type("_SGLangCompatibleStorage", (HiCacheStorage, _SGLANG_BASE), {"__module__": __name__})
else:
    _Base = HiCacheStorage


def _available_backends() -> list[str]:
    try:
        from ..registry import list_backends

        return sorted({info.name for info in list_backends()})
    except Exception as e:  # only used to phrase an error message
        log.debug("could not list backends: %s", e)
        return []


def _sglang_scheduler_starting() -> bool:
    """Whether SGLang's ``Scheduler.__init__`` (``sglang.srt.managers.scheduler``) is further
    up this thread's stack: SGLang attaching its storage backend at startup, rather than on a
    runtime attach request."""
    frame = sys._getframe(1)
    while frame is not None:
        if (
            frame.f_code.co_name == "__init__"
            and frame.f_globals.get("__name__") == "sglang.srt.managers.scheduler"
        ):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class HiCacheSDKStorage(_Base):
    """A ``HiCacheStorage`` that forwards every call to a hicache-sdk backend.

    ``storage_config.extra_config`` must hold ``"backend"`` (a backend name, as listed by
    ``hicache backends``) and may hold ``"backend_config"`` (a dict of that backend's
    settings). ``kwargs`` (SGLang passes ``{}``) is merged over ``backend_config``.

    Raises ``ValueError`` (naming the key and listing available backends) when
    ``extra_config`` or ``"backend"`` is missing or ``"backend_config"`` is not a dict;
    errors from resolving or constructing the backend propagate unchanged (a misconfigured
    backend fails SGLang's attach loudly).

    Thread-safe exactly as far as the inner backend is (the bridge holds no state of its
    own besides the registrations that SGLang's default methods also keep).
    """

    def __init__(self, storage_config: Any, kwargs: Optional[Mapping[str, Any]] = None) -> None:
        if versions.UNSUPPORTED is not None:
            if _sglang_scheduler_starting():
                raise versions.UnsupportedSGLangExit(versions.UNSUPPORTED)
            raise versions.UnsupportedSGLangError(versions.UNSUPPORTED)
        extra = getattr(storage_config, "extra_config", None)
        if not isinstance(extra, Mapping):
            raise ValueError(
                "storage_config.extra_config must be a mapping holding 'backend' "
                f"(got {type(extra).__name__}); available backends: {_available_backends()}"
            )
        name = extra.get("backend")
        if not isinstance(name, str) or not name:
            raise ValueError(
                "extra_config['backend'] must name a hicache-sdk backend "
                f"(got {name!r}); available backends: {_available_backends()}"
            )
        backend_config = extra.get("backend_config")
        if backend_config is None:
            backend_config = {}
        if not isinstance(backend_config, Mapping):
            raise ValueError(
                f"extra_config['backend_config'] must be a dict, got {type(backend_config).__name__}"
            )
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ValueError(f"kwargs must be a mapping, got {type(kwargs).__name__}")
        from ..registry import create_backend

        inner_config = copy.copy(storage_config)
        inner_config.extra_config = {
            k: v for k, v in extra.items() if k not in LOADER_KEYS and k not in BRIDGE_KEYS
        }
        self.backend_name = name
        self.storage_config = storage_config
        self._close_lock = threading.Lock()
        self._closed = False
        self.inner: HiCacheStorage = create_backend(name, inner_config, {**backend_config, **(kwargs or {})})
        self.interface_v1 = choose_interface_v1(self.inner, name, extra)
        self._metrics_endpoint = start_endpoint(self.inner, name, storage_config, extra)
        self.metrics_url = self._metrics_endpoint.url if self._metrics_endpoint else None

    # -- anything else the inner backend offers (duck-typed extras) ------------------------
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def __repr__(self) -> str:
        return f"HiCacheSDKStorage(backend={self.backend_name!r}, inner={self.inner!r})"

    # -- registration ------------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Forward the anchor (KV) host pool; kept as ``self.mem_pool_host`` as well. Where
        the release never calls :meth:`on_host_pools_registered`, its layout is checked
        here (``ValueError``, as there)."""
        if not versions.CURRENT.calls_on_host_pools_registered:
            self._refuse_unservable("kv", mem_pool_host)
        self.inner.register_mem_pool_host(mem_pool_host)
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Forward one named host pool (SGLang's ``PoolName`` or a str); checked here where
        the release never calls :meth:`on_host_pools_registered`."""
        if not versions.CURRENT.calls_on_host_pools_registered:
            self._refuse_unservable(str(getattr(host_pool_name, "value", host_pool_name)), host_pool)
        self.inner.register_mem_host_pool_v2(host_pool, host_pool_name)
        # the bridge's own dict (``hasattr`` would find the inner backend's through __getattr__)
        pools: dict[Any, Any] = self.__dict__.setdefault("registered_pools", {})
        pools[host_pool_name] = host_pool

    def on_host_pools_registered(self) -> None:
        """Check every registered host pool, then forward; an exception fails SGLang's attach.

        Raises ``ValueError`` naming the pool and the reason for a host layout the bridge
        cannot serve (see :func:`hicache_sdk.sglang.checks.unservable_pool`: unified
        page-envelope pools, ``page_unified``, ``page_first_kv_split``, ``page_head`` with a
        head split) instead of attaching and then missing on every page."""
        pools: list[tuple[str, Any]] = []
        anchor = self.__dict__.get("mem_pool_host")
        if anchor is not None:
            pools.append(("kv", anchor))
        for pool_name, pool in self.__dict__.get("registered_pools", {}).items():
            pools.append((str(getattr(pool_name, "value", pool_name)), pool))
        for pool_name, pool in pools:
            self._refuse_unservable(pool_name, pool)
        self.inner.on_host_pools_registered()

    def _refuse_unservable(self, pool_name: str, pool: Any) -> None:
        why = unservable_pool(pool, pool_name, self.storage_config)
        if why is not None:
            raise ValueError(f"hicache-sdk bridge (backend {self.backend_name!r}): {why}")

    # -- generic path ------------------------------------------------------------------------
    def get(
        self,
        key: str,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> torch.Tensor | None:
        return self.inner.get(key, target_location, target_sizes)

    def batch_get(
        self,
        keys: List[str],
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> List[torch.Tensor | None] | int:
        return self.inner.batch_get(keys, target_locations, target_sizes)

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        return self.inner.set(key, value, target_location, target_sizes)

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        return self.inner.batch_set(keys, values, target_locations, target_sizes)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        return self.inner.batch_exists(keys, extra_info)

    # -- v1 zero-copy ------------------------------------------------------------------------
    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        return self.inner.batch_get_v1(keys, host_indices, extra_info)

    def batch_set_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        return self.inner.batch_set_v1(keys, host_indices, extra_info)

    # -- v2 pools ----------------------------------------------------------------------------
    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[List[PoolTransfer]] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> PoolTransferResult:
        """The inner result, as SGLang's ``PoolTransferResult`` when SGLang is loaded."""
        converted: PoolTransferResult = to_sglang_transfer_result(
            self.inner.batch_exists_v2(keys, pool_transfers, extra_info)
        )
        return converted

    def batch_get_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        """The inner result unchanged: SGLang declares it a plain ``dict[str, List[bool]]``
        and looks pools up by its ``PoolName`` (a ``str`` enum, equal to our keys)."""
        return self.inner.batch_get_v2(transfers, extra_info)

    def batch_set_v2(
        self,
        transfers: List[PoolTransfer],
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> dict[str, List[bool]]:
        return self.inner.batch_set_v2(transfers, extra_info)

    # -- admin -------------------------------------------------------------------------------
    def clear(self) -> None:
        self.inner.clear()

    def get_stats(self) -> Any:
        """The inner metrics, as SGLang's ``StorageMetrics`` whenever SGLang is loaded (its
        logger asserts ``isinstance``; its metrics module is imported on first use if need
        be, see :mod:`hicache_sdk.sglang.types`); ``None`` stays ``None``."""
        return to_sglang_metrics(self.inner.get_stats())

    def close(self) -> None:
        """Close the inner backend once: idempotent whatever the inner backend does (SGLang
        closes on detach and again on a failed re-attach), and safe on a bridge whose
        construction failed before the inner backend existed."""
        lock = self.__dict__.get("_close_lock")
        if lock is None:  # construction failed early: nothing to close
            return
        with lock:
            if self._closed:
                return
            self._closed = True
            inner = self.__dict__.get("inner")
            endpoint = self.__dict__.get("_metrics_endpoint")
        if endpoint is not None:
            endpoint.close()
        close = getattr(inner, "close", None)
        if callable(close):
            close()
