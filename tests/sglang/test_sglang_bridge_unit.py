"""The bridge without the real SGLang: our own host pools, config handling, and a small
fake SGLang (in a subprocess) for the base-class choice and the result conversion."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from hicache_sdk.errors import ConfigError
from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.memory import MemoryStorage, drop_store
from hicache_sdk.sglang import (
    BRIDGE_EXTRA_CONFIG,
    SGLANG_METRICS_MODULE,
    SGLANG_STORAGE_MODULE,
    HiCacheSDKStorage,
    sglang_storage_base,
)
from hicache_sdk.spec import (
    HiCacheStorage,
    HiCacheStorageConfig,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
    StorageMetrics,
)

SGLANG_LOADED = SGLANG_STORAGE_MODULE in sys.modules


def _keys(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha256(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def _bridge(store: str, **extra: Any) -> HiCacheSDKStorage:
    cfg = HiCacheStorageConfig(
        extra_config={**BRIDGE_EXTRA_CONFIG, "backend": "memory", "backend_config": {"store": store}, **extra}
    )
    return HiCacheSDKStorage(cfg, {})


@pytest.fixture
def store() -> Iterator[str]:
    name = f"bridge-{uuid.uuid4().hex}"
    yield name
    drop_store(name)


def test_base_class_follows_sglang_presence() -> None:
    assert issubclass(HiCacheSDKStorage, HiCacheStorage)
    if SGLANG_LOADED:
        assert sglang_storage_base() is sys.modules[SGLANG_STORAGE_MODULE].HiCacheStorage
    else:
        assert sglang_storage_base() is None


def test_roundtrip_through_bridge_on_our_pool(store: str) -> None:
    pool = MHAHostPool(32, 4, 2, 2, 8, layout="layer_first")
    bridge = _bridge(store)
    assert isinstance(bridge.inner, MemoryStorage)
    bridge.register_mem_pool_host(pool)
    bridge.register_mem_host_pool_v2(pool, PoolName.KV)
    bridge.on_host_pools_registered()
    assert bridge.registered_pools == {PoolName.KV: pool}
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(5)))
    src = pool.alloc(8)
    keys = _keys(2)
    want = [pool.get_data_page(int(src[i]), flat=True).view(torch.uint8).clone() for i in (0, 4)]
    assert bridge.batch_set_v1(keys, src) == [True, True]
    assert bridge.batch_exists(keys) == 2 and bridge.exists(keys[1])
    dst = pool.alloc(8)
    assert bridge.batch_get_v1(keys, dst) == [True, True]
    for i, s in enumerate((int(dst[0]), int(dst[4]))):
        assert torch.equal(pool.get_data_page(s, flat=True).view(torch.uint8), want[i])
    got = bridge.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
    assert isinstance(got, list) and torch.equal(got[1].view(torch.uint8), want[1])
    result = bridge.batch_exists_v2(keys, [])
    # SGLang's class when SGLang is loaded (the real-SGLang run) and has one (0.5.10 on), else ours.
    sglang_cls = getattr(sys.modules.get(SGLANG_STORAGE_MODULE), "PoolTransferResult", None)
    want_cls = sglang_cls or PoolTransferResult
    assert type(result) is want_cls and result.kv_hit_pages == 2
    reads = bridge.batch_get_v2([PoolTransfer(name=PoolName.KV, host_indices=dst, keys=keys)])
    assert reads == {"kv": [True, True]}
    stats = bridge.get_stats()
    # SGLang's StorageMetrics when SGLang is loaded, else ours (the main venv has no SGLang).
    want_stats = sys.modules[SGLANG_METRICS_MODULE].StorageMetrics if SGLANG_LOADED else StorageMetrics
    assert type(stats) is want_stats and sum(stats.prefetch_pgs) >= 4
    bridge.clear()
    assert bridge.batch_exists(keys) == 0
    bridge.close()


def test_inner_config_drops_loader_keys_and_merges(store: str) -> None:
    bridge = HiCacheSDKStorage(
        HiCacheStorageConfig(
            extra_config={
                **BRIDGE_EXTRA_CONFIG,
                "backend": "memory",
                "capacity_bytes": 10,
                "backend_config": {"store": store, "capacity_bytes": 20},
            }
        ),
        {"capacity_bytes": 30},
    )
    inner_extra = bridge.inner.storage_config.extra_config
    assert inner_extra == {"capacity_bytes": 30, "store": store}  # no loader keys left
    assert bridge.inner.config.capacity_bytes == 30  # kwargs > backend_config > top level
    assert bridge.inner.config.store == store
    # The caller's config object is not mutated.
    assert bridge.storage_config.extra_config["backend"] == "memory"


def test_duck_typed_extras_reach_the_inner_backend(store: str) -> None:
    bridge = _bridge(store)
    assert bridge.scheme is bridge.inner.scheme  # not declared by the bridge itself
    with pytest.raises(AttributeError):
        _ = bridge.no_such_attribute
    assert "memory" in repr(bridge)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (None, "extra_config must be a mapping"),
        ({**BRIDGE_EXTRA_CONFIG}, r"extra_config\['backend'\].*'memory'"),
        ({**BRIDGE_EXTRA_CONFIG, "backend": ""}, r"extra_config\['backend'\]"),
        ({**BRIDGE_EXTRA_CONFIG, "backend": "memory", "backend_config": [1]}, "backend_config"),
    ],
)
def test_bad_extra_config_raises_value_error(extra: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HiCacheSDKStorage(HiCacheStorageConfig(extra_config=extra), {})


def test_bad_kwargs_raise_value_error(store: str) -> None:
    cfg = HiCacheStorageConfig(extra_config={"backend": "memory", "backend_config": {"store": store}})
    with pytest.raises(ValueError, match="kwargs"):
        HiCacheSDKStorage(cfg, [("a", 1)])  # type: ignore[arg-type]


def test_backend_config_errors_propagate(store: str) -> None:
    with pytest.raises(ConfigError, match="no_such_key"):
        _bridge(store, backend_config={"store": store, "no_such_key": 1})


def test_the_bridge_applies_no_injection_of_its_own(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's injector variables are SGLang's (its factory wraps the bridge): the SDK does
    not read them, and no process-wide flag is set to decide it."""
    monkeypatch.setenv("SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE", "1.0")
    b = _bridge(store)
    try:
        assert b.inner.transport.exists(["k"]) == [None]
        assert b.inner.metrics.errors() == {}  # no injected failure below the bridge
    finally:
        b.close()


