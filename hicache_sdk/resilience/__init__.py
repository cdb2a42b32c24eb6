"""Resilience shared by every backend: deadlines, circuit breaker, staging, failure
injection and metrics. (Placeholder: pass-through until the resilience layer lands.)"""

from __future__ import annotations

from typing import Any

from ..transport import Transport
from .metrics import Metrics

__all__ = ["Metrics", "wrap_transport"]


def wrap_transport(transport: Transport, config: Any, metrics: Metrics) -> Transport:
    """Wrap ``transport`` with the resilience policies that ``config`` selects."""
    return transport
