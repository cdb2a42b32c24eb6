"""A Mooncake cluster (master + separate holder process) per test session, on free
loopback ports, stopped by PID at teardown (also on failure)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("MC_LOG_LEVEL", "ERROR")

from _servers import MooncakeCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[MooncakeCluster]:
    c = MooncakeCluster()
    try:
        c.start()
        yield c
    finally:
        c.stop()
