"""Fixtures of the resilience tests: both deadline-runner implementations."""

from __future__ import annotations

import pytest

from hicache_sdk.resilience.deadline import DeadlineRunner, PyDeadlineRunner, native_runner

RUNNERS = [pytest.param(PyDeadlineRunner, id="py-runner")]
if native_runner():
    RUNNERS.insert(0, pytest.param(DeadlineRunner, id="native-runner"))


@pytest.fixture(params=RUNNERS)
def runner_cls(request: pytest.FixtureRequest) -> type[PyDeadlineRunner]:
    """Each deadline-runner implementation: the native core (where it built) and the
    pure-Python reference; both must behave the same."""
    cls: type[PyDeadlineRunner] = request.param
    return cls
