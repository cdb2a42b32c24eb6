"""SGLang's storage-prefetch lifecycle counters: names, reasons, labels and units.

SGLang 0.5.23 (``sglang/srt/observability/metrics_collector.py``,
``StorageMetricsCollector``) counts the life of every L3 hit in **tokens**: a rank-agreed
hit (:data:`HIT`) either becomes a usable prefix or is *unfulfilled* for one reason
(:data:`UNFULFILLED`); a hit that had to wait for capacity is also *deferred*
(:data:`DEFERRED`). The reference read path (:mod:`hicache_sdk.hiradix`) counts the same
events with the same names, reasons and units, and the Prometheus exporter
(:meth:`hicache_sdk.metrics.prometheus.PrometheusExporter.add_read_path`) exports them under
SGLang's metric names and labels, so a dashboard built for SGLang reads ours unchanged.
``tox -e sglang`` checks the names, label sets and reasons against the installed SGLang.

Families that carry the ``sglang:`` prefix are SGLang's, exactly. What we count and SGLang
does not lives in families of our own (``hicache_*``): :data:`DECLINED` (prefetches not
attempted: SGLang keeps those in an internal stats dict, not in Prometheus) and
:data:`BACKUP_DROPPED_BY_REASON` (the reason behind :data:`BACKUP_DROPPED`, which SGLang
exports without one).
"""

from __future__ import annotations

__all__ = [
    "AUX_ALLOC_FAILED",
    "BACKUPED",
    "BACKUP_DROPPED",
    "BACKUP_DROPPED_BY_REASON",
    "BACKUP_DROPPED_REASONS",
    "DECLINED",
    "DECLINED_REASONS",
    "DEFERRED",
    "DEFERRED_REASONS",
    "HIT",
    "NOT_ARISING",
    "PREFETCHED",
    "REASON_TEXT",
    "SGLANG_FAMILIES",
    "STORAGE_LABELS",
    "UNFULFILLED",
    "UNFULFILLED_REASONS",
    "storage_labels",
]

#: Storage-hit tokens returned by an L3 query (rank-agreed, positive) before host
#: allocation, transfer or insertion.
HIT = "sglang:storage_prefetch_hit_tokens_total"
#: Tokens transferred from L3 into host memory (before admission-time reuse or discard).
PREFETCHED = "sglang:prefetched_tokens_total"
#: Tokens of completed L2 -> L3 backups.
BACKUPED = "sglang:backuped_tokens_total"
#: Storage-hit tokens that did not become a usable prefetch result, label ``reason``.
UNFULFILLED = "sglang:storage_prefetch_unfulfilled_tokens_total"
#: Storage-hit tokens deferred for a later retry by a transient capacity shortage, label ``reason``.
DEFERRED = "sglang:storage_prefetch_deferred_tokens_total"
#: Backup tokens that never reached L3.
BACKUP_DROPPED = "sglang:hicache_backup_dropped_tokens_total"
#: Prefetch tokens forfeited because an auxiliary (sidecar) pool could not stage.
AUX_ALLOC_FAILED = "sglang:hicache_prefetch_aux_alloc_failed_tokens_total"

#: SGLang's families in the order of ``StorageMetricsCollector``, with their extra label.
SGLANG_FAMILIES: tuple[tuple[str, str | None], ...] = (
    (PREFETCHED, None),
    (BACKUPED, None),
    (HIT, None),
    (UNFULFILLED, "reason"),
    (DEFERRED, "reason"),
    (BACKUP_DROPPED, None),
    (AUX_ALLOC_FAILED, None),
)

#: ``reason`` values of :data:`UNFULFILLED`, as SGLang pre-registers them.
UNFULFILLED_REASONS: tuple[str, ...] = (
    "below_threshold",
    "host_capacity",
    "device_capacity",
    "device_covered",
    "storage_transfer",
    "deadline",
    "anchor_lost",
    "aux_window_trim",
    "device_overlap",
    "cache_admission_shortfall",
    "dropped",
)
#: ``reason`` values of :data:`DEFERRED`.
DEFERRED_REASONS: tuple[str, ...] = ("host_capacity", "device_capacity")

