"""The bridge's optional Prometheus endpoint (``extra_config`` keys of the bridge itself).

* ``metrics_port`` (int >= 0): serve ``/metrics`` (see :mod:`hicache_sdk.metrics.prometheus`) for the
  inner backend's ``metrics``. Each SGLang rank is a process of its own, so rank ``r``
  listens on ``metrics_port + r`` with ``r = tp_rank + tp_size * pp_rank`` (``0``: a free port,
  logged and kept in ``bridge.metrics_url``). Samples carry ``backend`` and ``rank`` labels.
* ``metrics_addr`` (default ``"127.0.0.1"``): the listen address.

Both keys are removed before the inner backend sees the config. Without
``prometheus-client`` a set ``metrics_port`` fails the attach with
:class:`~hicache_sdk._extras.MissingExtraError` naming ``hicache-sdk[prometheus]``; a bad
value is a ``ValueError`` naming the key. A backend without a ``metrics`` attribute (a
``module:Class`` backend not built on the SDK) exports nothing (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .backend import Metrics

__all__ = ["BRIDGE_KEYS", "MetricsEndpoint", "start_endpoint"]

log = logging.getLogger("hicache_sdk.sglang")

#: ``extra_config`` keys the bridge consumes itself (never passed to the inner backend).
BRIDGE_KEYS = frozenset({"metrics_port", "metrics_addr"})


class MetricsEndpoint:
    """One backend's registration with a (shared, per-port) exporter; ``close()`` removes it."""

    def __init__(self, exporter: Any, metrics: Metrics, url: str) -> None:
        self.exporter = exporter
        self.metrics = metrics
        self.url = url

    def close(self) -> None:
        self.exporter.remove(self.metrics)


def _rank_offset(storage_config: Any) -> int:
    tp = int(getattr(storage_config, "tp_rank", 0) or 0)
    tp_size = int(getattr(storage_config, "tp_size", 1) or 1)
    pp = int(getattr(storage_config, "pp_rank", 0) or 0)
    return tp + tp_size * pp


def start_endpoint(
    inner: Any, backend_name: str, storage_config: Any, extra: Mapping[str, Any]
) -> MetricsEndpoint | None:
    """Serve ``inner.metrics`` when ``extra`` asks for it (see the module docs)."""
    port = extra.get("metrics_port")
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"extra_config['metrics_port'] must be a port number 0..65535, got {port!r}")
    addr = extra.get("metrics_addr", "127.0.0.1")
    if not isinstance(addr, str) or not addr:
        raise ValueError(f"extra_config['metrics_addr'] must be a host address, got {addr!r}")
    metrics = getattr(inner, "metrics", None)
    if not isinstance(metrics, Metrics):
        log.warning("backend %r has no hicache_sdk Metrics: metrics_port ignored", backend_name)
        return None
    from .prometheus import rank_label, serve

    effective = port + _rank_offset(storage_config) if port else 0
    if effective > 65535:
        raise ValueError(f"metrics_port {port} + rank offset {effective - port} exceeds 65535")
    exporter = serve(effective, addr)
    exporter.add(metrics, backend=backend_name, rank=rank_label(storage_config))
    url = f"http://{addr}:{exporter.port}/metrics"
    log.info("hicache-sdk metrics for backend %r at %s", backend_name, url)
    return MetricsEndpoint(exporter, metrics, url)
