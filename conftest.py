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


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ.get("HICACHE_COLLECTED_IDS")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not out or worker not in (None, "gw0"):
        return  # under xdist every worker collects everything: the first one writes
    if worker is None and session.config.pluginmanager.has_plugin("dsession"):
        return  # xdist's controller collects nothing
    tmp = Path(f"{out}.tmp{os.getpid()}")
    tmp.write_text("".join(f"{item.nodeid}\n" for item in session.items), encoding="utf-8")
    tmp.replace(out)
