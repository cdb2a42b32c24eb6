"""The SDK follows the installed SGLang release: profile choice, the metrics class's module,
draft keys, the layout check at registration, and the one message outside the range.

Runs everywhere: the installed release is a small fake SGLang (with its ``dist-info``, so
``importlib.metadata`` finds it) in a subprocess, or a profile swapped in with
``monkeypatch``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
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

from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.memory import drop_store
from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG, HiCacheSDKStorage, versions
from hicache_sdk.sglang.profiles import PROFILES
from hicache_sdk.spec import HiCacheStorageConfig, PoolName

HASH = hashlib.sha256(b"page").hexdigest()


def test_one_profile_per_release_line_oldest_first() -> None:
    lines = [p.sglang_version for p in PROFILES]
    assert lines == [f"0.5.{n}" for n in range(3, 24)]
    assert versions.OLDEST.sglang_version == "0.5.3" and versions.NEWEST.sglang_version == "0.5.23"
    assert versions.SUPPORTED_RANGE == "0.5.3 to 0.5.23"
    assert all(p.wheel_version.startswith(p.sglang_version) for p in PROFILES)


@pytest.mark.parametrize(
    ("version", "line"),
    [("0.5.9", "0.5.9"), ("0.5.3.post3", "0.5.3"), ("0.5.23", "0.5.23"), ("0.5.10rc1", "0.5.10")],
)
def test_profile_for_takes_the_release_line(version: str, line: str) -> None:
    assert versions.profile_for(version).sglang_version == line


@pytest.mark.parametrize("version", ["0.5.2", "0.4.9.post6", "0.6.0", "0.5.24"])
def test_outside_the_range_names_version_and_range(version: str) -> None:
    with pytest.raises(
        versions.UnsupportedSGLangError, match=rf"SGLang {version} is installed.*0\.5\.3 to 0\.5\.23"
    ):
        versions.profile_for(version)


def test_not_a_version_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not an SGLang version: 'main'"):
        versions.profile_for("main")


def test_facts_that_moved_between_releases() -> None:
    by = {p.sglang_version: p for p in PROFILES}
    assert by["0.5.9"].storage_metrics_module == "sglang.srt.metrics.collector"
    assert by["0.5.23"].storage_metrics_module == "sglang.srt.observability.metrics_collector"
    assert by["0.5.14"].draft_key_suffix == ".draft" and by["0.5.9"].draft_key_suffix == ""
    assert by["0.5.23"].calls_on_host_pools_registered and not by["0.5.9"].calls_on_host_pools_registered
    assert by["0.5.3"].pool_names == () and "draft" in by["0.5.23"].pool_names
    linker = [p.sglang_version for p in PROFILES if p.has_unified_cache_linker]
    assert linker == [f"0.5.{n}" for n in range(17, 24)]
    # observed by running each release (compat_matrix.py --releases, gen_sglang_profiles.py
    # --observed): the draft key everywhere, salted seeding from 0.5.6 (its
    # compute_node_hash_values); the hook SGLang calls is still read from the source
    assert by["0.5.9"].unobserved == ("calls_on_host_pools_registered",)
    assert by["0.5.3"].unobserved == ("calls_on_host_pools_registered", "salted_seeding")
    assert all("calls_on_host_pools_registered" in p.unobserved for p in PROFILES)


# -- draft keys ------------------------------------------------------------------------------
def _pool() -> MHAHostPool:
    return MHAHostPool(32, 4, 2, 2, 8, layout="layer_first")


def _bridge(store: str) -> HiCacheSDKStorage:
    cfg = HiCacheStorageConfig(
        model_name="m",
        extra_config={**BRIDGE_EXTRA_CONFIG, "backend": "memory", "backend_config": {"store": store}},
    )
    return HiCacheSDKStorage(cfg, {})


@pytest.fixture
def store() -> Iterator[str]:
    name = f"releases-{uuid.uuid4().hex}"
    yield name
    drop_store(name)


def _fill(pool: MHAHostPool, seed: int) -> None:
    raw = pool.kv_buffer.view(torch.uint8)
    raw.copy_(
        torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    )


@pytest.mark.parametrize("line", ["0.5.14", "0.5.17"])
def test_draft_key_round_trips_beside_its_page(
    monkeypatch: pytest.MonkeyPatch, store: str, line: str
) -> None:
    """SGLang 0.5.14 / 0.5.17 write draft pages on the generic path as ``<hash>.draft``
    (``batch_set``): they are stored, read back and distinct from the target page."""
    monkeypatch.setattr(versions, "CURRENT", versions.profile_for(line))
    pool = _pool()
    bridge = _bridge(store)
    bridge.register_mem_pool_host(pool)
    _fill(pool, 1)
    src = pool.alloc(8)
    target, draft = (pool.get_data_page(int(src[i]), flat=True).clone() for i in (0, 4))
    assert bridge.batch_set([HASH, HASH + ".draft"], [target, draft]) is True
    assert bridge.batch_exists([HASH, HASH + ".draft"]) == 2
    got = bridge.batch_get([HASH + ".draft", HASH], [pool.get_dummy_flat_data_page() for _ in range(2)])
    assert isinstance(got, list)
    assert torch.equal(got[0].view(torch.uint8), draft.view(torch.uint8))
    assert torch.equal(got[1].view(torch.uint8), target.view(torch.uint8))
    assert not torch.equal(draft.view(torch.uint8), target.view(torch.uint8))
    bridge.close()


def test_draft_key_is_refused_where_the_release_produces_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "CURRENT", versions.profile_for("0.5.9"))
    from hicache_sdk.keys.names import check_page_key

    with pytest.raises(ValueError, match=r"64 lowercase hex chars, got '[0-9a-f]{64}\.draft'"):
        check_page_key(HASH + ".draft", versions.CURRENT.draft_key_suffix)
    with pytest.raises(ValueError, match=r"optionally followed by '\.draft'"):
        check_page_key("zz.draft", ".draft")
    assert check_page_key(HASH + ".draft", ".draft") == HASH + ".draft"


# -- the layout check ------------------------------------------------------------------------
def _unservable_pool() -> Any:
    pool = _pool()
    pool.layout = "page_unified"
    return pool


def test_layout_checked_at_registration_where_the_hook_is_never_called(
    monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    monkeypatch.setattr(versions, "CURRENT", versions.profile_for("0.5.9"))
    bridge = _bridge(store)
    with pytest.raises(ValueError, match="page_unified"):
        bridge.register_mem_pool_host(_unservable_pool())
    bridge.close()


def test_layout_checked_in_the_hook_where_the_release_calls_it(
    monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    monkeypatch.setattr(versions, "CURRENT", versions.profile_for("0.5.23"))
    bridge = _bridge(store)
    pool = _unservable_pool()
    bridge.register_mem_pool_host(pool)  # not yet: SGLang calls the hook after every pool
    bridge.register_mem_host_pool_v2(pool, PoolName.KV)
    with pytest.raises(ValueError, match="page_unified"):
        bridge.on_host_pools_registered()
    bridge.close()


# -- the installed release, detected from its dist-info --------------------------------------
def _fake_sglang(root: Path, version: str, metrics_module: str) -> None:
    pkg = root / "sglang"
    (pkg / "srt" / "mem_cache").mkdir(parents=True)
    for d in (pkg, pkg / "srt", pkg / "srt" / "mem_cache"):
        (d / "__init__.py").write_text("")
    (pkg / "srt" / "mem_cache" / "hicache_storage.py").write_text(
        "from abc import ABC\nclass HiCacheStorage(ABC):\n    pass\n"
    )
    mod = root.joinpath(*metrics_module.split(".")).with_suffix(".py")
    mod.parent.mkdir(parents=True, exist_ok=True)
    for d in mod.relative_to(root).parents:
        if str(d) != ".":
            init = root / d / "__init__.py"
            if not init.exists():
                init.write_text("")
    mod.write_text(
        "from dataclasses import dataclass, field\n"
        "@dataclass\nclass StorageMetrics:\n"
        "    prefetch_pgs: list = field(default_factory=list)\n"
        "    backup_pgs: list = field(default_factory=list)\n"
        "    prefetch_bandwidth: list = field(default_factory=list)\n"
        "    backup_bandwidth: list = field(default_factory=list)\n"
    )
    info = root / f"sglang-{version}.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")


_CHILD = """
import sys
from hicache_sdk.sglang import versions
assert "sglang" not in sys.modules, "importing the profile imported SGLang"
print("PROFILE", versions.CURRENT.sglang_version, versions.UNSUPPORTED)
import hicache_sdk.sglang as bridge_mod
from hicache_sdk.hostpool.mha import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig
cfg = HiCacheStorageConfig(extra_config={**bridge_mod.BRIDGE_EXTRA_CONFIG, "backend": "memory"})
try:
    b = bridge_mod.HiCacheSDKStorage(cfg, {})