#: SGLang's storage metric labels (``storage_attachment._resolve_metrics_collector``).
STORAGE_LABELS: tuple[str, ...] = (
    "storage_backend",
    "tp_rank",
    "dp_rank",
    "pp_rank",
    "pp_size",
    "attn_cp_rank",
    "attn_cp_size",
)

# -- ours ---------------------------------------------------------------------------------

#: Candidate tokens of prefetches not attempted (no L3 query), label ``reason``. Ours: SGLang
#: counts these only in its internal outcome stats (``declined_too_short``,
#: ``declined_rate_limited``).
DECLINED = "hicache_prefetch_declined_tokens_total"
DECLINED_REASONS: tuple[str, ...] = ("too_short", "rate_limited", "anchor_not_backed_up")
#: :data:`BACKUP_DROPPED` by ``reason``. Ours: SGLang's family has no reason label.
BACKUP_DROPPED_BY_REASON = "hicache_backup_dropped_tokens_by_reason_total"
BACKUP_DROPPED_REASONS: tuple[str, ...] = ("host_capacity", "storage_transfer", "deadline")

#: Reasons that cannot arise in the reference read path, and why. They are exported (at 0)
#: so that label sets equal SGLang's; nothing ever counts them.
NOT_ARISING: dict[str, str] = {
    "device_covered": "buffer_only host-memory mode only: the live device prefix already covers the "
    "staged span at admission (the reference read path models cache mode)",
    "anchor_lost": "buffer_only mode only: the device prefix a parked hit needed was evicted "
    "(in cache mode the anchor is pinned on host for the whole prefetch)",
    "aux_window_trim": "registered but never emitted by SGLang 0.5.23 itself",
    "device_overlap": "registered but never emitted by SGLang 0.5.23 itself (it needs the live device "
    "prefix to diverge from the request's view at splice time, i.e. a real scheduler)",
    "cache_admission_shortfall": "an L3-loaded host span evicted between the end of its prefetch and "
    "admission: the reference engine admits in the same scheduling step as the prefetch ends",
    "dropped": "a refill dropped under a node without a host backup, or a revoke with hit tokens left "
    "unresolved: the reference read path pins the anchor on host and resolves every hit token "
    "before it revokes",
}

#: One line per reason (unfulfilled, deferred, declined, backup dropped), for ``hicache demo``
#: and ``explain``.
REASON_TEXT: dict[str, str] = {
    "below_threshold": "the L3 hit was shorter than prefetch_threshold: not worth the transfer",
    "host_capacity": "host memory could not stage the hit (the part that did not fit is unfulfilled; "
    "a hit that could not stage at all waits for a retry and is also deferred)",
    "device_capacity": "the tokens reached host memory but the load-back to the device fell short",
    "device_covered": NOT_ARISING["device_covered"],
    "storage_transfer": "the read from L3 stopped before the whole hit arrived (a failed or short "
    "read, a best_effort stop, or a hybrid pool that came back incomplete)",
    "deadline": "the timeout policy's deadline ended the wait before the read completed",
    "anchor_lost": NOT_ARISING["anchor_lost"],
    "aux_window_trim": NOT_ARISING["aux_window_trim"],
    "device_overlap": NOT_ARISING["device_overlap"],
    "cache_admission_shortfall": NOT_ARISING["cache_admission_shortfall"],
    "dropped": NOT_ARISING["dropped"],
    "too_short": "the span after the device and host hits was under prefetch_threshold: L3 not queried",
    "rate_limited": "prefetches in flight already held half the host pool: L3 not queried (retried later)",
    "anchor_not_backed_up": "the matched prefix is not backed up on host, so L3 cannot hold what follows",
}


def storage_labels(storage_config: object = None, backend: str = "") -> dict[str, str]:
    """SGLang's storage metric labels (:data:`STORAGE_LABELS`) for one rank, from a
    ``HiCacheStorageConfig`` (missing attributes count as rank 0, size 1)."""

    def get(name: str, default: int) -> str:
        value = getattr(storage_config, name, None)
        return str(default if value is None else value)

    return {
        "storage_backend": str(backend),
        "tp_rank": get("tp_rank", 0),
        "dp_rank": get("dp_rank", 0),
        "pp_rank": get("pp_rank", 0),
        "pp_size": get("pp_size", 1),
        "attn_cp_rank": get("attn_cp_rank", 0),
        "attn_cp_size": get("attn_cp_size", 1),
    }
