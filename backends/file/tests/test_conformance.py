"""The conformance suite on the file backend, in a private root per test session:
once under the default key scheme and once under ``sglang-file`` (SGLang HiCacheFile's
exact file names, one private root per test namespace since that scheme has no
namespace). Both provide out-of-band file access (``raw_pages``) under the root."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

import pytest
from hicache_backend_file import FileStorage
from hicache_conformance import BackendSuite
from hicache_conformance.raw import DirectoryRawObjects

_ROOT = tempfile.mkdtemp(prefix="hicache-file-conformance-")
atexit.register(shutil.rmtree, _ROOT, True)


def _root_of(backend: Any) -> str:
    return str(backend.root)


class TestFileBackend(BackendSuite):
    backend = FileStorage
    config = {"root": _ROOT}

    @pytest.fixture
    def raw_pages(self) -> DirectoryRawObjects:
        return DirectoryRawObjects(_root_of)

    def capacity_config(self, capacity_bytes: int) -> dict[str, Any]:
        root = tempfile.mkdtemp(prefix="hicache-file-cap-")
        atexit.register(shutil.rmtree, root, True)
        return {"root": root, "max_bytes": capacity_bytes}


class TestFileBackendSGLangFile(TestFileBackend):
    transport_tests = False  # the base class runs them on the same transport
    # L3 (concurrency) and L4 (faults) exercise the transport and the resilience layer, not
    # the names: the base class runs them on the same store
    levels = ("L0", "L1", "L2", "stateful")
    stateful_examples = 5  # the base class runs the full stateful test on the same store
    config = {"root": _ROOT, "key_scheme": "sglang-file"}

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        return {"root": os.path.join(_ROOT, namespace)}
