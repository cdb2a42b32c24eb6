"""Repository-wide pytest setup: hypothesis profiles.

``ci`` (selected when ``CI`` is set): derandomized, bounded examples, no deadline, so the
suite is reproducible and stays inside the CI time budget. ``dev``: random, more examples.
Override with ``HYPOTHESIS_PROFILE``.

``HICACHE_COLLECTED_IDS=FILE`` writes the ids this run collected to ``FILE`` (one per line,
as ``pytest --collect-only -q`` prints them), so that ``scripts/compare_test_ids.py --ids``
checks the test command's own collection instead of collecting again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def _write_ids(ids: list[str]) -> None:
    out = os.environ["HICACHE_COLLECTED_IDS"]
    tmp = Path(f"{out}.tmp{os.getpid()}")
    tmp.write_text("".join(f"{nodeid}\n" for nodeid in ids), encoding="utf-8")
    tmp.replace(out)


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get("HICACHE_COLLECTED_IDS") and "PYTEST_XDIST_WORKER" not in os.environ:
        _write_ids([item.nodeid for item in session.items])  # without xdist


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    # xdist's controller: every worker collects everything, each reports the same ids
    if os.environ.get("HICACHE_COLLECTED_IDS"):
        _write_ids(ids)
