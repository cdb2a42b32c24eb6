"""The hybrid read path over the real local-file backend: sidecar files are written before the
KV, read back into the sidecar host pools, and a Mamba file that disappears between the hit
query and the read discards the whole prefetch (``sidecar_miss``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hiradix_helpers import make_engine, settle

from hicache_sdk import HiCacheStorageConfig, create_backend
from hicache_sdk.hiradix import Abort, ReadPathConfig

PS = 4
TOKS = list(range(600, 600 + 40))  # 10 pages
ALL = ("mamba", "swa", "indexer")


def _cfg() -> ReadPathConfig:
    return ReadPathConfig(
        page_size=PS, prefetch_threshold=8, load_back_threshold=1, prefetch_policy="wait_complete"
    )


def _file(root: Path) -> Any:
    return create_backend("file", HiCacheStorageConfig(model_name="m"), {"root": str(root)})


def _warm(root: Path) -> None:
    st = _file(root)
    w = make_engine(_cfg(), storage=st, sidecars=ALL)
    w.submit("w", TOKS)
    settle(w, "w")
    w.s.runner.run_all()  # type: ignore[attr-defined]
    w.writer.drain()
    assert w.writer.failed_backups == 0 and w.writer.failed_sidecar_backups == 0
    st.close()


def test_hybrid_round_trip_over_the_file_backend(tmp_path: Path) -> None:
    _warm(tmp_path)
    st = _file(tmp_path)
    e = make_engine(_cfg(), storage=st, sidecars=ALL)
    e.submit("r", TOKS)
    r = settle(e, "r")
    assert r.storage_hit == 40 and r.computed == 0
    assert e.verify(r.nodes) and e.verify_sidecars()
    assert "mamba" in r.nodes[-1].side and "swa" in r.nodes[-2].side
    st.close()


def test_sidecar_file_lost_between_query_and_read_is_a_sidecar_miss(tmp_path: Path) -> None:
    _warm(tmp_path)
    st = _file(tmp_path)
    e = make_engine(_cfg(), storage=st, sidecars=ALL)
    free = e.s.host.available_size()
    e.submit("r", TOKS)
    e.s.runner.step()  # type: ignore[attr-defined]  # the hit query: all 10 pages restorable
    e.prefetcher.drain()  # host + sidecar staging allocated, read submitted
    assert e.prefetcher.ongoing["r"].hit_tokens == 40
    last = e.s.tree.hashes(TOKS, None)[-1]
    lost = [p for p in tmp_path.rglob("*") if p.is_file() and last in p.name and "mamba" in str(p.parent)]
    assert len(lost) == 1
    lost[0].unlink()
    r = settle(e, "r")
    assert r.storage_hit == 0 and r.computed == 40
    assert e.explain("r")["why_not"] == [Abort.SIDECAR_MISS.value]
    e.s.runner.run_all()  # type: ignore[attr-defined]
    e.writer.drain()
    held = sum(len(n.host_value) for n in e.s.tree.walk() if n.host_value is not None)
    assert e.s.host.available_size() == free - held  # the discarded KV slots came back
    st.close()
