"""Fixtures of the resilience tests."""

from __future__ import annotations

import pytest

from hicache_sdk.resilience.deadline import DeadlineRunner


@pytest.fixture(params=[pytest.param(DeadlineRunner, id="py-runner")])
def runner_cls(request: pytest.FixtureRequest) -> type[DeadlineRunner]:
    """The deadline runner class (a fixture, so that runner tests keep their ids)."""
    cls: type[DeadlineRunner] = request.param
    return cls
