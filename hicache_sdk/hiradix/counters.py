"""Early-abort counters and per-request traces, the material of :func:`explain`."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum


class Abort(str, Enum):
    """Why a read-path step stopped early."""

    BELOW_THRESHOLD = "below_threshold"
    CAPACITY = "capacity"
    HOST_POOL_FULL = "host_pool_full"
    BELOW_LOAD_BACK_THRESHOLD = "below_load_back_threshold"
    OVER_QUOTA = "over_quota"
    SIDECAR_MISS = "sidecar_miss"
    HYBRID_INCOMPLETE = "hybrid_incomplete"
    BACKEND_FAILURE = "backend_failure"
    TIMEOUT = "timeout"
    ANCHOR_NOT_BACKED_UP = "anchor_not_backed_up"
    DEVICE_POOL_FULL = "device_pool_full"
    TRANSFER_FAILED = "transfer_failed"


@dataclass
class Trace:
    """What happened to one request on the read path."""

    req_id: str
    storage_candidate_tokens: int = 0
    storage_hit_tokens: int = 0
    host_filled_tokens: int = 0
    loaded_from_storage_tokens: int = 0
    device_committed_tokens: int = 0
    gpu_hit_tokens: int = 0
    host_hit_tokens: int = 0
    aborts: list[Abort] = field(default_factory=list)


class Counters:
    """Thread-safe abort counters plus the traces of recent requests (bounded)."""

    def __init__(self, keep: int = 4096) -> None:
        self._lock = threading.Lock()
        self.aborts: Counter[str] = Counter()
        self._traces: dict[str, Trace] = {}
        self._keep = keep

    def trace(self, req_id: str) -> Trace:
        with self._lock:
            t = self._traces.get(req_id)
            if t is None:
                if len(self._traces) >= self._keep:
                    self._traces.pop(next(iter(self._traces)))
                t = self._traces[req_id] = Trace(req_id)
            return t

    def abort(self, req_id: str, reason: Abort) -> None:
        with self._lock:
            self.aborts[reason.value] += 1
        self.trace(req_id).aborts.append(reason)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {r.value: self.aborts.get(r.value, 0) for r in Abort}


def explain(counters: Counters, req_id: str) -> dict[str, object]:
    """Answer the article's three questions for ``req_id``: were the pages in L3, were they
    filled into host memory, were they committed to GPU -- and, where not, why (the abort
    reasons recorded for the request, in order). An unknown request answers ``known: False``."""
    with counters._lock:
        t = counters._traces.get(req_id)
    if t is None:
        return {"req_id": req_id, "known": False}
    reasons = [a.value for a in t.aborts]
    return {
        "req_id": req_id,
        "known": True,
        "gpu_hit_tokens": t.gpu_hit_tokens,
        "host_hit_tokens": t.host_hit_tokens,
        "in_l3": {
            "answer": t.storage_hit_tokens > 0,
            "tokens": t.storage_hit_tokens,
            "candidate_tokens": t.storage_candidate_tokens,
        },
        "filled_into_host": {"answer": t.host_filled_tokens > 0, "tokens": t.host_filled_tokens},
        "committed_to_gpu": {"answer": t.device_committed_tokens > 0, "tokens": t.device_committed_tokens},
        "why_not": reasons,
    }
