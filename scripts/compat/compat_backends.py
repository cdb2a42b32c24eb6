"""SGLang 0.5.23's HiCache storage backends, built the way SGLang builds them, for the
conformance suite (``hicache check compat_backends:NAME``; see ``scripts/compat_matrix.py``).

SGLang's cache controller (``HiCacheController.attach_storage_backend``) does, in order::

    backend = StorageBackendFactory.create_backend(name, storage_config, storage_host_pool)
    backend.register_mem_pool_host(storage_host_pool)
    ... register_mem_host_pool_v2(pool, name) for each pool, on_host_pools_registered()

so a built-in backend is constructed *with* the host pool (``hf3fs`` sizes its pages from
it, ``mooncake`` and ``aibrix`` read its geometry). The suite constructs a backend first and
registers pools afterwards, the way SGLang's ``dynamic`` loader does. Each class here is a
thin deferral: its constructor records the suite's storage config; the first
``register_mem_pool_host(pool)`` calls SGLang's own ``StorageBackendFactory.create_backend``
with SGLang's own ``HiCacheStorageConfig`` and that pool, then forwards the registration,
exactly as the controller does. Every later call is forwarded to SGLang's object unchanged.

Each class overrides exactly the methods SGLang's class overrides (so the suite infers the
same capabilities as for SGLang's class); the rest fall through to SGLang's base class, as
they would on SGLang's object.

Configuration (the suite's ``extra_config``):

* the backend's own SGLang extra config (``--hicache-storage-backend-extra-config``), passed
  through unchanged, on top of SGLang's defaults;
* ``compat_root``: a private directory for file-based backends;
* ``compat_namespace``: set per test namespace by ``hicache check --isolate
  'compat_namespace={namespace}'``; each backend isolates it through its own setting (a
  directory, an object prefix, Mooncake's ``extra_backend_tag``, ...), see ``ISOLATION``.

Classes are made on first attribute access (``compat_backends.mooncake``), so importing this
module imports no backend library.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

_TESTS_SGLANG = Path(__file__).resolve().parents[2] / "tests" / "sglang"
if str(_TESTS_SGLANG) not in sys.path:
    sys.path.insert(0, str(_TESTS_SGLANG))

import sglang_standins  # noqa: E402  (stands in for triton / torchvision, GPU-only)

sglang_standins.install()

from sglang.srt.mem_cache import hicache_storage as sgl  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

#: Keys of ``extra_config`` this module reads; never passed to SGLang's backend.
OWN_KEYS = ("compat_root", "compat_namespace", "compat_backend")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One row of the matrix: SGLang's factory name, the class it resolves to, and how a
    test namespace is isolated (``isolate(ns, root, extra) -> (extra_updates, env)``)."""

    factory_name: str
    module: str
    cls: str
    isolate: Callable[[str, Path, dict[str, Any]], tuple[dict[str, Any], dict[str, str]]]
    #: Whether SGLang's class can be constructed without a host pool (a ``clear()`` on a
    #: backend the suite built only to clean up).
    pool_optional: bool = True


def _dir(root: Path, ns: str) -> Path:
    d = root / ns
    d.mkdir(parents=True, exist_ok=True)
    return d