except versions.UnsupportedSGLangError as e:
    print("REFUSED", e)
    raise SystemExit(0)
pool = MHAHostPool(16, 4, 1, 1, 4)
b.register_mem_pool_host(pool)
assert b.batch_set_v1(["ab" * 32], pool.alloc(4)) == [True]
s = b.get_stats()
print("STATS", type(s).__module__, s.backup_pgs)
"""


def _run(root: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    env.pop("HICACHE_SGLANG_ENV", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_release_before_0_5_11_gets_its_metrics_class(tmp_path: Path) -> None:
    """0.5.9 keeps ``StorageMetrics`` in ``sglang.srt.metrics.collector``: the bridge's stats
    are that class (SGLang's metrics logger asserts ``isinstance``)."""
    _fake_sglang(tmp_path, "0.5.9", "sglang.srt.metrics.collector")
    out = _run(tmp_path)
    assert "PROFILE 0.5.9 None" in out
    assert "STATS sglang.srt.metrics.collector [1]" in out


def test_newest_release_gets_its_metrics_class(tmp_path: Path) -> None:
    _fake_sglang(tmp_path, "0.5.23", "sglang.srt.observability.metrics_collector")
    out = _run(tmp_path)
    assert "PROFILE 0.5.23 None" in out
    assert "STATS sglang.srt.observability.metrics_collector [1]" in out


def test_release_outside_the_range_gets_one_message(tmp_path: Path) -> None:
    _fake_sglang(tmp_path, "0.4.9.post6", "sglang.srt.metrics.collector")
    out = _run(tmp_path)
    assert "PROFILE 0.5.23 SGLang 0.4.9.post6 is installed" in out
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert refused == [
        "REFUSED SGLang 0.4.9.post6 is installed, but hicache-sdk supports SGLang 0.5.3 to 0.5.23 "
        f"(one contract profile per release line: {', '.join(p.sglang_version for p in PROFILES)}); "
        "install a release in that range"
    ]


#: SGLang's own handling around the backend's construction at startup, as in every release
#: (``StorageBackendFactory._create_dynamic_backend`` logs and re-raises every ``Exception``;
#: ``run_scheduler_process`` logs every ``Exception`` with its traceback), run in a scheduler
#: process the way SGLang starts one (``multiprocessing.Process``).
_FACTORY = """
import logging
from hicache_sdk.sglang import HiCacheSDKStorage
logger = logging.getLogger(__name__)
def create_backend(cfg):
    try:
        return HiCacheSDKStorage(cfg, {})
    except Exception as e:
        logger.error(f"Failed to create dynamic storage backend 'hicache_sdk': {e}")
        raise
"""
_SCHEDULER = """
import sys, traceback
from sglang.srt.mem_cache.storage.backend_factory import create_backend
class Scheduler:
    def __init__(self, cfg):
        self.storage = create_backend(cfg)
def run_scheduler_process(cfg):
    try:
        Scheduler(cfg)
    except Exception:
        print("Scheduler hit an exception: " + traceback.format_exc(), file=sys.stderr)
def attach_at_runtime(cfg):
    try:
        create_backend(cfg)
    except Exception as e:
        return str(e)
"""
_START = """
import multiprocessing, sys
from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG
from hicache_sdk.spec import HiCacheStorageConfig
from sglang.srt.managers import scheduler
cfg = HiCacheStorageConfig(extra_config={**BRIDGE_EXTRA_CONFIG, "backend": "memory"})
print("ATTACH", scheduler.attach_at_runtime(cfg), flush=True)
p = multiprocessing.get_context("fork").Process(target=scheduler.run_scheduler_process, args=(cfg,))
p.start()
p.join()
print("EXIT", p.exitcode)
"""


def test_release_outside_the_range_stops_sglang_with_one_line(tmp_path: Path) -> None:
    """At startup the operator sees the one message, no traceback, and the scheduler process
    ends (exit 1); a runtime attach request gets the message back and the process lives on."""
    _fake_sglang(tmp_path, "0.6.0", "sglang.srt.metrics.collector")
    for rel, text in (
        ("mem_cache/storage/backend_factory.py", _FACTORY),
        ("managers/scheduler.py", _SCHEDULER),
    ):
        path = tmp_path / "sglang" / "srt" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for d in (path.parent, path.parent.parent):
            if not (d / "__init__.py").exists():
                (d / "__init__.py").write_text("")
        path.write_text(textwrap.dedent(text))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", _START], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )
    message = (
        "SGLang 0.6.0 is installed, but hicache-sdk supports SGLang 0.5.3 to 0.5.23 "
        f"(one contract profile per release line: {', '.join(p.sglang_version for p in PROFILES)}); "
        "install a release in that range"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [f"ATTACH {message}", "EXIT 1"]
    assert proc.stderr.strip().splitlines()[-1] == message
    assert "Traceback" not in proc.stderr and "Scheduler hit an exception" not in proc.stderr


def test_profile_fields_are_complete() -> None:
    for p in PROFILES:
        assert p.methods and p.config_fields and p.storage_metrics_fields, p.sglang_version
        assert p.storage_batch_size == 128, p.sglang_version
        assert {"backend_name", "module_path", "class_name"} <= set(p.dynamic_loader_keys)
        assert dataclasses.replace(p) == p


# -- the by-release table of docs/compatibility.md ---------------------------------------------
def _releases_module() -> Any:
    compat = str(Path(__file__).resolve().parents[2] / "scripts" / "compat")
    if compat not in sys.path:
        sys.path.insert(0, compat)
    import releases

    return releases


def test_release_table_renders_each_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    releases = _releases_module()
    ok_cell = {
        "load": {"ok": True},
        "round_trip": {"ok": True, "via": "controller"},
        "metrics": {"ok": True},
    }
    good = {
        "wheel": "0.5.17",
        "install_s": 41.5,
        "total_s": 300.0,
        "probe": {
            "unified_cache_linker": True,
            "backends": {b: ok_cell for b in releases.BACKENDS},
            "observed": {"draft_key": {"suffix": ".draft"}},
        },
        "profile_check": {"rc": 0, "passed": 12, "failed": 0, "skipped": 2},
        "check": {b: {"ok": True, "passed": 40, "failed": 0, "skipped": 9} for b in releases.BACKENDS},
    }
    torch_row = {
        "wheel": "0.5.3.post3",
        "install_s": 30.0,
        "total_s": 40.0,
        "probe": {
            "unified_cache_linker": False,
            "import_error": "ImportError: cannot import name 'x'",
            "import_trace": "torch/_ops.py",
        },
    }
    bad = {**good, "wheel": "0.5.9", "probe": {**good["probe"], "unified_cache_linker": False}}
    bad["probe"]["observed"] = {"draft_key": {"suffix": ""}}
    bad["check"] = {**good["check"], "redis": {"ok": False, "passed": 39, "failed": 1, "skipped": 9}}
    results = tmp_path / "releases.json"
    results.write_text(
        json.dumps({"torch": "2.13.0", "releases": {"0.5.3": torch_row, "0.5.9": bad, "0.5.17": good}})
    )
    monkeypatch.setattr(releases, "RESULTS", results)
    rows = {
        line.split(" | ")[0]: line for line in releases.section().splitlines() if line.startswith("| 0.5.")
    }
    assert rows["| 0.5.3.post3"].endswith(
        "| n/a | 30.0 s | 40.0 s | not run: torch (`ImportError: cannot import name 'x'`) |"
    )
    assert rows["| 0.5.17"].endswith(
        "| `<hash>.draft` | n/a (SGLang's own linkers only) | 41.5 s | 300.0 s | pass |"
    )
    assert "check pass (40/0/9)" in rows["| 0.5.17"] and "matches (12 passed, 0 failed" in rows["| 0.5.17"]
    assert rows["| 0.5.9"].endswith("| none | n/a | 41.5 s | 300.0 s | fail |")
    assert "check fail (39/1/9)" in rows["| 0.5.9"]
    assert rows["| 0.5.4"].endswith("| not run yet |")
    assert "from 0.5.17 on, but before 0.5.23 only SGLang's own linkers load" in releases.section()
