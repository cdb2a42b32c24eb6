"""The read path's counters, per-request traces and :func:`explain`.

Two layers:

* **SGLang's lifecycle counters** (:mod:`hicache_sdk.metrics.lifecycle`), in tokens: a
  rank-agreed positive L3 hit is recorded (:meth:`Counters.hit`), then every hit token is
  resolved exactly once: used, or *unfulfilled* with one of SGLang's reasons
  (:meth:`Counters.resolve` for a part, :meth:`Counters.finish` for the rest, at
  admission); a hit that had to wait for capacity is also *deferred*. A request that goes
  away discards its open hit (:meth:`Counters.discard`), as SGLang excludes aborted
  requests. The write path counts completed (``backuped``) and dropped backup tokens.
* **Causes** (:class:`Abort`): what happened, finer than SGLang's reasons (``best_effort``
  and ``timeout`` both end a read early; a ``sidecar_miss`` is SGLang's
  ``storage_transfer``). Each lifecycle event names its cause; :meth:`Counters.causes`
  counts them.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hicache_sdk.metrics import lifecycle as lc


class Abort(str, Enum):
    """The cause of an early stop on the read or write path (``explain``'s ``cause``)."""

    # before the L3 query (declined)
    BELOW_THRESHOLD = "below_threshold"
    CAPACITY = "capacity"
    ANCHOR_NOT_BACKED_UP = "anchor_not_backed_up"
    # the query, host staging
    BACKEND_FAILURE = "backend_failure"
    HOST_POOL_FULL = "host_pool_full"
    HOST_POOL_SHORT = "host_pool_short"
    AUX_ALLOC_FAILED = "aux_alloc_failed"
    # the transfer and the admission gate
    READ_FAILED = "read_failed"
    BEST_EFFORT = "best_effort"
    TIMEOUT = "timeout"
    SIDECAR_MISS = "sidecar_miss"
    HYBRID_INCOMPLETE = "hybrid_incomplete"
    # load-back
    BELOW_LOAD_BACK_THRESHOLD = "below_load_back_threshold"
    OVER_QUOTA = "over_quota"
    DEVICE_POOL_FULL = "device_pool_full"
    TRANSFER_FAILED = "transfer_failed"
    # the write path
    BACKUP_HOST_FULL = "backup_host_full"
    BACKUP_FAILED = "backup_failed"
    BACKUP_ABANDONED = "backup_abandoned"


@dataclass(frozen=True)
class Event:
    """One counted lifecycle event of a request: ``metric`` is the family (``"unfulfilled"``,
    ``"deferred"``, ``"declined"``, ``"aux_alloc_failed"``), ``reason`` its label value,
    ``cause`` the :class:`Abort` behind it, ``numbers`` the figures that explain it (e.g.
    ``hit_tokens`` and ``kept_tokens`` of a cut)."""

    metric: str
    reason: str
    tokens: int
    cause: str | None
    numbers: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "reason": self.reason,
            "tokens": self.tokens,
            "cause": self.cause,
            **self.numbers,
        }


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
    events: list[Event] = field(default_factory=list)


_METRIC = {
    "unfulfilled": lc.UNFULFILLED,
    "deferred": lc.DEFERRED,
    "declined": lc.DECLINED,
    "aux_alloc_failed": lc.AUX_ALLOC_FAILED,
}


