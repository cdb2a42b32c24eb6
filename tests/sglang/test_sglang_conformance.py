"""The conformance suite, ``contract`` profile, inside the real SGLang 0.5.23.

* SGLang's own ``HiCacheFile``, wrapped only for the dynamic loader's constructor shape
  ``cls(storage_config, config)`` (it takes a private ``file_path``), passes.
* Its capabilities are inferred (it declares none): ``hybrid_pools`` (it implements v2),
  ``delete`` (it implements ``clear``) and ``mla`` (a class of SGLang's own ABC: SGLang
  hands it MLA models); not ``zero_copy`` (no v1 methods).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import Any

import pytest
from hicache_conformance import BackendSuite
from hicache_conformance.capabilities import infer_capabilities
from hicache_conformance.raw import DirectoryRawObjects
from sglang.srt.mem_cache import hicache_storage as sgl

_ROOT = tempfile.mkdtemp(prefix="hicache-sglang-conformance-")


def _sglang_config(storage_config: Any) -> Any:
    """SGLang's own ``HiCacheStorageConfig`` with the fields both dataclasses share."""
    names = {f.name for f in dataclasses.fields(sgl.HiCacheStorageConfig)}
    shared = {n: getattr(storage_config, n) for n in names if hasattr(storage_config, n)}
    return sgl.HiCacheStorageConfig(**shared)


class LoadableHiCacheFile(sgl.HiCacheFile):
    """``HiCacheFile`` built the way SGLang's dynamic loader builds a backend."""

    def __init__(self, storage_config: Any, config: Any = None) -> None:
        path = (storage_config.extra_config or {})["file_storage_path"]
        super().__init__(_sglang_config(storage_config), file_path=path)


@pytest.fixture(scope="module", autouse=True)
def _private_root() -> Any:
    saved = os.environ.pop("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", None)
    yield
    if saved is not None:
        os.environ["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = saved
    shutil.rmtree(_ROOT, ignore_errors=True)


class TestSGLangHiCacheFileContract(BackendSuite):
    backend = LoadableHiCacheFile
    profile = "contract"
    matrix = "minimal"
    stateful_examples = 10

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        return {"file_storage_path": os.path.join(_ROOT, namespace)}

    @pytest.fixture
    def raw_pages(self) -> DirectoryRawObjects:
        return DirectoryRawObjects(lambda backend: str(backend.file_path))


def test_hicachefile_capabilities_are_inferred() -> None:
    caps, inferred = infer_capabilities(LoadableHiCacheFile)
    assert inferred == ("hybrid_pools", "delete", "mla")
    assert {n for n, v in caps.to_dict().items() if v} == {"hybrid_pools", "delete", "mla"}