_FAKE_STORAGE = """
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import List, Optional

class HiCacheStorage(ABC):
    @abstractmethod
    def get(self, key, target_location=None, target_sizes=None): ...
    @abstractmethod
    def exists(self, key): ...

@dataclass
class PoolTransferResult:
    kv_hit_pages: int
    extra_pool_hit_pages: dict
    restorable_prefix_pages: Optional[List[int]] = None
"""

_FAKE_METRICS = """
from dataclasses import dataclass, field
from typing import List

@dataclass
class StorageMetrics:
    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)
"""

_CHILD = """
import sys
import hicache_sdk.sglang as bridge_mod
import sglang.srt.mem_cache.hicache_storage as sgl
import sglang.srt.observability.metrics_collector as mc
from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig

cls = bridge_mod.HiCacheSDKStorage
assert bridge_mod.sglang_storage_base() is sgl.HiCacheStorage
assert issubclass(cls, sgl.HiCacheStorage)
cfg = HiCacheStorageConfig(extra_config={**bridge_mod.BRIDGE_EXTRA_CONFIG, "backend": "memory"})
b = cls(cfg, {})
pool = MHAHostPool(16, 4, 1, 1, 4)
b.register_mem_pool_host(pool)
assert b.batch_set_v1(["ab" * 32], pool.alloc(4)) == [True]
r = b.batch_exists_v2(["ab" * 32], [])
assert type(r) is sgl.PoolTransferResult and r.kv_hit_pages == 1, r
s = b.get_stats()
assert type(s) is mc.StorageMetrics and s.backup_pgs == [1], s
print("CHILD-OK")
"""


