"""An optional Prometheus exporter of backend :class:`~hicache_sdk.metrics.backend.Metrics`.

Needs ``prometheus-client`` (``pip install 'hicache-sdk[prometheus]'``); without it,
constructing an exporter raises :class:`~hicache_sdk._extras.MissingExtraError` naming the
extra. Nothing else in the SDK imports this module, so the dependency is never required.

Pull-based: a collector reads each registered ``Metrics.snapshot()`` at scrape time, so the
I/O path pays nothing. Families (labels ``backend``, ``rank`` on every sample):

* ``hicache_op_latency_seconds`` histogram, label ``op``: the per-call latency histogram
  (buckets :data:`~hicache_sdk.metrics.backend.LATENCY_BUCKETS_S`);
* ``hicache_op_failures_total``, ``hicache_op_pages_total``, ``hicache_op_bytes_total``,
  label ``op``;
* ``hicache_errors_total``, label ``reason`` (``connection``, ``deadline``, ...);
* ``hicache_breaker_state``, label ``state`` (``closed``/``open``/``half_open``): 1 for the
  current state, 0 for the others;
* ``hicache_events_total``, label ``name``: the named counters (``breaker_rejected`` ...);
* ``hicache_gauge``, label ``name``: the numeric gauges (``staging_bytes_in_use`` ...).

``rank`` is :func:`rank_label` of the backend's ``HiCacheStorageConfig`` (``"tp0"``, with
``-pp<k>``/``-dp<k>`` when those are set).

The reference read path's lifecycle counters (:class:`hicache_sdk.hiradix.Counters`, added
with :meth:`PrometheusExporter.add_read_path`) are exported under **SGLang 0.5.23's own
names and labels** (:mod:`hicache_sdk.metrics.lifecycle`): ``sglang:prefetched_tokens_total``,
``sglang:backuped_tokens_total``, ``sglang:storage_prefetch_hit_tokens_total``,
``sglang:storage_prefetch_unfulfilled_tokens_total{reason}``,
``sglang:storage_prefetch_deferred_tokens_total{reason}``,
``sglang:hicache_backup_dropped_tokens_total`` and
``sglang:hicache_prefetch_aux_alloc_failed_tokens_total``, each with SGLang's storage labels
(``storage_backend``, ``tp_rank``, ``dp_rank``, ``pp_rank``, ``pp_size``, ``attn_cp_rank``,
``attn_cp_size``) and every reason present (at 0 until counted), so a dashboard built for
SGLang works unchanged; plus two families of ours with the same labels:
``hicache_prefetch_declined_tokens_total{reason}`` and
``hicache_backup_dropped_tokens_by_reason_total{reason}``. Use::

    exp = serve(9400)                      # one HTTP server per (addr, port) per process
    exp.add(backend.metrics, backend="redis", rank="tp0")
    exp.add_read_path(state.counters, storage_labels(storage_config, "redis"))
    ...
    exp.remove(backend.metrics)

The SGLang bridge does this itself when ``extra_config`` has ``"metrics_port"`` (see
``docs/sglang.md``); ``hicache stats`` reads the endpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from .._extras import require
from . import lifecycle as lc
from .backend import LATENCY_BUCKETS_S, Metrics

__all__ = ["BREAKER_STATES", "PrometheusExporter", "rank_label", "serve", "stop_all", "storage_labels"]

storage_labels = lc.storage_labels

BREAKER_STATES = ("closed", "open", "half_open")
_LABELS = ["backend", "rank"]


def rank_label(storage_config: Any) -> str:
    """``"tp<tp_rank>"``, plus ``"-pp<pp_rank>"`` when ``pp_size > 1`` and ``"-dp<dp_rank>"``
    when ``dp_rank > 0`` (attributes missing from ``storage_config`` count as 0 / 1)."""
    tp = int(getattr(storage_config, "tp_rank", 0) or 0)
    label = f"tp{tp}"
    if int(getattr(storage_config, "pp_size", 1) or 1) > 1:
        label += f"-pp{int(getattr(storage_config, 'pp_rank', 0) or 0)}"
    dp = int(getattr(storage_config, "dp_rank", 0) or 0)
    if dp > 0:
        label += f"-dp{dp}"
    return label


_HELP = {
    lc.PREFETCHED: "Tokens transferred from L3 storage into host memory",
    lc.BACKUPED: "Tokens of completed host-to-L3 backups",
    lc.HIT: "Storage-hit tokens returned by an L3 query (rank-agreed), before host allocation",
    lc.UNFULFILLED: "Storage-hit tokens that did not become a usable prefetch result, by reason",
    lc.DEFERRED: "Storage-hit tokens deferred for a later retry, by transient capacity reason",
    lc.BACKUP_DROPPED: "Backup tokens that never reached L3",
    lc.AUX_ALLOC_FAILED: "Prefetch tokens abandoned because an aux pool could not allocate host staging",
    lc.DECLINED: "Candidate tokens of prefetches not attempted (no L3 query), by reason",
    lc.BACKUP_DROPPED_BY_REASON: "Backup tokens that never reached L3, by reason",
}


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class PrometheusExporter:
    """A ``prometheus_client`` registry holding one collector over registered ``Metrics``.

    Thread-safe: ``add``/``remove`` may race with scrapes. ``registry`` defaults to a fresh
    ``CollectorRegistry`` (not the process-global one, which SGLang may use itself).
    """

    def __init__(self, registry: Any = None) -> None:
        pc = require("prometheus_client", "prometheus", what="the Prometheus exporter")
        self._core = require("prometheus_client.core", "prometheus", what="the Prometheus exporter")
        self._pc = pc
        self.registry = registry if registry is not None else pc.CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._sources: dict[int, tuple[Metrics, dict[str, str]]] = {}
        self._read_paths: dict[int, tuple[Any, dict[str, str]]] = {}
        self._server: Any = None
        self._thread: Any = None
        self.registry.register(self)

    # -- sources ---------------------------------------------------------------------------
    def add(self, metrics: Metrics, *, backend: str, rank: str) -> None:
        """Export ``metrics`` under labels ``backend`` and ``rank`` (re-adding replaces)."""
        with self._lock:
            self._sources[id(metrics)] = (metrics, {"backend": str(backend), "rank": str(rank)})

    def remove(self, metrics: Metrics) -> None:
        """Stop exporting ``metrics`` (a no-op when it was not added)."""
        with self._lock:
            self._sources.pop(id(metrics), None)

    def sources(self) -> int:
        with self._lock:
            return len(self._sources) + len(self._read_paths)

    def add_read_path(self, counters: Any, labels: dict[str, str]) -> None:
        """Export a read path's lifecycle counters (anything whose ``snapshot()`` has the
        shape of :meth:`hicache_sdk.hiradix.Counters.snapshot`) under SGLang's names, with
        ``labels``: exactly SGLang's storage labels (build them with :func:`storage_labels`;
        ``ValueError`` naming the difference otherwise). Re-adding replaces."""
        if set(labels) != set(lc.STORAGE_LABELS):
            missing = sorted(set(lc.STORAGE_LABELS) - set(labels))
            extra = sorted(set(labels) - set(lc.STORAGE_LABELS))
            raise ValueError(f"labels must be SGLang's storage labels: missing {missing}, unexpected {extra}")
        with self._lock:
            self._read_paths[id(counters)] = (counters, {k: str(labels[k]) for k in lc.STORAGE_LABELS})

    def remove_read_path(self, counters: Any) -> None:
        """Stop exporting ``counters`` (a no-op when it was not added)."""
        with self._lock:
            self._read_paths.pop(id(counters), None)

    # -- prometheus_client collector protocol ----------------------------------------------
    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        core = self._core
        with self._lock:
            sources = list(self._sources.values())
        latency = core.HistogramMetricFamily(
            "hicache_op_latency_seconds", "Latency of one backend call", labels=[*_LABELS, "op"]
        )
        fams = {
            "failures": core.CounterMetricFamily(
                "hicache_op_failures", "Calls that failed", labels=[*_LABELS, "op"]
            ),
            "pages": core.CounterMetricFamily(
                "hicache_op_pages", "Pages moved or found", labels=[*_LABELS, "op"]
            ),
            "bytes": core.CounterMetricFamily("hicache_op_bytes", "Bytes moved", labels=[*_LABELS, "op"]),
        }
        errors = core.CounterMetricFamily("hicache_errors", "Failures by reason", labels=[*_LABELS, "reason"])
        breaker = core.GaugeMetricFamily(
            "hicache_breaker_state", "Circuit breaker state (1 = current)", labels=[*_LABELS, "state"]
        )
        events = core.CounterMetricFamily("hicache_events", "Named event counters", labels=[*_LABELS, "name"])
        gauges = core.GaugeMetricFamily("hicache_gauge", "Numeric gauges", labels=[*_LABELS, "name"])
        for metrics, labels in sources:
            snap = metrics.snapshot()
            base = [labels["backend"], labels["rank"]]
            for op, st in sorted(snap["ops"].items()):
                cumulative, buckets = 0, []
                for bound, count in zip([*LATENCY_BUCKETS_S, float("inf")], st["latency_counts"]):
                    cumulative += count
                    buckets.append((_le(bound), cumulative))
                latency.add_metric([*base, op], buckets, st["seconds"])
                for key, fam in fams.items():
                    fam.add_metric([*base, op], st[key])
            for reason, n in sorted(snap["errors"].items()):
                errors.add_metric([*base, reason], n)
            state = snap["gauges"].get("breaker_state")
            if isinstance(state, str):
                for s in BREAKER_STATES:
                    breaker.add_metric([*base, s], 1.0 if s == state else 0.0)
            for name, n in sorted(snap["counters"].items()):
                events.add_metric([*base, name], n)
            for name, v in sorted(snap["gauges"].items()):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    gauges.add_metric([*base, name], float(v))
        yield latency
        yield from fams.values()
        yield from (errors, breaker, events, gauges)
        with self._lock:
            read_paths = list(self._read_paths.values())
        if read_paths:
            yield from self._collect_read_paths(read_paths)

    def _collect_read_paths(self, read_paths: list[tuple[Any, dict[str, str]]]) -> Iterator[Any]:
        core = self._core
        names = list(lc.STORAGE_LABELS)
        families: list[tuple[str, str | None, tuple[str, ...]]] = [
            (name, label, lc.UNFULFILLED_REASONS if name == lc.UNFULFILLED else lc.DEFERRED_REASONS)
            for name, label in lc.SGLANG_FAMILIES
        ]
        families += [(lc.DECLINED, "reason", lc.DECLINED_REASONS)]
        families += [(lc.BACKUP_DROPPED_BY_REASON, "reason", lc.BACKUP_DROPPED_REASONS)]
        snaps = [(c.snapshot(), [labels[k] for k in names]) for c, labels in read_paths]
        for name, label, reasons in families:
            fam = core.CounterMetricFamily(
                name.removesuffix("_total"), _HELP[name], labels=names + ([label] if label else [])
            )
            for snap, base in snaps:
                value = snap.get(name, 0)
                if label is None:
                    fam.add_metric(base, float(value))
                else:
                    for reason in reasons:
                        fam.add_metric([*base, reason], float(value.get(reason, 0)))
            yield fam

    # -- HTTP ------------------------------------------------------------------------------
    def text(self) -> str:
        """The exposition text a scrape would get."""
        out: bytes = self._pc.generate_latest(self.registry)
        return out.decode("utf-8")

    def start(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``addr:port`` in a daemon thread; returns the bound port
        (``port=0`` picks a free one). ``OSError`` when the port is taken."""
        if self._server is not None:
            raise RuntimeError("exporter already serving")
        started = self._pc.start_http_server(port, addr=addr, registry=self.registry)
        if not isinstance(started, tuple):  # pragma: no cover - prometheus-client < 0.17
            raise RuntimeError("prometheus-client >= 0.17 is required (start_http_server returns the server)")
        self._server, self._thread = started
        bound: int = self._server.server_address[1]
        return bound

    @property
    def port(self) -> int | None:
        return None if self._server is None else int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop the HTTP server (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


_SERVED: dict[tuple[str, int], PrometheusExporter] = {}
_SERVED_LOCK = threading.Lock()


def serve(port: int, addr: str = "127.0.0.1") -> PrometheusExporter:
    """The process's exporter serving ``addr:port``, started on first use (a re-attached
    backend reuses it instead of failing to bind again). ``port=0`` always starts a new
    server on a free port (see ``exporter.port``)."""
    with _SERVED_LOCK:
        exp = _SERVED.get((addr, port)) if port else None
        if exp is None:
            exp = PrometheusExporter()
            bound = exp.start(port, addr)
            _SERVED[(addr, bound)] = exp
            if port:
                _SERVED[(addr, port)] = exp
        return exp


def stop_all() -> None:
    """Stop every server :func:`serve` started (tests, interpreter shutdown)."""
    with _SERVED_LOCK:
        exps = {id(e): e for e in _SERVED.values()}
        _SERVED.clear()
    for exp in exps.values():
        exp.stop()
