"""pytest setup for ``tests/sglang``.

Two kinds of test live here:

* ``test_sglang_bridge_unit.py`` runs everywhere (the main venv has no SGLang): the bridge
  with our own host pools, and with a small fake SGLang module in a subprocess.
* ``test_sglang_bridge.py`` (and the other modules in ``collect_ignore``) run the bridge
  inside the **real** SGLang 0.5.23; ``test_sglang_backends.py`` runs each of our four
  backends there against real servers (``sglang_servers.py``). They are collected only
  when ``HICACHE_SGLANG_ENV=1`` (set by ``tox -e sglang``). Then this conftest installs
  the stand-ins for SGLang's GPU-only imports (``triton``, ``torchvision``; see
  ``sglang_standins.py``) and imports SGLang's storage and host-pool modules right here,
  so a broken SGLang environment fails the whole run with the import
  error -- never a skip.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REAL_SGLANG = os.environ.get("HICACHE_SGLANG_ENV") == "1"

#: Modules of SGLang 0.5.23 the real-SGLang tests need.
SGLANG_MODULES = (
    "sglang.srt.mem_cache.hicache_storage",
    "sglang.srt.mem_cache.storage.backend_factory",
    "sglang.srt.mem_cache.device_pool_info",
    "sglang.srt.mem_cache.pool_host.mha",
    "sglang.srt.mem_cache.pool_host.mla",
    "sglang.srt.observability.metrics_collector",
)

collect_ignore = (
    []
    if REAL_SGLANG
    else [
        "test_sglang_bridge.py",
        "test_sglang_profile.py",
        "test_sglang_file_interop.py",
        "test_sglang_merge.py",
        "test_sglang_conformance.py",
        "test_sglang_broken_file.py",
        "test_sglang_bridge_layouts.py",
        "test_sglang_mooncake_interop.py",
        "test_sglang_mooncake_layout.py",
        "test_sglang_backends.py",
        "test_sglang_result_types.py",
        "test_compat_matrix_small.py",
        "defects",
        "test_sglang_metric_names.py",
        "test_sglang_linker.py",
        "test_sglang_linker_wrapper.py",
        "test_sglang_linker_conformance.py",
    ]
)

if REAL_SGLANG:
    import importlib

    sys.path.insert(0, str(Path(__file__).parent))
    import sglang_standins

    sglang_standins.install()
    for _name in SGLANG_MODULES:
        try:
            importlib.import_module(_name)
        except Exception as e:
            raise RuntimeError(
                f"HICACHE_SGLANG_ENV=1 but SGLang's {_name} does not import: {type(e).__name__}: {e}. "
                "Install tests/sglang/requirements.txt and `pip install --no-deps sglang==0.5.23`."
            ) from e

    # The real servers of our redis / s3 / mooncake backends (session-scoped, started on
    # first use, stopped by PID).
    from sglang_servers import mooncake_cluster, moto_server, redis_server  # noqa: F401
