"""Resilience shared by every backend: deadlines, circuit breaker, staging, failure
injection and metrics.

The paged adapter calls :func:`wrap_transport` on every backend's transport; the result
is a :class:`ResilientTransport` with the same :class:`~hicache_sdk.transport.Transport`
interface (see :mod:`hicache_sdk.resilience.resilient` for the behaviour).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..metrics.backend import Metrics
from ..transport import Transport
from .breaker import CircuitBreaker
from .inject import FailureInjector, is_inside_sglang, set_inside_sglang
from .resilient import Quarantine, ResilienceConfig, ResilientTransport
from .staging import StagingPool

__all__ = [
    "CircuitBreaker",
    "FailureInjector",
    "Metrics",
    "Quarantine",
    "ResilienceConfig",
    "ResilientTransport",
    "StagingPool",
    "is_inside_sglang",
    "set_inside_sglang",
    "wrap_transport",
]


def wrap_transport(
    transport: Transport,
    config: ResilienceConfig,
    metrics: Metrics,
    *,
    injector: FailureInjector | None = None,
    clock: Callable[[], float] = time.monotonic,
    start_open: bool = False,
    probe_at_start: bool | None = None,
    caller_owns_memory: bool = True,
    quarantine: Quarantine | None = None,
    close_timeout_s: float | None = None,
) -> ResilientTransport:
    """Wrap ``transport`` with the policies ``config`` (a :class:`~hicache_sdk.config.BackendConfig`)
    selects: ``exists_timeout_s``, ``transfer_timeout_s``, ``breaker_failures``,
    ``breaker_reset_s``, ``max_abandoned``, ``staging_bytes``.

    * ``injector``: failure injection from code; ``None`` reads the environment
      (:meth:`FailureInjector.from_env`; nothing configured means no injection).
    * ``clock``: the breaker's clock (tests inject a fake one).
    * ``start_open``: start with the breaker open (service known unreachable);
      ``probe_at_start``: call ``health()`` once, bounded by the exists deadline, and start
      open if it fails (default: when the transport declares the ``health`` capability).
    * ``caller_owns_memory`` / ``quarantine``: see :class:`ResilientTransport`.
    * ``close_timeout_s``: how long ``close()`` waits for running calls (default
      ``max(1, min(transfer_timeout_s, 10))``).

    Wrapping a :class:`ResilientTransport` again returns it unchanged.
    """
    if isinstance(transport, ResilientTransport):
        return transport
    if injector is None:
        injector = FailureInjector.from_env()
    return ResilientTransport(
        transport,
        config,
        metrics,
        injector=injector,
        clock=clock,
        start_open=start_open,
        probe_at_start=probe_at_start,
        caller_owns_memory=caller_owns_memory,
        quarantine=quarantine,
        close_timeout_s=close_timeout_s,
    )