class Counters:
    """Thread-safe lifecycle counters (tokens, SGLang's names), cause counts, and the traces
    of recent requests (the last ``keep``)."""

    def __init__(self, keep: int = 4096) -> None:
        self._lock = threading.Lock()
        self.aborts: Counter[str] = Counter()
        self._traces: dict[str, Trace] = {}
        self._keep = keep
        self._remaining: dict[str, int] = {}
        self._tokens: Counter[tuple[str, str]] = Counter()

    def trace(self, req_id: str) -> Trace:
        with self._lock:
            return self._trace(req_id)

    def _trace(self, req_id: str) -> Trace:
        t = self._traces.get(req_id)
        if t is None:
            if len(self._traces) >= self._keep:
                self._traces.pop(next(iter(self._traces)))
            t = self._traces[req_id] = Trace(req_id)
        return t

    # -- causes ---------------------------------------------------------------------------
    def abort(self, req_id: str, reason: Abort) -> None:
        """Record a cause for ``req_id`` (``explain``'s ``why_not``)."""
        with self._lock:
            self.aborts[reason.value] += 1
            self._trace(req_id).aborts.append(reason)

    def causes(self) -> dict[str, int]:
        """Every cause with its count (zero included)."""
        with self._lock:
            return {r.value: self.aborts.get(r.value, 0) for r in Abort}

    # -- SGLang's storage-hit lifecycle ---------------------------------------------------
    def _event(
        self, req_id: str, metric: str, reason: str, tokens: int, cause: Abort | None, **n: int
    ) -> None:
        self._tokens[(_METRIC[metric], reason)] += tokens
        self._trace(req_id).events.append(
            Event(metric, reason, tokens, None if cause is None else cause.value, dict(n))
        )

    def hit(self, req_id: str, tokens: int) -> None:
        """A rank-agreed positive L3 hit: counted, and open until every token is resolved."""
        if tokens <= 0:
            return
        with self._lock:
            self._tokens[(lc.HIT, "")] += tokens
            self._remaining[req_id] = tokens
            self._trace(req_id).storage_hit_tokens = tokens

    def resolve(
        self, req_id: str, tokens: int, reason: str | None = None, cause: Abort | None = None, **numbers: int
    ) -> None:
        """Close ``tokens`` of the open hit: unfulfilled for ``reason``, or (``None``) not
        counted (tokens the host already held). Never more than what is open."""
        if tokens <= 0:
            return
        with self._lock:
            left = self._remaining.get(req_id)
            if left is None:
                return
            n = min(tokens, left)
            if reason is not None and n:
                self._event(req_id, "unfulfilled", reason, n, cause, **numbers)
            if left - n:
                self._remaining[req_id] = left - n
            else:
                del self._remaining[req_id]

    def finish(
        self, req_id: str, fulfilled: int, reason: str | None, cause: Abort | None = None, **numbers: int
    ) -> None:
        """Close the open hit: ``fulfilled`` tokens were used, the rest is unfulfilled for
        ``reason`` (``None``: not counted)."""
        with self._lock:
            left = self._remaining.pop(req_id, None)
            if left is None:
                return
            n = max(0, left - fulfilled)
            if reason is not None and n:
                self._event(req_id, "unfulfilled", reason, n, cause, **numbers)

    def open_tokens(self, req_id: str) -> int:
        """Hit tokens of ``req_id`` not resolved yet (0 when none is open)."""
        with self._lock:
            return self._remaining.get(req_id, 0)

    def discard(self, req_id: str) -> None:
        """The request went away: its open hit is excluded (not counted as unfulfilled)."""
        with self._lock:
            self._remaining.pop(req_id, None)

    def defer(self, req_id: str, tokens: int, reason: str, cause: Abort | None = None) -> None:
        if tokens > 0:
            with self._lock:
                self._event(req_id, "deferred", reason, tokens, cause)

    def decline(self, req_id: str, tokens: int, reason: str, cause: Abort) -> None:
        """A prefetch not attempted (ours: SGLang keeps no token counter for it)."""
        with self._lock:
            self._tokens[(lc.DECLINED, reason)] += max(0, tokens)
            self.aborts[cause.value] += 1
            t = self._trace(req_id)
            t.aborts.append(cause)
            t.events.append(Event("declined", reason, max(0, tokens), cause.value, {}))

    def aux_alloc_failed(self, req_id: str, tokens: int, pool: str) -> None:
        if tokens > 0:
            with self._lock:
                self._tokens[(lc.AUX_ALLOC_FAILED, "")] += tokens
                self._trace(req_id).events.append(
                    Event("aux_alloc_failed", pool, tokens, Abort.AUX_ALLOC_FAILED.value, {})
                )

    def prefetched(self, tokens: int) -> None:
        if tokens > 0:
            with self._lock:
                self._tokens[(lc.PREFETCHED, "")] += tokens

    def backuped(self, tokens: int) -> None:
        if tokens > 0:
            with self._lock:
                self._tokens[(lc.BACKUPED, "")] += tokens

    def backup_dropped(self, tokens: int, reason: str, cause: Abort) -> None:
        """Backup tokens that will not reach L3, with the reason (SGLang's family has none)."""
        if tokens > 0:
            with self._lock:
                self._tokens[(lc.BACKUP_DROPPED, "")] += tokens
                self._tokens[(lc.BACKUP_DROPPED_BY_REASON, reason)] += tokens
                self.aborts[cause.value] += 1

    def snapshot(self) -> dict[str, Any]:
        """Every family by its metric name: a plain count for unlabelled families, a
        ``{reason: tokens}`` dict (every reason, zero included) for labelled ones."""
        with self._lock:
            tok = dict(self._tokens)

        def labelled(name: str, reasons: tuple[str, ...]) -> dict[str, int]:
            return {r: tok.get((name, r), 0) for r in reasons}

        return {
            lc.HIT: tok.get((lc.HIT, ""), 0),
            lc.PREFETCHED: tok.get((lc.PREFETCHED, ""), 0),
            lc.BACKUPED: tok.get((lc.BACKUPED, ""), 0),
            lc.UNFULFILLED: labelled(lc.UNFULFILLED, lc.UNFULFILLED_REASONS),
            lc.DEFERRED: labelled(lc.DEFERRED, lc.DEFERRED_REASONS),
            lc.BACKUP_DROPPED: tok.get((lc.BACKUP_DROPPED, ""), 0),
            lc.AUX_ALLOC_FAILED: tok.get((lc.AUX_ALLOC_FAILED, ""), 0),
            lc.DECLINED: labelled(lc.DECLINED, lc.DECLINED_REASONS),
            lc.BACKUP_DROPPED_BY_REASON: labelled(lc.BACKUP_DROPPED_BY_REASON, lc.BACKUP_DROPPED_REASONS),
        }