def _fake_sglang(root: Path, storage_source: str, metrics_source: str = _FAKE_METRICS) -> None:
    """A fake SGLang 0.5.23 (its ``dist-info`` too: the SDK follows the release it finds
    there, ahead of any real SGLang on the path)."""
    info = root / "sglang-0.5.23.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    pkg = root / "sglang"
    for sub in ("", "srt", "srt/mem_cache", "srt/observability"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "srt/mem_cache/hicache_storage.py").write_text(storage_source)
    (pkg / "srt/observability/metrics_collector.py").write_text(metrics_source)


def _run_child(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    env.pop("HICACHE_SGLANG_ENV", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


def test_installed_sglang_is_imported_and_subclassed(tmp_path: Path) -> None:
    """SGLang installed but not yet imported: the bridge imports it and subclasses both ABCs;
    v2 results and stats come back as SGLang's classes."""
    _fake_sglang(tmp_path, _FAKE_STORAGE)
    proc = _run_child(tmp_path, _CHILD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CHILD-OK" in proc.stdout


def test_broken_sglang_falls_back_to_our_base(tmp_path: Path) -> None:
    _fake_sglang(tmp_path, "import no_such_gpu_module\n")
    code = """
    import hicache_sdk.sglang as b
    from hicache_sdk.spec import HiCacheStorage
    assert b.sglang_storage_base() is None
    assert b.HiCacheSDKStorage.__mro__[1] is HiCacheStorage
    print("FALLBACK-OK")
    """
    proc = _run_child(tmp_path, code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FALLBACK-OK" in proc.stdout
    assert "does not import" in proc.stderr and "no_such_gpu_module" in proc.stderr


_STATS_CHILD = """
import sys
import hicache_sdk.sglang as bridge_mod
from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig, StorageMetrics

METRICS = "sglang.srt.observability.metrics_collector"
assert METRICS not in sys.modules  # SGLang's storage module does not import it
cfg = HiCacheStorageConfig(extra_config={**bridge_mod.BRIDGE_EXTRA_CONFIG, "backend": "memory"})
b = bridge_mod.HiCacheSDKStorage(cfg, {})
pool = MHAHostPool(16, 4, 1, 1, 4)
b.register_mem_pool_host(pool)
assert b.batch_set_v1(["cd" * 32], pool.alloc(4)) == [True]
s = b.get_stats()
assert s.backup_pgs == [1], s
if "broken" in sys.argv:
    assert type(s) is StorageMetrics, type(s)
    assert type(b.get_stats()) is StorageMetrics
else:
    assert type(s) is sys.modules[METRICS].StorageMetrics, type(s)
print("STATS-OK")
"""


def test_sglang_metrics_module_is_imported_on_first_get_stats(tmp_path: Path) -> None:
    """SGLang loaded, its metrics module not yet: ``get_stats`` imports it and returns
    SGLang's ``StorageMetrics`` (its logger asserts ``isinstance``)."""
    _fake_sglang(tmp_path, _FAKE_STORAGE)
    proc = _run_child(tmp_path, _STATS_CHILD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "STATS-OK" in proc.stdout


def test_broken_sglang_metrics_module_keeps_our_stats(tmp_path: Path) -> None:
    """A metrics module that does not import: our ``StorageMetrics``, one warning, no error."""
    _fake_sglang(tmp_path, _FAKE_STORAGE, metrics_source="import no_such_gpu_module\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("HICACHE_SGLANG_ENV", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_STATS_CHILD), "broken"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "STATS-OK" in proc.stdout
    assert proc.stderr.count("does not import") == 1 and "no_such_gpu_module" in proc.stderr
