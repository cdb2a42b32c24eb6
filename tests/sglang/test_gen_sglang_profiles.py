"""``scripts/gen_sglang_profiles.py`` on a small hand-written wheel tree: every fact it reads,
and the module it writes, which builds the same profile back."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

FILES = {
    "mem_cache/hicache_storage.py": """
        from abc import ABC, abstractmethod
        from dataclasses import dataclass
        from enum import Enum
        STORAGE_BATCH_SIZE = 64

        @dataclass
        class HiCacheStorageConfig:
            tp_rank: int
            model_name: str
            extra_config: dict = None

        @dataclass
        class HiCacheStorageExtraInfo:
            prefix_keys: list = None

        class PoolName(str, Enum):
            KV = "kv"
            DRAFT = "draft"

        class HiCacheStorage(ABC):
            def register_mem_pool_host(self, mem_pool_host):
                pass
            @abstractmethod
            def batch_get(self, keys, target_locations=None, target_sizes=None):
                pass
            def _private(self):
                pass

        class HiCacheFile(HiCacheStorage):
            def __init__(self, storage_config, file_path: str = "/tmp/hc"):
                self.file_path = envs.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR.get() or file_path
        """,
    "metrics/collector.py": """
        from dataclasses import dataclass
        class StorageMetrics:
            prefetch_pgs: list
            backup_pgs: list
        """,
    "managers/cache_controller.py": """
        class HiCacheController:
            def attach(self):
                if self.storage_backend_type in ["hf3fs", "mooncake"]:
                    pass
                flag = self.storage_config.extra_config.get("interface_v1", 0)
                self.storage_backend.on_host_pools_registered()
            def _draft(self, hash_values):
                return [f"{h}.{PoolName.DRAFT}" for h in hash_values]
        """,
    "mem_cache/hiradix_cache.py": """
        class HiRadixCache:
            def __init__(self, extra_config):
                self.load_back_threshold = 7
                prefetch_threshold = extra_config.pop("prefetch_threshold", 256)  # tokens
                timeout = extra_config.pop(
                    "prefetch_timeout_base", 1.5
                )
        """,
    "mem_cache/storage/backend_factory.py": """
        required_fields = ["backend_name", "module_path", "class_name"]
        """,
    "mem_cache/utils.py": """
        def storage_namespace_seed(extra_key, cache_salt):
            return None
        """,
    "arg_groups/memory.py": """
        class Memory:
            hicache_storage_prefetch_retry_poll_interval: int = 5
        """,
    "environ.py": """
        SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE = 1
        """,
}


def _gen() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gen_sglang_profiles", ROOT / "scripts" / "gen_sglang_profiles.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(root: Path, version: str) -> Path:
    srt = root / "sglang" / "srt"
    for rel, text in FILES.items():
        (srt / rel).parent.mkdir(parents=True, exist_ok=True)
        (srt / rel).write_text(textwrap.dedent(text))
    info = root / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


def test_reads_every_fact(tmp_path: Path) -> None:
    gen = _gen()
    p = gen.read_profile(gen.Wheel(_wheel(tmp_path, "0.5.7.post2")))
    assert (p["sglang_version"], p["wheel_version"]) == ("0.5.7", "0.5.7.post2")
    assert p["methods"] == (
        ("register_mem_pool_host", ("mem_pool_host",), 0, False),
        ("batch_get", ("keys", "target_locations", "target_sizes"), 2, True),
    )
    assert p["config_fields"] == (("tp_rank", ...), ("model_name", ...), ("extra_config", None))
    assert p["pool_names"] == ("kv", "draft") and p["hit_policies"] == ()
    assert p["extra_info_fields"] == ("prefix_keys",)
    assert (p["storage_metrics_module"], p["storage_metrics_fields"]) == (
        "sglang.srt.metrics.collector",
        ("prefetch_pgs", "backup_pgs"),
    )
    assert p["storage_batch_size"] == 64
    assert p["reserved_extra_config"] == (("prefetch_threshold", 256), ("prefetch_timeout_base", 1.5))
    assert p["dynamic_loader_keys"] == ("backend_name", "module_path", "class_name", "interface_v1")
    assert p["zero_copy_backends"] == ("hf3fs", "mooncake")
    assert p["injector_env"] == ("SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE",)
    assert (
        p["load_back_threshold"],
        p["prefetch_retry_poll_interval"],
        p["prefetch_retry_max_attempts"],
    ) == (7, 5, 0)
    assert (p["file_dir_env"], p["file_dir_extra_key"], p["file_dir_default"]) == (
        "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR",
        "",
        "/tmp/hc",
    )
    assert p["calls_on_host_pools_registered"] is True
    assert p["draft_key_suffix"] == ".draft" and p["salted_seeding"] is True
    assert p["has_unified_cache_linker"] is False


def test_reads_the_unified_cache_linker(tmp_path: Path) -> None:
    gen = _gen()
    root = _wheel(tmp_path, "0.5.17")
    (root / "sglang" / "srt" / "mem_cache" / "unified_cache").mkdir()
    (root / "sglang" / "srt" / "mem_cache" / "unified_cache" / "__init__.py").write_text("")
    assert gen.read_profile(gen.Wheel(root))["has_unified_cache_linker"] is True


def test_written_module_builds_the_profiles_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _gen()
    wheels = [gen.Wheel(_wheel(tmp_path / v, v)) for v in ("0.5.10", "0.5.9")]
    read = [gen.read_profile(w) for w in sorted(wheels, key=lambda w: int(w.line.split(".")[2]))]
    text = gen.render(read)
    from hicache_sdk.sglang import contract_profile

    module = types.ModuleType("hicache_sdk.sglang._test_profiles")
    module.__package__ = "hicache_sdk.sglang"
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(text, "profiles.py", "exec"), module.__dict__)
    assert [p.sglang_version for p in module.PROFILES] == ["0.5.9", "0.5.10"]
    for built, facts in zip(module.PROFILES, read):
        assert isinstance(built, contract_profile.ContractProfile)
        assert dataclasses.asdict(built) == {k: v for k, v in facts.items()}


def test_two_wheels_of_one_line_are_refused(tmp_path: Path) -> None:
    gen = _gen()
    a, b = _wheel(tmp_path / "a", "0.5.9"), _wheel(tmp_path / "b", "0.5.9.post1")
    with pytest.raises(SystemExit, match="two wheels of the same release line"):
        gen.main([str(a), str(b)])


def test_observed_facts_leave_unobserved_and_contradictions_stop(tmp_path: Path) -> None:
    gen = _gen()
    p = gen.read_profile(gen.Wheel(_wheel(tmp_path, "0.5.14")))
    assert p["draft_key_suffix"] == ".draft" and p["salted_seeding"] is True
    seen = {"draft_key": {"suffix": ".draft"}, "salted_seeding": {"salted": True}}
    out = gen.apply_observed(p, {"0.5.14": {"probe": {"observed": seen}}})
    assert out["unobserved"] == ("calls_on_host_pools_registered",)
    # the hook, observed on the controller's storage attach
    hooks = {**seen, "registration_hooks": {"on_host_pools_registered": p["calls_on_host_pools_registered"]}}
    assert gen.apply_observed(p, {"0.5.14": {"probe": {"observed": hooks}}})["unobserved"] == ()
    other = {"registration_hooks": {"on_host_pools_registered": not p["calls_on_host_pools_registered"]}}
    with pytest.raises(SystemExit, match=r"0\.5\.14: calls_on_host_pools_registered read from the source"):
        gen.apply_observed(p, {"0.5.14": {"probe": {"observed": other}}})
    # not observed there (another line, or the observation failed): still unobserved
    assert gen.apply_observed(p, {"0.5.9": {"probe": {"observed": seen}}})["unobserved"] == p["unobserved"]
    failed = {"draft_key": {"suffix": None, "error": "x"}, "salted_seeding": {"salted": None}}
    assert gen.apply_observed(p, {"0.5.14": {"probe": {"observed": failed}}})["unobserved"] == p["unobserved"]
    wrong = {"draft_key": {"suffix": ""}}
    with pytest.raises(
        SystemExit, match=r"0\.5\.14: draft_key_suffix read from the source is '\.draft', observed ''"
    ):
        gen.apply_observed(p, {"0.5.14": {"probe": {"observed": wrong}}})
