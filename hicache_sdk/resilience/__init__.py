"""Resilience shared by every backend: deadlines, circuit breaker, staging and retry as
policy objects (:mod:`.policies`, :mod:`.retry`), composed around a transport by
:class:`ResilientTransport`; failure injection for tests.

The paged adapter calls :func:`wrap_transport` on every backend's transport with the
policies of :meth:`PagedStorage.create_resilience
<hicache_sdk.paged.adapter.PagedStorage.create_resilience>` (by default, the shared config
keys: :meth:`Resilience.from_config`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..metrics.backend import Metrics
from ..transport import Transport
from .breaker import CircuitBreaker
from .inject import FailureInjector, is_inside_sglang, set_inside_sglang
from .policies import Breaker, Deadline, Quarantine, Resilience, ResilienceConfig, Staging
from .resilient import ResilientTransport
from .retry import Backoff, ConstantBackoff, ExponentialBackoff, NoBackoff, Retry
from .staging import StagingPool

__all__ = [
    "Backoff",
    "Breaker",
    "CircuitBreaker",
    "ConstantBackoff",
    "Deadline",
    "ExponentialBackoff",
    "FailureInjector",
    "Metrics",
    "NoBackoff",
    "Quarantine",
    "Resilience",
    "ResilienceConfig",
    "ResilientTransport",
    "Retry",
    "Staging",
    "StagingPool",
    "is_inside_sglang",
    "set_inside_sglang",
    "wrap_transport",
]


def wrap_transport(
    transport: Transport,
    config: Resilience | ResilienceConfig,
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
    """Wrap ``transport`` in a :class:`ResilientTransport` with the policies ``config``
    gives: a :class:`Resilience`, or a config with the shared keys (a
    :class:`~hicache_sdk.config.BackendConfig`: ``exists_timeout_s``, ``transfer_timeout_s``,
    ``breaker_failures``, ``breaker_reset_s``, ``max_abandoned``, ``staging_bytes``).

    ``injector``: failure injection (tests); ``None``, the default, injects nothing and reads
    no environment variable (pass ``FailureInjector.from_env()`` to opt in). The other
    arguments are :class:`ResilientTransport`'s. Wrapping a :class:`ResilientTransport`
    again returns it unchanged.
    """
    if isinstance(transport, ResilientTransport):
        return transport
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
