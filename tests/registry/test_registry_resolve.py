"""Backend resolution: a real installed distribution, module paths, runtime registration,
duplicates, the allow-list and every error message."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from registry_helpers import Recorder

from hicache_sdk import registry
from hicache_sdk.capabilities import Capabilities
from hicache_sdk.errors import BackendNotFoundError, BackendUnavailableError, DuplicateBackendError
from hicache_sdk.registry import (
    backend_capabilities,
    create_backend,
    list_backends,
    register_backend,
    resolve_backend,
    unregister_backend,
)
from hicache_sdk.spec import HiCacheStorage

STORE_MODULE = """
from hicache_sdk.spec import HiCacheStorage

class Store(HiCacheStorage):
    tag = {tag!r}

    def __init__(self, storage_config, kwargs):
        self.storage_config = storage_config
        self.kwargs = kwargs

    def get(self, key, target_location=None, target_sizes=None):
        return None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [None] * len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return True

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return True

    def exists(self, key):
        return False
"""


class LocalStorage(Recorder):
    """A test-only backend, reachable as ``test_registry_resolve:LocalStorage``."""


LOCAL_PATH = f"{__name__}:LocalStorage"


def _module(tag: str) -> str:
    return STORE_MODULE.format(tag=tag)


# -- a real installed distribution -------------------------------------------------------


def test_fixture_distribution_resolves_by_name(with_fake_site: Path) -> None:
    if importlib.util.find_spec("setuptools") is not None:  # pip really installed it
        assert list(with_fake_site.glob("hicache_fake_backend-0.3.1.dist-info/RECORD"))
    cls = resolve_backend("fake")
    assert cls.__name__ == "FakeStorage"
    assert Path(sys.modules[cls.__module__].__file__ or "").is_relative_to(with_fake_site)
    assert backend_capabilities(cls) == Capabilities(persistent=True, ttl=True, zero_copy=False)
    backend: Any = create_backend("fake", None, {"root": "/x"})
    assert backend.kwargs == {}
    assert backend.storage_config.extra_config == {"root": "/x"}
    assert type(backend) is cls


def test_entry_points_are_enumerated_but_not_loaded(with_fake_site: Path) -> None:
    found = registry._discovery.discover()
    assert {"fake", "fake-broken", "fake-notastorage"} <= set(found)
    assert found["fake"][0].distribution == "hicache-fake-backend"
    assert found["fake"][0].version == "0.3.1"
    assert "hicache_fake_backend" not in sys.modules
    resolve_backend("fake")
    assert "hicache_fake_backend.storage" in sys.modules
    assert "hicache_fake_backend.broken" not in sys.modules


def test_list_backends_reports_each_entry_point(with_fake_site: Path) -> None:
    infos = {i.name: i for i in list_backends() if i.distribution == "hicache-fake-backend"}
    assert set(infos) == {"fake", "fake-broken", "fake-notastorage"}
    ok = infos["fake"]
    assert (ok.importable, ok.error, ok.version, ok.source) == (True, None, "0.3.1", "entry_point")
    assert ok.value == "hicache_fake_backend.storage:FakeStorage"
    assert ok.capabilities == Capabilities(persistent=True, ttl=True, zero_copy=False).to_dict()
    broken = infos["fake-broken"]
    assert not broken.importable and broken.capabilities is None
    assert broken.error is not None and "hicache_fake_missing_dependency" in broken.error
    assert "pip install hicache-fake-backend" in broken.error
    wrong = infos["fake-notastorage"]
    assert not wrong.importable and wrong.error is not None
    assert "not a HiCacheStorage subclass" in wrong.error
    d = ok.to_dict()
    assert list(d) == [
        "name",
        "value",
        "distribution",
        "version",
        "source",
        "importable",
        "error",
        "capabilities",
        "accelerators",
        "install",
    ]
    assert d["install"] == "pip install hicache-fake-backend"


def test_missing_dependency_names_module_distribution_and_command(with_fake_site: Path) -> None:
    with pytest.raises(BackendUnavailableError) as ei:
        resolve_backend("fake-broken")
    msg = str(ei.value)
    assert "'fake-broken'" in msg
    assert "hicache-fake-backend 0.3.1" in msg
    assert "missing module 'hicache_fake_missing_dependency'" in msg
    assert "pip install hicache-fake-backend" in msg
    assert "pip install 'hicache-fake-missing-dependency>=1.2'" in msg
    assert ei.value.name == "hicache_fake_missing_dependency"
    assert isinstance(ei.value, ImportError)


def test_not_a_storage_subclass_is_a_type_error_naming_it(with_fake_site: Path) -> None:
    with pytest.raises(TypeError, match=r"hicache_fake_backend\.storage:NotAStorage is not a HiCacheStorage"):
        resolve_backend("fake-notastorage")


def test_pinning_a_distribution(with_fake_site: Path) -> None:
    assert resolve_backend("fake", dist="hicache_fake.backend").__name__ == "FakeStorage"
    with pytest.raises(BackendNotFoundError, match=r"provided by: hicache-fake-backend 0\.3\.1"):
        resolve_backend("fake", dist="other-dist")


# -- the not-found message -----------------------------------------------------------------


def test_unknown_name_lists_available_and_install_hints(with_fake_site: Path) -> None:
    with pytest.raises(BackendNotFoundError) as ei:
        resolve_backend("no-such-backend")
    msg = str(ei.value)
    assert msg.startswith("no HiCache storage backend named 'no-such-backend'.")
    available = msg.split("Available: ", 1)[1].split(".", 1)[0].split(", ")
    assert "fake" in available and "fake-broken" in available
    discovered = registry._discovery.discover()
    for name, dist in registry.KNOWN_BACKENDS.items():
        if name in discovered:
            assert name in available
        else:
            assert f"{name} (pip install {dist})" in msg
            assert dist == f"hicache-backend-{name}"
    assert "'package.module:Class'" in msg


def test_known_but_not_installed_name_gives_its_install_command() -> None:
    discovered = registry._discovery.discover()
    missing = [n for n in registry.KNOWN_BACKENDS if n not in discovered]
    if not missing:
        pytest.skip("every known backend is installed here")
    name = missing[0]
    with pytest.raises(BackendNotFoundError) as ei:
        resolve_backend(name)
    assert str(ei.value).startswith(f"backend {name!r} is not installed: pip install hicache-backend-{name}.")


def test_close_match_is_suggested() -> None:
    register_backend("memcache-test", LocalStorage)
    with pytest.raises(BackendNotFoundError, match="Did you mean 'memcache-test'"):
        resolve_backend("memcache-tset")


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_bad_names_are_value_errors(bad: Any) -> None:
    with pytest.raises(ValueError, match="name"):
        resolve_backend(bad)


# -- module paths ----------------------------------------------------------------------


def test_module_path_fallback() -> None:
    assert resolve_backend(LOCAL_PATH) is LocalStorage
    backend: Any = create_backend(LOCAL_PATH, None, {"k": 1})
    assert type(backend) is LocalStorage and backend.storage_config.extra_config == {"k": 1}


def test_module_path_to_absent_module_is_not_found() -> None:
    with pytest.raises(BackendNotFoundError, match="no module 'hicache_no_such_mod'"):
        resolve_backend("hicache_no_such_mod.sub:Store")


def test_module_path_to_absent_class_is_not_found() -> None:
    with pytest.raises(BackendNotFoundError, match="does not exist"):
        resolve_backend(f"{__name__}:NoSuchClass")


def test_module_path_with_missing_dependency_names_it(make_dist: Any) -> None:
    make_dist("x-dep", "1.0", {}, modules={"hicache_test_needs.py": "import hicache_test_absent_dep\n"})
    with pytest.raises(BackendUnavailableError, match="missing module 'hicache_test_absent_dep'"):
        resolve_backend("hicache_test_needs:Store")


@pytest.mark.parametrize("bad", ["a:b:c", ":Store", "mod:", "1mod:Store", "mod:Cls-x"])
def test_malformed_module_paths_are_value_errors(bad: str) -> None:
    with pytest.raises(ValueError, match=r"package\.module:Class"):
        resolve_backend(bad)


# -- runtime registration ------------------------------------------------------------------


def test_runtime_registration_takes_precedence(with_fake_site: Path) -> None:
    register_backend("fake", LocalStorage)
    assert resolve_backend("fake") is LocalStorage
    assert resolve_backend("fake", dist="hicache-fake-backend").__name__ == "FakeStorage"
    infos = [i for i in list_backends() if i.name == "fake"]
    assert [i.source for i in infos] == ["runtime", "entry_point"]
    assert infos[1].error == "shadowed by a runtime registration"
    unregister_backend("fake")
    assert resolve_backend("fake").__name__ == "FakeStorage"


def test_runtime_path_registration_is_lazy(make_dist: Any) -> None:
    make_dist("x-lazy", "1.0", {}, modules={"hicache_test_lazy.py": _module("lazy")})
    register_backend("lazy", "hicache_test_lazy:Store")
    assert "hicache_test_lazy" not in sys.modules
    cls: Any = resolve_backend("lazy")
    assert cls.tag == "lazy"


def test_reregistration_rules() -> None:
    register_backend("twice", LocalStorage)
    register_backend("twice", LocalStorage)  # same object: fine
    with pytest.raises(ValueError, match="already registered as 'twice'"):
        register_backend("twice", "os:PathLike")
    register_backend("twice", LOCAL_PATH, clobber=True)
    assert resolve_backend("twice") is LocalStorage


def test_registration_checks() -> None:
    with pytest.raises(TypeError, match="is not a HiCacheStorage subclass"):
        register_backend("bad", dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        register_backend("a:b", LocalStorage)
    with pytest.raises(ValueError, match="backend must be"):
        register_backend("bad", "not a path")


def test_sglang_subclasses_are_accepted_when_sglang_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sgl = types.ModuleType("sglang.srt.mem_cache.hicache_storage")

    class SGLangBase:
        pass

    class SGLangBackend(SGLangBase):
        pass

    fake_sgl.HiCacheStorage = SGLangBase  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sglang.srt.mem_cache.hicache_storage", fake_sgl)
    register_backend("sgl", SGLangBackend)  # type: ignore[arg-type]
    resolved: Any = resolve_backend("sgl")
    assert resolved is SGLangBackend


# -- duplicates --------------------------------------------------------------------------


def test_two_distributions_claiming_a_name(make_dist: Any) -> None:
    make_dist("dist-a", "1.0", {"dup": "hicache_test_a:Store"}, modules={"hicache_test_a.py": _module("a")})
    make_dist("dist-b", "2.0", {"dup": "hicache_test_b:Store"}, modules={"hicache_test_b.py": _module("b")})
    with pytest.raises(DuplicateBackendError) as ei:
        resolve_backend("dup")
    msg = str(ei.value)
    assert "dist-a 1.0 (hicache_test_a:Store)" in msg and "dist-b 2.0 (hicache_test_b:Store)" in msg
    assert "resolve_backend('dup', dist=" in msg
    pinned: Any = resolve_backend("dup", dist="Dist_B")
    assert pinned.tag == "b"
    infos = [i for i in list_backends() if i.name == "dup"]
    assert sorted(i.distribution or "" for i in infos) == ["dist-a", "dist-b"]
    assert all(i.importable and i.error and "2 distributions" in i.error for i in infos)
    with pytest.raises(DuplicateBackendError):
        create_backend("dup")


def test_same_distribution_seen_twice_is_not_a_duplicate(make_dist: Any) -> None:
    modules = {"hicache_test_same.py": _module("same")}
    make_dist("dist-same", "1.0", {"same": "hicache_test_same:Store"}, modules=modules)
    make_dist("dist_same", "1.0", {"same": "hicache_test_same:Store"}, modules=modules)
    cls: Any = resolve_backend("same")
    assert cls.tag == "same"
    assert len([i for i in list_backends() if i.name == "same"]) == 1


def test_core_memory_entry_point_seen_twice_counts_once(make_dist: Any) -> None:
    # An editable install beside stale metadata of the same distribution.
    make_dist("hicache-sdk", "0.0.1", {"memory": "hicache_sdk.memory:MemoryStorage"})
    candidates = registry._discovery.discover()["memory"]
    assert len(candidates) == 1
    assert candidates[0].version == "0.0.1"  # the first one on sys.path wins


# -- allow-list ----------------------------------------------------------------------------


def test_allow_list_hides_entry_points_only(with_fake_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.ALLOW_LIST_ENV, "memory")
    with pytest.raises(BackendNotFoundError) as ei:
        resolve_backend("fake")
    assert "installed but hidden by HICACHE_SDK_BACKENDS='memory'" in str(ei.value)
    assert {i.name for i in list_backends()} & {"fake", "fake-broken"} == set()
    register_backend("local", LocalStorage)
    assert resolve_backend("local") is LocalStorage
    assert resolve_backend(LOCAL_PATH) is LocalStorage
    monkeypatch.setenv(registry.ALLOW_LIST_ENV, " fake , memory,,")
    assert resolve_backend("fake").__name__ == "FakeStorage"
    monkeypatch.setenv(registry.ALLOW_LIST_ENV, " , ")
    assert resolve_backend("fake").__name__ == "FakeStorage"


# -- capabilities ----------------------------------------------------------------------


def test_capabilities_default_and_type_check() -> None:
    assert backend_capabilities(LocalStorage) == Capabilities()

    class Wrong(LocalStorage):
        capabilities = {"ttl": True}

    with pytest.raises(TypeError, match=r"Wrong\.capabilities must be"):
        backend_capabilities(Wrong)


def test_real_memory_backend_resolves() -> None:
    try:
        cls = resolve_backend("memory")
    except BackendUnavailableError as e:
        pytest.skip(f"memory backend not available yet: {e}")
    assert cls.__name__ == "MemoryStorage"
    assert isinstance(backend_capabilities(cls), Capabilities)
    backend = create_backend("memory", None, {"store": "registry-test"})
    try:
        assert isinstance(backend, HiCacheStorage)
    finally:
        backend.close()


def test_list_backends_reports_the_viability_probe() -> None:
    class NoDevice(LocalStorage):
        @classmethod
        def check_environment(cls) -> str | None:
            return "protocol=rdma but no RDMA device"

    class ProbeFails(LocalStorage):
        @classmethod
        def check_environment(cls) -> str | None:
            raise OSError("ibv_devices not found")

    class Viable(LocalStorage):
        @classmethod
        def check_environment(cls) -> str | None:
            return None

    for name, cls in (("nodev", NoDevice), ("probefails", ProbeFails), ("viable", Viable)):
        register_backend(name, cls)
    infos = {i.name: i for i in list_backends() if i.source == "runtime"}
    assert (
        infos["nodev"].importable
        and infos["nodev"].error == "not viable here: protocol=rdma but no RDMA device"
    )
    assert infos["probefails"].error == "check_environment() raised OSError: ibv_devices not found"
    assert infos["viable"].importable and infos["viable"].error is None
    assert resolve_backend("nodev") is NoDevice  # the probe informs, it does not block


def test_entry_point_typos_name_the_entry_point_and_distribution(make_dist: Any) -> None:
    make_dist(
        "typo-dist",
        "1.0",
        {"typo-attr": "hicache_typo_mod:Stroe", "typo-mod": "hicache_typo_modd:Store"},
        modules={"hicache_typo_mod.py": "class Store:\n    pass\n"},
    )
    with pytest.raises(BackendUnavailableError) as attr:
        resolve_backend("typo-attr")
    msg = str(attr.value)
    assert "entry point 'typo-attr' = 'hicache_typo_mod:Stroe' in typo-dist's metadata" in msg
    assert "attribute 'Stroe'" in msg and "force-reinstall" not in msg
    with pytest.raises(BackendUnavailableError) as mod:
        resolve_backend("typo-mod")
    msg = str(mod.value)
    assert "entry point 'typo-mod' = 'hicache_typo_modd:Store' in typo-dist's metadata" in msg
    assert "module 'hicache_typo_modd', which does not exist" in msg
