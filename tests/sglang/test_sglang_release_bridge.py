"""Our four backends through the installed SGLang release's own ``dynamic`` loader, on every
release (collected only with ``HICACHE_SGLANG_ENV=1``; ``tox -e sglang`` and each
``tox -e sglang-X.Y.Z``).

For each backend: SGLang's ``StorageBackendFactory`` builds the bridge from the config that
``hicache sglang-args`` prints, pages written through the generic path (the flat pages
SGLang's controller moves) and the zero-copy v1 path read back byte-exact into other
slots, and ``get_stats`` returns this release's ``StorageMetrics`` class (SGLang's metrics
logger asserts ``isinstance``: with ``--enable-metrics`` a wrong class fails the server).
The host pool is the SDK's, whose pages SGLang's controller handles the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import io
import json
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang_servers import BACKEND_NAMES, backend_config

from hicache_sdk.cli import main as hicache_main
from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.sglang import HiCacheSDKStorage
from hicache_sdk.sglang.versions import CURRENT

N = 3


def _keys(salt: str) -> list[str]:
    return [hashlib.sha256(f"{salt}-{uuid.uuid4().hex}-{i}".encode()).hexdigest() for i in range(N)]


def _storage_config(extra: dict[str, Any]) -> Any:
    """This release's ``HiCacheStorageConfig`` (its fields differ between releases)."""
    values = {"tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1, "attn_cp_rank": 0, "attn_cp_size": 1}
    values |= {"is_mla_model": False, "enable_storage_metrics": True, "is_page_first_layout": False}
    values |= {"model_name": f"org/m-{uuid.uuid4().hex[:8]}", "extra_config": extra}
    return sgl.HiCacheStorageConfig(**{f: values[f] for f, _ in CURRENT.config_fields if f in values})


def _extra(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    out = io.StringIO()
    config = backend_config(name, request, tmp_path)
    with contextlib.redirect_stdout(out):
        rc = hicache_main(
            ["sglang-args", name, "--config", json.dumps(config), "--secret-file", str(tmp_path / "s")]
        )
    assert rc == 0
    argv = shlex.split(out.getvalue().strip())
    assert argv[1] == "dynamic"
    value = argv[3]
    text = Path(value[1:]).read_text(encoding="utf-8") if value.startswith("@") else value
    extra: dict[str, Any] = json.loads(text)
    return extra


def _page(pool: MHAHostPool, start: int) -> bytes:
    return bytes(pool.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_backend_loads_round_trips_and_reports_this_releases_metrics(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    bridge = StorageBackendFactory.create_backend(
        "dynamic", _storage_config(_extra(name, request, tmp_path)), None
    )
    try:
        assert type(bridge) is HiCacheSDKStorage and bridge.backend_name == name
        assert isinstance(bridge, sgl.HiCacheStorage)
        pool = MHAHostPool(64, 4, 2, 2, 8, layout="layer_first")
        raw = pool.kv_buffer.view(torch.uint8)
        raw.copy_(
            torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
        )
        bridge.register_mem_pool_host(pool)
        if CURRENT.calls_on_host_pools_registered:
            bridge.on_host_pools_registered()
        ps = pool.page_size

        # the generic path: flat pages out, flat pages back
        keys = _keys("generic")
        src = pool.alloc(N * ps)
        want = [_page(pool, int(src[i * ps])) for i in range(N)]
        assert bridge.batch_set(keys, [pool.get_data_page(int(src[i * ps])) for i in range(N)]) is True
        assert bridge.batch_exists(keys) == N
        got = bridge.batch_get(keys, [pool.get_dummy_flat_data_page() for _ in keys])
        assert isinstance(got, list) and all(g is not None for g in got)
        dst = pool.alloc(N * ps)
        for i, page in enumerate(got):
            pool.set_from_flat_data_page(int(dst[i * ps]), page)
        assert [_page(pool, int(dst[i * ps])) for i in range(N)] == want

        # the zero-copy v1 path
        keys = _keys("v1")
        src = pool.alloc(N * ps)
        want = [_page(pool, int(src[i * ps])) for i in range(N)]
        assert bridge.batch_set_v1(keys, src) == [True] * N
        dst = pool.alloc(N * ps)
        assert bridge.batch_get_v1(keys, dst) == [True] * N
        assert [_page(pool, int(dst[i * ps])) for i in range(N)] == want

        metrics_cls = importlib.import_module(CURRENT.storage_metrics_module).StorageMetrics
        stats = bridge.get_stats()
        assert isinstance(stats, metrics_cls), (type(stats), CURRENT.storage_metrics_module)
        assert sum(stats.backup_pgs) >= 2 * N and sum(stats.prefetch_pgs) >= 2 * N
    finally:
        bridge.close()


def _probe() -> Any:
    spec = importlib.util.spec_from_file_location(
        "release_probe", Path(__file__).resolve().parents[2] / "scripts" / "compat" / "release_probe.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_file_backend_round_trips_through_this_releases_controller(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The matrix's probe (``scripts/compat/release_probe.py``): this release's own
    ``HiCacheController._page_backup`` / ``_page_transfer`` move pages through the bridge on
    both paths, byte-exact."""
    from sglang.srt.managers import cache_controller as cc
    from sglang.srt.mem_cache.storage import backend_factory

    probe = _probe()
    env = {"sgl": sgl, "factory": backend_factory, "cc": cc, "profile": CURRENT, "collector": None}
    cell = probe._cell("file", _extra("file", request, tmp_path), env)
    assert cell["load"] == {"ok": True}
    rt = cell["round_trip"]
    assert rt["via"] == "controller" and rt["ok"], rt
    for path in ("generic", "v1"):
        assert rt["paths"][path]["backed_up_tokens"] == rt["paths"][path]["prefetched_tokens"] == probe.N * 4
    assert cell["metrics"]["ok"], cell["metrics"]


def test_draft_key_form_observed_is_the_profiles() -> None:
    """The key this release's controller gives a draft page, observed over a recording
    backend, is the profile's ``draft_key_suffix``."""
    from sglang.srt.managers import cache_controller as cc

    probe = _probe()
    seen = probe.observe_draft_keys(
        cc, MHAHostPool(64, 4, 2, 2, 8), MHAHostPool(64, 4, 1, 2, 8), CURRENT.storage_batch_size
    )
    assert "error" not in seen, seen
    assert seen["suffix"] == CURRENT.draft_key_suffix, seen


def test_registration_hooks_observed_are_the_profiles() -> None:
    """Whether this release's controller calls ``on_host_pools_registered`` on the backend
    it attaches, observed over a recording backend (its own storage attach, the factory
    handing it the recorder), is the profile's ``calls_on_host_pools_registered``."""
    from sglang.srt.managers import cache_controller as cc

    seen = _probe().observe_registration_hooks(sgl, cc, CURRENT, MHAHostPool(64, 4, 2, 2, 8))
    assert "error" not in seen, seen
    assert seen["calls"][0] == "register_mem_pool_host", seen
    assert seen["on_host_pools_registered"] is CURRENT.calls_on_host_pools_registered, seen
