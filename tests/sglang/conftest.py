"""pytest setup for ``tests/sglang``.

Two kinds of test live here:

* ``test_sglang_bridge_unit.py`` runs everywhere (the main venv has no SGLang): the bridge
  with our own host pools, and with a small fake SGLang module in a subprocess.
* ``test_sglang_bridge.py`` (and the other modules in ``collect_ignore``) run the bridge
  inside the **real** SGLang (0.5.23 under ``tox -e sglang``; an older release under
  ``tox -e sglang-X.Y.Z``, where the modules written against 0.5.23's internals skip with
  the reason and the rest follow the installed release's profile); ``test_sglang_backends.py`` runs each of our four
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

#: The releases whose host pools and controller internals the real-SGLang tests model
#: (the modules outside :data:`ANY_RELEASE` build SGLang 0.5.23's host pools and drive its
#: controller). Under any other release those modules skip, each with the reason.
MODELLED_RELEASES = frozenset({"0.5.23"})
#: The modules that run under every release (they read the installed release's profile).
ANY_RELEASE = frozenset({"test_sglang_profile.py", "test_sglang_release_bridge.py", "test_sglang_releases.py",
                         "test_sglang_bridge_unit.py", "test_gen_sglang_profiles.py"})  # fmt: skip
#: SGLang modules every release has (with its metrics module, the profile's).
RELEASE_MODULES = ("sglang.srt.mem_cache.hicache_storage", "sglang.srt.mem_cache.storage.backend_factory")

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
        "test_sglang_linker_dsa.py",
        "test_sglang_linker_wrapper.py",
        "test_sglang_linker_conformance.py",
        "test_sglang_linker_bench.py",
        "test_sglang_release_bridge.py",
    ]
)

if REAL_SGLANG:
    import importlib

    import pytest

    from hicache_sdk.sglang.versions import CURRENT, UNSUPPORTED

    sys.path.insert(0, str(Path(__file__).parent))
    import sglang_standins

    sglang_standins.install()
    if UNSUPPORTED is not None:
        raise RuntimeError(f"HICACHE_SGLANG_ENV=1: {UNSUPPORTED}")
    #: Whether this release's host pools and controller are the ones the tests model.
    MODELLED = CURRENT.sglang_version in MODELLED_RELEASES
    modules = SGLANG_MODULES if MODELLED else (*RELEASE_MODULES, CURRENT.storage_metrics_module)
    for _name in modules:
        try:
            importlib.import_module(_name)
        except Exception as e:
            raise RuntimeError(
                f"HICACHE_SGLANG_ENV=1 but SGLang {CURRENT.wheel_version}'s {_name} does not import: "
                f"{type(e).__name__}: {e}. Install tests/sglang/requirements.txt and "
                f"`pip install --no-deps sglang=={CURRENT.wheel_version}`."
            ) from e

    # The real servers of our redis / s3 / mooncake backends (session-scoped, started on
    # first use, stopped by PID).
    from sglang_servers import mooncake_cluster, moto_server, redis_server  # noqa: F401

    class _NotModelled(pytest.File):
        """A test module written against another release's internals: one skipped item."""

        def collect(self) -> list[pytest.Item]:
            return [_NotModelledItem.from_parent(self, name="release_not_modelled")]

    class _NotModelledItem(pytest.Item):
        def runtest(self) -> None:
            pytest.skip(
                f"test model for SGLang {CURRENT.sglang_version} not built: this module drives "
                f"SGLang {', '.join(sorted(MODELLED_RELEASES))}'s host pools and controller internals"
            )

        def reportinfo(self) -> tuple[Path, int, str]:
            return self.path, 0, self.name

    def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if MODELLED or module_path.name in ANY_RELEASE:
            return None
        return _NotModelled.from_parent(parent, path=module_path)
