"""Every counter the SDK keeps and how it leaves the process: a backend's
:class:`Metrics` (:mod:`.backend`), SGLang's storage-prefetch lifecycle names that the reference
read path counts with (:mod:`.lifecycle`), the optional Prometheus exporter (:mod:`.prometheus`,
needs ``hicache-sdk[prometheus]``) and the bridge's per-rank endpoint (:mod:`.endpoint`)."""

from __future__ import annotations

from .backend import LATENCY_BUCKETS_S, BugRecord, Metrics, redact

__all__ = ["LATENCY_BUCKETS_S", "BugRecord", "Metrics", "redact"]
