"""SGLang's own result types from the bridge in a fresh process with the REAL SGLang 0.5.23
(collected only in ``tox -e sglang``): the bridge is built by SGLang's factory before SGLang's
metrics module is imported by anyone (SGLang's storage, factory and host-pool modules do not
import it), and ``get_stats`` still returns SGLang's ``StorageMetrics`` -- the object SGLang's
``log_storage_metrics`` asserts ``isinstance`` on and sets ``prefetch_stats`` on -- while
``batch_exists_v2`` returns SGLang's ``PoolTransferResult``. (The in-process tests in
``test_sglang_backends.py`` cannot show this: the conftest imports the metrics module.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = """
import sys, tempfile
sys.path.insert(0, {here!r})
import sglang_standins
sglang_standins.install()
METRICS = "sglang.srt.observability.metrics_collector"
import hicache_sdk.sglang as bridge_mod
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang_pools import PAGE_SIZE, mha_pool
assert METRICS not in sys.modules, "precondition: nobody imported SGLang's metrics module"

pool = mha_pool("page_first")
extra = {{**bridge_mod.BRIDGE_EXTRA_CONFIG, "backend": "file",
         "backend_config": {{"root": tempfile.mkdtemp(prefix="hicache-types-")}}}}
cfg = sgl.HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
    attn_cp_size=1, is_mla_model=False, enable_storage_metrics=True, is_page_first_layout=True,
    model_name="types-model", extra_config=extra)
b = StorageBackendFactory.create_backend("dynamic", cfg, pool)
b.register_mem_pool_host(pool)
b.register_mem_host_pool_v2(pool, sgl.PoolName.KV)
b.on_host_pools_registered()
keys = ["ab" * 32, "cd" * 32]
assert b.batch_set_v1(keys, pool.alloc(2 * PAGE_SIZE)) == [True, True]
r = b.batch_exists_v2(keys, [])
assert type(r) is sgl.PoolTransferResult and r.kv_hit_pages == 2, r
stats = b.get_stats()
from sglang.srt.observability.metrics_collector import StorageMetrics
assert type(stats) is StorageMetrics, type(stats)
assert stats.backup_pgs == [2], stats
stats.prefetch_stats = {{}}  # what SGLang's unified_radix_cache does before logging
assert b.get_stats().backup_pgs == []  # drained
b.close()
print("TYPES-OK")
"""


def test_sglang_types_without_sglang_metrics_module_preloaded() -> None:
    env = {**os.environ, "HICACHE_SGLANG_ENV": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD.format(here=str(HERE)))],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TYPES-OK" in proc.stdout
