"""The suite's own tests share one pytest subprocess for every suite run they inspect
(see ``suite_runs.py``)."""

from __future__ import annotations

import pytest
from suite_runs import Run, run_all


@pytest.fixture(scope="session")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_all(tmp_path_factory.mktemp("suite-runs"))
