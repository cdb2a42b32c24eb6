"""Write policies, the host lock held until the backup is acknowledged, chunking and failures."""

from __future__ import annotations

import pytest
from hiradix_helpers import Flaky, make_engine, make_storage, new_store, settle

from hicache_sdk.hiradix import ReadPathConfig


def _cfg(policy: str) -> ReadPathConfig:
    return ReadPathConfig(
        page_size=4, prefetch_threshold=8, write_policy=policy, prefetch_policy="best_effort"
    )


@pytest.mark.parametrize(("policy", "hits_to_backup"), [("write_through", 1), ("write_through_selective", 2)])
def test_backup_after_configured_hits(policy: str, hits_to_backup: int) -> None:
    store = new_store()
    e = make_engine(_cfg(policy), store)
    toks = list(range(32))
    for i in range(1, 3):
        e.submit(f"r{i}", toks)
        r = settle(e, f"r{i}")
        assert all(n.on_host for n in r.nodes) == (i >= hits_to_backup)
    held = [n.host_lock_ref for n in r.nodes]
    assert held == [1] * 8  # backup in flight: the host lock is held until the ack
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    assert all(n.host_lock_ref == 0 and n.backed_up_storage for n in r.nodes)
    assert e.s.storage.batch_exists([n.hash for n in r.nodes]) == 8


def test_write_back_backs_up_on_device_eviction_only() -> None:
    store = new_store()
    e = make_engine(_cfg("write_back"), store, dev_tokens=32)
    e.submit("a", list(range(32)))
    a = settle(e, "a")
    assert not any(n.on_host for n in a.nodes)
    e.submit("b", list(range(100, 132)))  # evicts a's pages from the device
    settle(e, "b")
    assert all(n.on_host and not n.on_device for n in a.nodes)
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    assert e.s.storage.batch_exists([n.hash for n in a.nodes]) == 8


def test_failed_chunk_stops_and_lock_is_released() -> None:
    store = new_store()
    flaky = Flaky(make_storage(store))
    e = make_engine(_cfg("write_through"), storage=flaky)
    flaky.fail_set = 1
    e.submit("a", list(range(32)))
    a = settle(e, "a")
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    assert e.writer.failed_backups == 1 and e.writer.pages_written == 0
    assert not any(n.backed_up_storage for n in a.nodes)
    assert all(n.host_lock_ref == 0 for n in a.nodes)


def test_existing_pages_are_not_rewritten() -> None:
    store = new_store()
    e1 = make_engine(_cfg("write_through"), store)
    e1.submit("a", list(range(32)))
    settle(e1, "a")
    e1.s.runner.run_all()  # type: ignore[attr-defined]
    e1.writer.drain()
    assert e1.writer.pages_written == 8
    e2 = make_engine(_cfg("write_through"), store)
    e2.submit("a", list(range(48)))
    settle(e2, "a")
    e2.s.runner.run_all()  # type: ignore[attr-defined]
    e2.writer.drain()
    assert e2.writer.pages_written == 4  # the 8 stored pages were skipped after the existence check
