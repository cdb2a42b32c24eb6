"""One SGLang release, probed from inside its own environment (``tox -e sglang-X.Y.Z``'s
Python), for ``scripts/compat_matrix.py --releases``. Prints one JSON document::

    python scripts/compat/release_probe.py CONFIGS.json

``CONFIGS.json`` maps each backend name to the extra config ``hicache sglang-args NAME``
gives an operator. For each backend, with the installed release's own code:

* **load**: SGLang's ``StorageBackendFactory.create_backend("dynamic", config, None)``
  builds the bridge (the release's ``HiCacheStorageConfig``, ``enable_storage_metrics`` on
  where the release has it);
* **round trip**: that release's ``HiCacheController`` writes pages with its own
  ``_page_backup`` and reads them back with its own ``_page_transfer``, on the generic path
  (``_generic_page_set`` / ``_generic_page_get``) and the zero-copy one
  (``_page_set_zero_copy`` / ``_page_get_zero_copy``); the controller is built without its
  constructor (no devices, threads or process groups: ``object.__new__`` and the attributes
  those methods read), the host pool is the SDK's. Where the controller cannot be driven the
  cell says so and falls back to the release's ``batch_set`` / ``batch_get`` call shape;
* **metrics**: ``get_stats()`` is this release's ``StorageMetrics`` and the release's own
  ``StorageMetricsCollector`` (what ``--enable-metrics`` builds) logs it (it asserts
  ``isinstance``).

Also: whether the storage modules import under this torch at all (else the row is "not
run: torch"), and whether the release ships ``sglang/srt/mem_cache/unified_cache/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import json
import logging
import queue
import re
import sys
import threading
import time
import traceback
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sglang"))

#: Pages per round trip.
N = 3
#: What the controller's copy/transfer methods read from ``self``, beyond the backend and
#: the pool (a release that reads more is reported, not guessed).
_CONTROLLER_DEFAULTS: dict[str, Any] = {
    "host_mem_release_queue": queue.Queue,
    "prefetch_sync_queue": queue.Queue,
    "has_draft": lambda: False,
    "storage_backend_type": lambda: "dynamic",
    "enable_storage_metrics": lambda: False,
}


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class _Captured(logging.Handler):
    """The warnings and errors SGLang's controller logs (and swallows) while it runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        self.lines.append(record.getMessage() + (f" ({_err(exc)})" if exc else ""))


