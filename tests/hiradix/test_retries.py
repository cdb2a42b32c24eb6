"""Prefetch retries and abort rules (spec 5.1, 5.3, 5.5): paced retries after a miss, the
rate limit or a host shortfall; their pacing and cap; the queue head never waits; a timeout
spends the wait budget; locks and occupancy released on every abort."""

from __future__ import annotations

import pytest
from hiradix_helpers import make_engine, new_store, settle, warm

from hicache_sdk.hiradix import Abort, ReadPathConfig

PS = 4
TOKS = list(range(3000, 3000 + 32))


def _cfg(policy: str = "wait_complete", **kw: object) -> ReadPathConfig:
    return ReadPathConfig(
        page_size=PS,
        prefetch_threshold=8,
        load_back_threshold=1,
        prefetch_policy=policy,
        **kw,  # type: ignore[arg-type]
    )


def _miss_then_armed(cfg: ReadPathConfig, store: str) -> object:
    e = make_engine(cfg, store)
    e.submit("r", TOKS)
    assert e.try_admit("r", queue_head=False) is None  # query pending
    e.s.runner.run_all()  # type: ignore[attr-defined]  # the query finds nothing
    assert e.try_admit("r", queue_head=False) is None  # below threshold: revoked, retry armed
    assert e.explain("r")["why_not"] == [Abort.BELOW_THRESHOLD.value]
    assert e.prefetcher.retries.pending("r")
    return e


def test_miss_is_repolled_after_the_interval_and_finds_what_a_peer_wrote() -> None:
    store = new_store()
    e = _miss_then_armed(_cfg(), store)
    warm(_cfg(), store, TOKS)  # a peer writes the prefix meanwhile
    for _ in range(7):  # passes 2..8 after arming: not yet due
        assert e.try_admit("r", queue_head=False) is None  # type: ignore[attr-defined]
        assert "r" not in e.prefetcher.ongoing  # type: ignore[attr-defined]
    assert e.try_admit("r", queue_head=False) is None  # type: ignore[attr-defined]  # 8th pass: re-issued
    assert "r" in e.prefetcher.ongoing and e.prefetcher.retries.attempts("r") == 1  # type: ignore[attr-defined]
    r = settle(e, "r")  # type: ignore[arg-type]
    assert r.storage_hit == 32 and r.computed == 0 and e.verify(r.nodes)  # type: ignore[attr-defined]


def test_retry_pacing_one_pass_either_side() -> None:
    cfg = _cfg(prefetch_retry_poll_interval=3)
    e = _miss_then_armed(cfg, new_store())
    assert e.try_admit("r", queue_head=False) is None  # type: ignore[attr-defined]
    assert e.try_admit("r", queue_head=False) is None  # type: ignore[attr-defined]
    assert "r" not in e.prefetcher.ongoing  # type: ignore[attr-defined]  # interval - 1 passes: not yet
    assert e.try_admit("r", queue_head=False) is None  # type: ignore[attr-defined]
    assert "r" in e.prefetcher.ongoing  # type: ignore[attr-defined]  # the interval-th pass re-issues


@pytest.mark.parametrize("attempts", [0, 1, 3])
def test_retries_are_capped_then_the_request_is_admitted(attempts: int) -> None:
    cfg = _cfg(prefetch_retry_poll_interval=1, prefetch_retry_max_attempts=attempts)
    e = make_engine(cfg, new_store())
    e.submit("r", TOKS)
    served = None
    for _ in range(100):
        served = e.try_admit("r", queue_head=False)
        if served is not None:
            break
        e.s.runner.run_all()  # type: ignore[attr-defined]
    assert served is not None and served.computed == 32
    assert e.prefetcher.retries.reissued_total == attempts
    assert e.s.counters.causes()[Abort.BELOW_THRESHOLD.value] == attempts + 1


def test_queue_head_never_waits_on_a_retry() -> None:
    e = _miss_then_armed(_cfg(), new_store())
    r = e.try_admit("r", queue_head=True)  # type: ignore[attr-defined]
    assert r is not None and r.computed == 32
    assert not e.prefetcher.retries.pending("r")  # type: ignore[attr-defined]


def test_pending_retry_makes_a_new_prefetch_exit_early() -> None:
    e = _miss_then_armed(_cfg(), new_store())
    before = e.s.counters.causes()  # type: ignore[attr-defined]
    m = e.s.tree.match_prefix(TOKS)  # type: ignore[attr-defined]
    assert e.prefetcher.prefetch_from_storage("r", m.last_host_node, m.storage_span) is False  # type: ignore[attr-defined]
    assert e.s.counters.causes() == before and "r" not in e.prefetcher.ongoing  # type: ignore[attr-defined]


def test_capacity_abort_arms_a_retry_that_runs_once_capacity_frees() -> None:
    store = new_store()
    warm(_cfg(), store, TOKS)
    e = make_engine(_cfg(prefetch_retry_poll_interval=2), store, host_tokens=64)
    big = list(range(50_000, 50_000 + e.prefetcher.capacity_limit + PS))
    e.submit("a", big)  # occupies the whole prefetch capacity (query not run yet)
    e.submit("r", TOKS)
    assert e.explain("r")["why_not"] == [Abort.CAPACITY.value] and e.prefetcher.retries.pending("r")
    e.cancel("a")  # capacity comes back
    assert e.prefetcher.tokens_occupied == 0
    assert e.try_admit("r", queue_head=False) is None
    assert e.try_admit("r", queue_head=False) is None  # 2nd pass: the retry is issued
    assert "r" in e.prefetcher.ongoing
    r = settle(e, "r")
    assert r.storage_hit == 32


def test_timeout_spends_the_wait_budget_and_arms_no_retry() -> None:
    store = new_store()
    warm(_cfg("timeout"), store, TOKS)
    e = make_engine(_cfg("timeout"), store)
    e.submit("r", TOKS)
    assert e.try_admit("r") is None
    e.s.clock.advance(10.0)  # type: ignore[attr-defined]
    m = e.s.tree.match_prefix(TOKS)
    assert e.prefetcher.check_prefetch_progress("r", queue_head=False)  # expired: released
    assert e.explain("r")["why_not"] == [Abort.TIMEOUT.value]
    assert not e.prefetcher.retries.pending("r") and e.prefetcher.retries.expired("r")
    assert e.prefetcher.prefetch_from_storage("r", m.last_host_node, m.storage_span) is False
    assert "r" not in e.prefetcher.ongoing


def test_aborts_release_the_anchor_lock_and_occupancy() -> None:
    """A mid-tree anchor (host-resident) is pinned while the prefetch runs and released on
    the below-threshold revoke after the query."""
    cfg = _cfg()
    e = make_engine(cfg, new_store())
    e.submit("a", TOKS[:16])
    first = settle(e, "a")
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    e.s.evict_device(16)  # the prefix is now host-only: the anchor for the rest
    anchor = first.nodes[-1]
    assert anchor.on_host and not anchor.on_device
    e.submit("r", TOKS)
    assert anchor.host_lock_ref == 1 and e.prefetcher.tokens_occupied == 16
    e.s.runner.run_all()  # type: ignore[attr-defined]
    assert e.try_admit("r", queue_head=False) is None  # the miss revokes
    assert e.explain("r")["why_not"] == [Abort.BELOW_THRESHOLD.value]
    assert all(n.host_lock_ref == 0 for n in e.s.tree.walk()) and e.prefetcher.tokens_occupied == 0