def _iso_file(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    # the environment variable would win over extra_config (hicache_storage.py, HiCacheFile)
    return {"file_storage_path": str(_dir(root, ns))}, {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": ""}


def _iso_none(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    return {}, {}


def _iso_mooncake(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    # MooncakeStore prefixes every key with extra_backend_tag + model name (config_prefix)
    return {"extra_backend_tag": ns}, {}


def _iso_seaweedfs(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    return {"prefix": ns}, {}


def _iso_nixl(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    # HiCacheNixl reads its directory from the environment only (hicache_nixl.py __init__)
    return {}, {"SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR": str(_dir(root, ns))}


def _iso_hf3fs(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    # HiCacheHF3FS.from_env_config: SGLang's single-machine defaults (numjobs 16, entries 8,
    # local metadata), with the file in this namespace's directory, and a 32 MiB file
    # instead of the default 1 TiB: the local metadata keeps a Python list of every free page
    # of every pool, and 1 TiB of the suite's small pages (tens to hundreds of bytes) is
    # billions of them (MemoryError in mini_3fs_metadata_server.py RankMetadata; 256 MiB still
    # held 6 GiB); real pages are megabytes. The suite writes a few MiB per namespace.
    d = _dir(root, ns)
    cfg = d / "hf3fs.json"
    if not cfg.exists():
        cfg.write_text(
            json.dumps(
                {"file_path_prefix": str(d / "hicache"), "file_size": 32 << 20, "numjobs": 16, "entries": 8}
            ),
            encoding="utf-8",
        )
    return {"use_mock_hf3fs_client": True}, {"SGLANG_HICACHE_HF3FS_CONFIG_PATH": str(cfg)}


def _iso_aibrix(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    # aibrix-kvcache pins its host buffers when its device is "cpu"; torch cannot pin memory
    # on a machine without an accelerator (on a GPU host, where SGLang runs, it can). The
    # library's own switch for tests turns pinning off and changes nothing else.
    import aibrix_kvcache.cache_manager as aibrix_cache_manager

    aibrix_cache_manager.TESTING_DISABLE_PIN_MEMORY = True
    d = _dir(root, ns)
    return {}, {
        "AIBRIX_KV_CACHE_OL_ROCKSDB_ROOT": str(d / "rocksdb"),
        "AIBRIX_KV_CACHE_OL_SHFS_ROOT": str(d / "shfs"),
    }


def _iso_ours(ns: str, root: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    # our bridge: the backend's own settings sit in backend_config; the default key scheme
    # takes a namespace
    cfg = dict(extra.get("backend_config") or {})
    cfg["namespace"] = ns
    return {"backend_config": cfg}, {}


_OURS = ("hicache_sdk.sglang", "HiCacheSDKStorage")

SPECS: dict[str, Spec] = {
    "file": Spec("file", "sglang.srt.mem_cache.hicache_storage", "HiCacheFile", _iso_file),
    "sim": Spec("sim", "sglang.srt.mem_cache.storage.sim_storage", "SimHiCacheStorage", _iso_none),
    "shm": Spec("shm", "sglang.srt.mem_cache.storage.shm", "HiCacheShm", _iso_none),
    "mooncake": Spec(
        "mooncake",
        "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store",
        "MooncakeStore",
        _iso_mooncake,
    ),
    "hf3fs": Spec(
        "hf3fs",
        "sglang.srt.mem_cache.storage.hf3fs.storage_hf3fs",
        "HiCacheHF3FS",
        _iso_hf3fs,
        pool_optional=False,
    ),
    "nixl": Spec("nixl", "sglang.srt.mem_cache.storage.nixl.hicache_nixl", "HiCacheNixl", _iso_nixl),
    "nixl_direct": Spec("nixl", "sglang.srt.mem_cache.storage.nixl.hicache_nixl", "HiCacheNixl", _iso_nixl),
    "seaweedfs": Spec(
        "seaweedfs",
        "sglang.srt.mem_cache.storage.seaweedfs.seaweedfs_store",
        "SeaweedFSStore",
        _iso_seaweedfs,
    ),
    "aibrix": Spec(
        "aibrix",
        "sglang.srt.mem_cache.storage.aibrix_kvcache.aibrix_kvcache_storage",
        "AibrixKVCacheStorage",
        _iso_aibrix,
        pool_optional=False,
    ),
    "ours_file": Spec("dynamic", *_OURS, _iso_ours),
    "ours_redis": Spec("dynamic", *_OURS, _iso_ours),
    "ours_s3": Spec("dynamic", *_OURS, _iso_ours),
    "ours_mooncake": Spec("dynamic", *_OURS, _iso_ours),
}

_env_lock = threading.Lock()


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set for the duration (``""`` removes a variable), then restored."""
    with _env_lock:
        saved = {k: os.environ.get(k) for k in env}
        try:
            for k, v in env.items():
                if v == "":
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            yield
        finally:
            for k, old in saved.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old


def sglang_storage_config(storage_config: Any, extra: dict[str, Any]) -> Any:
    """SGLang's own ``HiCacheStorageConfig`` from the suite's (the fields both share; the
    rest at SGLang's defaults), with ``extra`` as its ``extra_config``."""
    names = {f.name for f in dataclasses.fields(sgl.HiCacheStorageConfig)}
    defaults: dict[str, Any] = {
        "tp_rank": 0,
        "tp_size": 1,
        "pp_rank": 0,
        "pp_size": 1,
        "attn_cp_rank": 0,
        "attn_cp_size": 1,
        "is_mla_model": False,
        "enable_storage_metrics": False,
        "is_page_first_layout": False,
        "model_name": None,
    }
    shared = {n: getattr(storage_config, n) for n in names if hasattr(storage_config, n)}
    shared.pop("extra_config", None)
    return sgl.HiCacheStorageConfig(**{**defaults, **shared, "extra_config": extra})


class _Deferred(sgl.HiCacheStorage):
    """Records the storage config; SGLang's factory builds the real backend at the first
    ``register_mem_pool_host`` (or, for a backend that takes no host pool, at the first
    other call). See the module docs."""

    spec: Spec

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        ns = str(extra.get("compat_namespace") or "")
        root = Path(str(extra.get("compat_root") or "/tmp/hicache-compat"))
        passed = {k: v for k, v in extra.items() if k not in OWN_KEYS}
        env: dict[str, str] = {}
        if ns:
            updates, env = self.spec.isolate(ns, root, passed)
            passed.update(updates)
        self._sglang_config = sglang_storage_config(storage_config, passed)
        self._env = env
        self._inner: Any = None
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------------
    def _build(self, pool: Any) -> Any:
        with self._lock:
            if self._inner is None:
                with _environ(self._env):
                    self._inner = StorageBackendFactory.create_backend(
                        self.spec.factory_name, copy.copy(self._sglang_config), pool
                    )
            return self._inner

    @property
    def inner(self) -> Any:
        """SGLang's backend object (built without a host pool if none was registered yet,
        where SGLang's class allows it)."""
        if self._inner is None:
            if not self.spec.pool_optional:
                raise RuntimeError(
                    f"SGLang's {self.spec.cls} needs the host pool at construction "
                    "(StorageBackendFactory.create_backend); SGLang calls nothing before "
                    "register_mem_pool_host"
                )
            self._build(None)
        return self._inner

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr in ("spec", "inner"):
            raise AttributeError(attr)
        if self._inner is None and not self.spec.pool_optional:  # nothing to ask yet
            raise AttributeError(f"{attr}: SGLang's {self.spec.cls} is built at register_mem_pool_host")
        return getattr(self.inner, attr)

    def __repr__(self) -> str:
        return f"<SGLang {self.spec.cls} via StorageBackendFactory({self.spec.factory_name!r})>"

    # -- registration (the controller's order) ---------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self._build(mem_pool_host).register_mem_pool_host(mem_pool_host)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        self.inner.register_mem_host_pool_v2(host_pool, host_pool_name)

    def on_host_pools_registered(self) -> None:
        self.inner.on_host_pools_registered()

    def close(self) -> None:
        inner, self._inner = self._inner, None
        if inner is not None and hasattr(inner, "close"):
            inner.close()


#: Methods forwarded when SGLang's class overrides them (beyond registration and close).
_FORWARDED = (
    "get",
    "batch_get",
    "set",
    "batch_set",
    "exists",
    "batch_exists",
    "batch_get_v1",
    "batch_set_v1",
    "batch_exists_v2",
    "batch_get_v2",
    "batch_set_v2",
    "clear",
    "get_stats",
)


def _forward(name: str) -> Callable[..., Any]:
    def method(self: _Deferred, *args: Any, **kwargs: Any) -> Any:
        if name == "clear" and self._inner is None and not self.spec.pool_optional:
            return None  # nothing was ever built in this object: nothing of it to clear
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"_Deferred.{name}"
    return method


def _overridden(cls: type) -> list[str]:
    base = sgl.HiCacheStorage
    return [m for m in _FORWARDED if getattr(cls, m, None) is not getattr(base, m, None)]


_made: dict[str, type] = {}


def backend_class(row: str) -> type:
    """The deferral class for matrix row ``row`` (cached: one class per row)."""
    if row in _made:
        return _made[row]
    if row not in SPECS:
        raise AttributeError(f"no matrix backend {row!r}; known: {', '.join(SPECS)}")
    spec = SPECS[row]
    import importlib

    target = getattr(importlib.import_module(spec.module), spec.cls)
    attrs: dict[str, Any] = {"spec": spec, "__module__": __name__, "__qualname__": row}
    for m in _overridden(target):
        attrs[m] = _forward(m)
    cls = type(row, (_Deferred,), attrs)
    _made[row] = cls
    return cls


def __getattr__(name: str) -> Any:
    if name in SPECS:
        return backend_class(name)
    raise AttributeError(name)
