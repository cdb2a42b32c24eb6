"""The conformance suite on the file backend, in a private root per test session."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from typing import Any

import pytest

pytest.importorskip("hicache_conformance")

from hicache_backend_file import FileStorage
from hicache_conformance import BackendSuite

_ROOT = tempfile.mkdtemp(prefix="hicache-file-conformance-")
atexit.register(shutil.rmtree, _ROOT, True)


class TestFileBackend(BackendSuite):
    backend = FileStorage
    config = {"root": _ROOT}

    def capacity_config(self, capacity_bytes: int) -> dict[str, Any]:
        root = tempfile.mkdtemp(prefix="hicache-file-cap-")
        atexit.register(shutil.rmtree, root, True)
        return {"root": root, "max_bytes": capacity_bytes}