def _storage_config(sgl: Any, profile: Any, extra: dict[str, Any]) -> Any:
    values = {"tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1, "attn_cp_rank": 0, "attn_cp_size": 1}
    values |= {"is_mla_model": False, "enable_storage_metrics": True, "is_page_first_layout": False}
    values |= {"model_name": f"org/m-{uuid.uuid4().hex[:8]}", "extra_config": extra}
    return sgl.HiCacheStorageConfig(**{f: values[f] for f, _ in profile.config_fields if f in values})


def _keys(tag: str) -> list[str]:
    return [hashlib.sha256(f"{tag}-{uuid.uuid4().hex}-{i}".encode()).hexdigest() for i in range(N)]


def _page(pool: Any, start: int) -> bytes:
    import torch

    return bytes(pool.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())


def _fill_args(fn: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``fn`` from ``values``; ``KeyError`` naming a required
    parameter it has no value for."""
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name in values:
            out[name] = values[name]
        elif p.default is p.empty:
            raise KeyError(name)
    return out


class _Driver:
    """That release's ``HiCacheController``, only what its page backup / transfer reads."""

    def __init__(self, cc: Any, backend: Any, pool: Any, batch: int, path: str) -> None:
        self.cc = cc
        ctl = object.__new__(cc.HiCacheController)
        ctl.storage_backend = backend
        ctl.mem_pool_host = ctl.storage_host_pool = pool
        ctl.page_size = int(pool.page_size)
        ctl.storage_batch_size = batch
        if path == "v1":
            ctl.page_get_func, ctl.page_set_func = ctl._page_get_zero_copy, ctl._page_set_zero_copy
        else:
            ctl.page_get_func, ctl.page_set_func = ctl._generic_page_get, ctl._generic_page_set
        self.ctl = ctl
        self.set_defaults: list[str] = []

    def _run(self, fn: Any) -> tuple[Any, list[str]]:
        """``fn()``, giving the controller each attribute of :data:`_CONTROLLER_DEFAULTS` it
        turns out to read; the warnings it logged."""
        log = logging.getLogger(self.cc.__name__)
        handler = _Captured()
        log.addHandler(handler)
        try:
            for _ in range(len(_CONTROLLER_DEFAULTS) + 1):
                try:
                    return fn(), handler.lines
                except AttributeError as e:
                    m = re.search(r"object has no attribute '(\w+)'", str(e))
                    if not m or m.group(1) not in _CONTROLLER_DEFAULTS or hasattr(self.ctl, m.group(1)):
                        raise
                    setattr(self.ctl, m.group(1), _CONTROLLER_DEFAULTS[m.group(1)]())
                    self.set_defaults.append(m.group(1))
            raise RuntimeError("the controller kept asking for attributes")
        finally:
            log.removeHandler(handler)

    def backup(self, keys: list[str], host: Any) -> tuple[int, list[str]]:
        op = self.cc.StorageOperation(
            **_fill_args(
                self.cc.StorageOperation.__init__,
                {"host_indices": host, "token_ids": list(range(len(host))), "hash_value": keys},
            )
        )
        op.hash_value = keys
        _, warnings = self._run(lambda: self.ctl._page_backup(op))
        return int(op.completed_tokens), warnings

    def prefetch(self, keys: list[str], host: Any) -> tuple[int, list[str]]:
        op = self.cc.PrefetchOperation(
            **_fill_args(
                self.cc.PrefetchOperation.__init__,
                {"request_id": "probe", "host_indices": host, "token_ids": list(range(len(host)))},
            )
        )
        op.hash_value, op.host_indices = keys, host
        pages, warnings = self._run(lambda: self.ctl._page_transfer(op))
        # releases that count on the operation (``completed_tokens``), or return the pages
        # committed (0.5.23 hands the count to the scheduler thread instead)
        done = int(op.completed_tokens)
        return (done or int(pages) * int(self.ctl.page_size) if isinstance(pages, int) else done), warnings


def _round_trip(cc: Any, bridge: Any, pool: Any, batch: int) -> dict[str, Any]:
    """Pages out through the release's ``_page_backup`` and back through its
    ``_page_transfer``, on both paths; byte-exact or the reason."""
    ps = int(pool.page_size)
    out: dict[str, Any] = {"via": "controller", "paths": {}}
    for path in ("generic", "v1"):
        keys = _keys(path)
        src, dst = pool.alloc(N * ps), pool.alloc(N * ps)
        want = [_page(pool, int(src[i * ps])) for i in range(N)]
        try:
            drv = _Driver(cc, bridge, pool, batch, path)
            wrote, w1 = drv.backup(keys, src)
            read, w2 = drv.prefetch(keys, dst)
        except Exception as e:
            out["paths"][path] = {"ok": False, "error": _err(e), "trace": traceback.format_exc()[-1500:]}
            continue
        got = [_page(pool, int(dst[i * ps])) for i in range(N)]
        ok = wrote == read == N * ps and got == want
        res: dict[str, Any] = {"ok": ok, "backed_up_tokens": wrote, "prefetched_tokens": read}
        if drv.set_defaults:
            res["controller_attributes_set"] = drv.set_defaults
        if not ok:
            res["error"] = (
                f"backed up {wrote}, prefetched {read} of {N * ps} tokens; "
                f"{sum(g == w for g, w in zip(got, want))}/{N} pages byte-exact"
            )
            res["controller_log"] = (w1 + w2)[-5:]
        out["paths"][path] = res
    out["ok"] = all(p["ok"] for p in out["paths"].values())
    if not any("trace" not in p for p in out["paths"].values()):
        out.update(_call_shape(bridge, pool))
    return out


def _call_shape(bridge: Any, pool: Any) -> dict[str, Any]:
    """The fallback: the release's ``batch_set`` / ``batch_get`` call shape on the bridge,
    as its controller makes those calls (flat pages out, dummy flat pages in)."""
    ps = int(pool.page_size)
    keys = _keys("shape")
    src, dst = pool.alloc(N * ps), pool.alloc(N * ps)
    want = [_page(pool, int(src[i * ps])) for i in range(N)]
    try:
        assert bridge.batch_set(keys, [pool.get_data_page(int(src[i * ps])) for i in range(N)]) is True
        got = bridge.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
        for i, page in enumerate(got):
            pool.set_from_flat_data_page(int(dst[i * ps]), page)
        ok = [_page(pool, int(dst[i * ps])) for i in range(N)] == want
        return {"via": "factory + batch_set/batch_get call shape", "ok": ok}
    except Exception as e:
        return {"via": "factory + batch_set/batch_get call shape", "ok": False, "error": _err(e)}


class _Recorder:
    """A backend that stores pages in a dict and records every key the controller hands it."""

    def __init__(self) -> None:
        self.pages: dict[str, Any] = {}
        self.keys: list[str] = []
        self.calls: list[str] = []

    def batch_set(self, keys: list[str], values: list[Any], *a: Any, **kw: Any) -> bool:
        self.calls.append("batch_set")
        self.keys += list(keys)
        self.pages.update({k: v.clone() for k, v in zip(keys, values)})
        return True

    def batch_get(self, keys: list[str], targets: list[Any], *a: Any, **kw: Any) -> list[Any]:
        self.calls.append("batch_get")
        self.keys += list(keys)
        return [self.pages.get(k) for k in keys]

    def batch_exists(self, keys: list[str], *a: Any, **kw: Any) -> int:
        self.calls.append("batch_exists")
        n = 0
        while n < len(keys) and keys[n] in self.pages:
            n += 1
        return n

    def __getattr__(self, name: str) -> Any:
        def call(*a: Any, **kw: Any) -> Any:
            self.calls.append(name)
            return None

        return call


def observe_draft_keys(cc: Any, pool: Any, draft_pool: Any, batch: int) -> dict[str, Any]:
    """The key form this release's controller gives speculative-decoding draft pages on the
    generic path, observed: its own ``set_draft_kv_pool`` picks the draft I/O for a
    ``dynamic`` backend, then its ``_page_backup`` writes three pages to a recording
    backend. ``suffix``: what follows the page hash in the draft keys (``""``: none seen)."""
    if not hasattr(cc.HiCacheController, "set_draft_kv_pool"):
        return {"suffix": "", "how": "the controller has no draft KV path"}
    rec = _Recorder()
    drv = _Driver(cc, rec, pool, batch, "generic")
    ctl = drv.ctl
    ctl.enable_storage, ctl.storage_backend_type = True, "dynamic"
    ctl.storage_config = type("Config", (), {"should_split_heads": False, "extra_config": {}})()
    try:
        drv._run(lambda: ctl.set_draft_kv_pool(None, draft_pool))
        keys = _keys("draft")
        wrote, _ = drv.backup(keys, pool.alloc(N * int(pool.page_size)))
    except Exception as e:
        return {"suffix": None, "error": _err(e)}
    extra = [k for k in rec.keys if k not in keys]
    suffixes = sorted({k[len(h) :] for k in extra for h in keys if k.startswith(h)})
    return {
        "suffix": suffixes[0] if len(suffixes) == 1 else (suffixes or ""),
        "how": "set_draft_kv_pool + _page_backup over a recording backend",
        "backed_up_tokens": wrote,
        "calls": sorted(set(rec.calls)),
    }


class _Stop(Exception):
    """Raised by the device-pool stand-in when the controller's constructor, past its
    storage attach, reaches for the device (``device``, ``layer_num``, CUDA streams)."""


def _world_of_one() -> Any:
    """A world-size-1 gloo process group over an in-memory store (no sockets), for the
    releases whose attach asks the TP group its size; :func:`observe_registration_hooks`
    destroys it again."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD


class _SizedPool:
    """The SDK's host pool with the ``logical_size`` (tokens per rank) that newer
    controllers size their prefetch budget with."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.logical_size = pool, int(pool.size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


def observe_registration_hooks(sgl: Any, cc: Any, profile: Any, pool: Any) -> dict[str, Any]:
    """Which registration hooks this release's controller calls on the backend it attaches,
    observed: its own storage attach (``attach_storage_backend``, or the constructor of the
    releases that attach there) runs with SGLang's factory handing it a recording backend.
    No threads are started and no sync groups built (the instance's no-ops stand in for
    those helpers; the TP group is a world-size-1 gloo group over an in-memory store), and
    the constructor is stopped where it reaches the device. ``on_host_pools_registered``:
    whether the attach called that hook (the base controller's: a subclass that registers
    more pools after it, such as 0.5.23's hybrid controller, calls the hook itself)."""
    import torch.distributed as dist
    from sglang.srt.mem_cache.storage import StorageBackendFactory

    had_group = dist.is_initialized()
    rec, pool = _Recorder(), _SizedPool(pool)
    config = _storage_config(sgl, profile, {})
    real = StorageBackendFactory.__dict__["create_backend"]
    StorageBackendFactory.create_backend = staticmethod(lambda *a, **kw: rec)  # type: ignore[method-assign]
    ctl = object.__new__(cc.HiCacheController)
    ctl._generate_storage_config = lambda *a, **kw: config
    for name in ("_stop_storage_threads", "_start_storage_threads", "_destroy_sync_groups"):
        setattr(ctl, name, lambda *a, **kw: None)
    ctl._create_sync_groups = lambda *a, **kw: []
    try:
        if hasattr(cc.HiCacheController, "attach_storage_backend"):
            how = "attach_storage_backend"
            ctl.enable_storage, ctl.page_size = False, int(pool.page_size)
            ctl.mem_pool_host = ctl.storage_host_pool = pool
            ctl.mem_pool_device = type("DevicePool", (), {"size": 0})()
            ctl.storage_stop_event = threading.Event()
            for name in ("tp_group", "attn_tp_group", "attn_cp_group", "pp_group"):
                setattr(ctl, name, _world_of_one() if name == "tp_group" else None)
            ctl.host_memory_mode = "default"
            ctl.prefetch_hits_sync_groups, ctl.prefetch_completion_sync_groups = [], []
            # the releases that read the decode-context-parallel width from their parallel
            # context: one rank (nothing is published without a server)
            parallel = getattr(cc, "get_parallel", None)
            for _ in range(len(_CONTROLLER_DEFAULTS) + 1):
                rec.calls.clear()
                try:
                    with parallel().override(attn_dcp_size=1) if parallel else contextlib.nullcontext():
                        ctl.attach_storage_backend("dynamic", storage_backend_extra_config={})
                    break
                except AttributeError as e:  # an attribute the release reads (has_draft, ...)
                    m = re.search(r"object has no attribute '(\w+)'", str(e))
                    if not m or m.group(1) not in _CONTROLLER_DEFAULTS or hasattr(ctl, m.group(1)):
                        raise
                    setattr(ctl, m.group(1), _CONTROLLER_DEFAULTS[m.group(1)]())
        else:
            how = "HiCacheController.__init__ with storage_backend='dynamic'"

            class Device:
                size = 0  # the storage attach sizes its prefetch budget with it

                def __getattr__(self, name: str) -> Any:
                    raise _Stop(name)

            allocator = type("Allocator", (), {"get_kvcache": lambda self: Device()})()
            args = {
                "token_to_kv_pool_allocator": allocator,
                "mem_pool_host": pool,
                "page_size": int(pool.page_size),
                "tp_group": _world_of_one(),
                "load_cache_event": threading.Event(),
                "storage_backend": "dynamic",
                "storage_backend_extra_config": {},
            }
            try:
                ctl.__init__(**_fill_args(cc.HiCacheController.__init__, args))
            except _Stop as stop:
                how += f" (stopped at the device pool's .{stop})"
    except Exception as e:
        return {"on_host_pools_registered": None, "error": _err(e), "calls": rec.calls}
    finally:
        StorageBackendFactory.create_backend = real
        if dist.is_initialized() and not had_group:
            dist.destroy_process_group()
    if "register_mem_pool_host" not in rec.calls:
        return {"on_host_pools_registered": None, "error": "no host pool registered", "calls": rec.calls}
    return {
        "on_host_pools_registered": "on_host_pools_registered" in rec.calls,
        "how": f"{how}, over a recording backend",
        "calls": rec.calls,
    }


def _find(attr: str, modules: tuple[str, ...]) -> Any:
    for name in modules:
        try:
            found = getattr(importlib.import_module(name), attr, None)
        except Exception:
            continue
        if found is not None:
            return found
    return None


_MEM = ("sglang.srt.mem_cache.utils", "sglang.srt.mem_cache.radix_cache", "sglang.srt.mem_cache.events")


def _salted_by_insert(radix_key: Any) -> dict[str, Any]:
    """The releases that hash a node's pages inline, in ``HiRadixCache.insert`` (no
    ``compute_node_hash_values``): its own ``insert`` puts the same tokens into an empty
    tree (built without its constructor: the attributes that path reads, page size 16,
    storage on, the release's ``get_hash_str``), with and without ``extra_key``."""
    import functools
    import types

    hr = importlib.import_module("sglang.srt.mem_cache.hiradix_cache")
    rc = importlib.import_module("sglang.srt.mem_cache.radix_cache")
    get_hash_str = _find(
        "get_hash_str", ("sglang.srt.mem_cache.hicache_storage", "sglang.srt.mem_cache.utils")
    )
    if get_hash_str is None:
        return {"salted": None, "error": "no get_hash_str found"}
    tokens = list(range(1, 33))

    def hashes(**ns: Any) -> list[str]:
        root = rc.TreeNode()
        root.key, root.value = radix_key([], None), []
        tree = object.__new__(hr.HiRadixCache)
        tree.__dict__.update(
            root_node=root,
            page_size=16,
            is_eagle=False,
            enable_storage=True,
            evictable_size_=0,
            key_convert_fn=lambda t: t,
            key_match_fn=functools.partial(rc._key_match_paged, page_size=16),
            get_child_key_fn=functools.partial(rc.get_child_key, page_size=16),
            cache_controller=types.SimpleNamespace(get_hash_str=get_hash_str, write_policy="write_back"),
        )
        tree.insert(radix_key(list(tokens), **ns), list(range(len(tokens))))
        (node,) = root.children.values()
        return list(node.hash_value)

    try:
        plain = hashes()
        by = {"extra_key": hashes(extra_key="lora-x") != plain, "cache_salt": None}
    except Exception as e:
        return {"salted": None, "error": _err(e)}
    if len(plain) != 2:
        return {"salted": None, "error": f"{len(plain)} page hashes for 2 pages"}
    return {
        "salted": by["extra_key"],
        "by": by,
        "how": f"{hr.__name__}.HiRadixCache.insert with and without it",
    }


def observe_salted_seeding() -> dict[str, Any]:
    """Whether the release's storage keys of a request depend on its ``extra_key`` /
    ``cache_salt``, observed: its own ``compute_node_hash_values`` (what its radix caches
    call to key a node's pages in storage) on a node whose ``RadixKey`` carries them, and
    on the same tokens without."""
    from array import array

    compute = _find("compute_node_hash_values", _MEM)
    radix_key = _find("RadixKey", ("sglang.srt.mem_cache.radix_cache", "sglang.srt.mem_cache.radix_key"))
    if compute is None and radix_key is not None:
        return _salted_by_insert(radix_key)
    if compute is None or radix_key is None:
        return {"salted": None, "error": "no compute_node_hash_values / RadixKey found"}
    accepts = inspect.signature(radix_key).parameters
    tokens = list(range(1, 33))
    errors = []
    for wrap in (list, lambda t: array("q", t), lambda t: array("i", t)):
        try:

            def hashes(wrap: Any = wrap, **ns: Any) -> list[str]:
                key = radix_key(wrap(tokens), **{k: v for k, v in ns.items() if k in accepts})
                node = type("Node", (), {"parent": None, "key": key, "hash_value": None})()
                return list(compute(node, 16))

            plain = hashes()
            salted = {
                "extra_key": hashes(extra_key="lora-x") != plain,
                "cache_salt": hashes(cache_salt="tenant") != plain if "cache_salt" in accepts else None,
            }
        except Exception as e:
            errors.append(_err(e))
            continue
        return {
            "salted": bool(salted["extra_key"] or salted["cache_salt"]),
            "by": salted,
            "how": f"{compute.__module__}.compute_node_hash_values on RadixKey with and without them",
        }
    return {"salted": None, "error": "; ".join(errors)[-400:]}


def _metrics(profile: Any, bridge: Any, collector: Any) -> dict[str, Any]:
    try:
        cls = importlib.import_module(profile.storage_metrics_module).StorageMetrics
        stats = bridge.get_stats()
        if not isinstance(stats, cls):
            return {
                "ok": False,
                "error": f"get_stats() is {type(stats).__module__}.{type(stats).__qualname__}",
            }
        if collector is None:
            return {"ok": True, "collector": "none in this release", "class": profile.storage_metrics_module}
        collector.log_storage_metrics(stats)
        return {
            "ok": True,
            "collector": f"{type(collector).__module__}.StorageMetricsCollector logged it",
            "backup_pages": sum(stats.backup_pgs),
        }
    except Exception as e:
        return {"ok": False, "error": _err(e)}


def _cell(name: str, extra: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    import torch

    from hicache_sdk.hostpool.mha import MHAHostPool
    from hicache_sdk.sglang import HiCacheSDKStorage

    sgl, factory, cc, profile = env["sgl"], env["factory"], env["cc"], env["profile"]
    cell: dict[str, Any] = {}
    started = time.monotonic()
    try:
        bridge = factory.StorageBackendFactory.create_backend(
            "dynamic", _storage_config(sgl, profile, extra), None
        )
        assert type(bridge) is HiCacheSDKStorage, type(bridge)
        assert isinstance(bridge, sgl.HiCacheStorage)
        assert bridge.backend_name == name, bridge.backend_name
    except Exception as e:
        cell["load"] = {"ok": False, "error": _err(e)}
        return cell
    cell["load"] = {"ok": True}
    try:
        pool = MHAHostPool(64, 4, 2, 2, 8, layout="layer_first")
        raw = pool.kv_buffer.view(torch.uint8)
        raw.copy_(
            torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(7))
        )
        bridge.register_mem_pool_host(pool)
        if profile.calls_on_host_pools_registered:
            bridge.on_host_pools_registered()
        cell["round_trip"] = _round_trip(cc, bridge, pool, profile.storage_batch_size)
        cell["metrics"] = _metrics(profile, bridge, env["collector"])
    finally:
        bridge.close()
    cell["wall_s"] = round(time.monotonic() - started, 2)
    return cell


def probe(configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    import sglang_standins
    import torch

    from hicache_sdk.sglang import versions

    doc: dict[str, Any] = {
        "sglang": metadata.version("sglang"),
        "torch": torch.__version__,
        "profile": versions.CURRENT.sglang_version,
        "unsupported": versions.UNSUPPORTED,
    }
    spec = importlib.util.find_spec("sglang")
    pkg = Path(spec.origin).parent if spec and spec.origin else None
    doc["unified_cache_linker"] = bool(pkg and (pkg / "srt" / "mem_cache" / "unified_cache").is_dir())
    sglang_standins.install()
    profile = versions.CURRENT
    try:
        sgl = importlib.import_module("sglang.srt.mem_cache.hicache_storage")
        factory = importlib.import_module("sglang.srt.mem_cache.storage.backend_factory")
        cc = importlib.import_module("sglang.srt.managers.cache_controller")
        metrics_mod = importlib.import_module(profile.storage_metrics_module)
    except Exception as e:
        doc["import_error"] = _err(e)
        doc["import_trace"] = traceback.format_exc()[-2000:]
        return doc
    collector_cls = getattr(metrics_mod, "StorageMetricsCollector", None)
    collector = (
        collector_cls(labels={"storage_backend": "dynamic", "tp_rank": "0"}) if collector_cls else None
    )
    env = {"sgl": sgl, "factory": factory, "cc": cc, "profile": profile, "collector": collector}
    doc["backends"] = {name: _cell(name, extra, env) for name, extra in configs.items()}
    from hicache_sdk.hostpool.mha import MHAHostPool

    doc["observed"] = {
        "draft_key": observe_draft_keys(
            cc, MHAHostPool(64, 4, 2, 2, 8), MHAHostPool(64, 4, 1, 2, 8), profile.storage_batch_size
        )
    }
    try:
        doc["observed"]["registration_hooks"] = observe_registration_hooks(
            sgl, cc, profile, MHAHostPool(64, 4, 2, 2, 8)
        )
    except Exception as e:
        doc["observed"]["registration_hooks"] = {"on_host_pools_registered": None, "error": _err(e)}
    try:
        doc["observed"]["salted_seeding"] = observe_salted_seeding()
    except Exception as e:
        doc["observed"]["salted_seeding"] = {"salted": None, "error": _err(e)}
    return doc


def main(argv: list[str]) -> int:
    configs = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    logging.basicConfig(level=logging.ERROR)
    try:
        doc = probe(configs)
    except Exception as e:
        doc = {"error": _err(e), "trace": traceback.format_exc()[-2000:]}
    print("PROBE " + json.dumps(doc, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