def _by_reason(events: list[Event], metric: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        if e.metric == metric:
            out[e.reason] = out.get(e.reason, 0) + e.tokens
    return out


def explain(counters: Counters, req_id: str) -> dict[str, object]:
    """Answer the article's three questions for ``req_id``: were the pages in L3, were they
    filled into host memory, were they committed to GPU; and, where not, why.

    * ``storage_hit_tokens``: the rank-agreed L3 hit (SGLang's ``storage_prefetch_hit``);
    * ``unfulfilled_tokens`` / ``deferred_tokens`` / ``declined_tokens``: this request's
      share of those families, by reason (SGLang's reasons; tokens);
    * ``events``: each counted event in order, with its ``cause`` and the figures behind
      it (a ``host_capacity`` cut carries ``hit_tokens`` and ``kept_tokens``);
    * ``why_not``: every cause recorded for the request, in order.

    An unknown request answers ``known: False``."""
    with counters._lock:
        t = counters._traces.get(req_id)
        events = list(t.events) if t is not None else []
        aborts = list(t.aborts) if t is not None else []
    if t is None:
        return {"req_id": req_id, "known": False}
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
        "storage_hit_tokens": t.storage_hit_tokens,
        "unfulfilled_tokens": _by_reason(events, "unfulfilled"),
        "deferred_tokens": _by_reason(events, "deferred"),
        "declined_tokens": _by_reason(events, "declined"),
        "events": [e.as_dict() for e in events],
        "why_not": [a.value for a in aborts],
    }
