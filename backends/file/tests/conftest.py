"""Fixtures for the file backend tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hicache_backend_file import FileConfig, FileTransport


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def make_transport(root: Path) -> Iterator[Callable[..., FileTransport]]:
    made: list[FileTransport] = []

    def make(**kw: Any) -> FileTransport:
        kw.setdefault("root", str(root))
        t = FileTransport(FileConfig(**kw), environ={})
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()
