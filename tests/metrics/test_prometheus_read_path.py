"""The read path's lifecycle counters through the Prometheus exporter: SGLang 0.5.23's family
names, its storage labels, every reason present (0 until counted), the values ``explain``
reports, and our two families beside them. (The names and label sets are compared with the
installed SGLang's own collector in ``tests/sglang/test_sglang_metric_names.py``.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hiradix"))

from hiradix_helpers import make_engine, new_store, settle, warm

from hicache_sdk.hiradix import ReadPathConfig
from hicache_sdk.metrics import lifecycle as lc

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from hicache_sdk.metrics.prometheus import PrometheusExporter, storage_labels  # noqa: E402

CFG = ReadPathConfig(
    page_size=4, prefetch_threshold=8, load_back_threshold=1, prefetch_policy="wait_complete"
)
TOKS = list(range(3000, 3000 + 128))


def _scrape(exp: PrometheusExporter) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(exp.text()):
        for s in fam.samples:
            if s.name.endswith("_total"):
                out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_read_path_families_carry_sglangs_names_labels_and_reasons() -> None:
    store = new_store()
    warm(CFG, store, TOKS)  # 32 pages in L3
    e = make_engine(CFG, store, host_tokens=96)  # the cold host pool cannot stage all 128 tokens
    kept = e.s.host.available_size() // 4 * 4
    assert 8 <= kept < 128
    e.submit("r", TOKS)
    r = settle(e, "r")
    assert r.storage_hit == kept
    exp = PrometheusExporter()
    labels = storage_labels(e.s.storage.storage_config, "memory")
    exp.add_read_path(e.s.counters, labels)
    got = _scrape(exp)
    want_labels = set(lc.STORAGE_LABELS)
    for name, label in lc.SGLANG_FAMILIES:
        samples = got[name]
        assert all(set(lb) == want_labels | ({label} if label else set()) for lb, _ in samples), name
        if label:
            reasons = lc.UNFULFILLED_REASONS if name == lc.UNFULFILLED else lc.DEFERRED_REASONS
            assert sorted(lb["reason"] for lb, _ in samples) == sorted(reasons)
        assert all(lb["storage_backend"] == "memory" and lb["tp_rank"] == "0" for lb, _ in samples)
    unfulfilled = {lb["reason"]: v for lb, v in got[lc.UNFULFILLED]}
    assert unfulfilled["host_capacity"] == 128 - kept and sum(unfulfilled.values()) == 128 - kept
    assert got[lc.HIT] == [(got[lc.HIT][0][0], 128.0)]
    assert got[lc.PREFETCHED][0][1] == kept
    ex = e.explain("r")
    assert ex["unfulfilled_tokens"] == {"host_capacity": 128 - kept}
    ours = {lb["reason"]: v for lb, v in got[lc.DECLINED]}
    assert set(ours) == set(lc.DECLINED_REASONS)
    assert {lb["reason"] for lb, _ in got[lc.BACKUP_DROPPED_BY_REASON]} == set(lc.BACKUP_DROPPED_REASONS)
    exp.remove_read_path(e.s.counters)
    assert lc.HIT not in _scrape(exp)


def test_read_path_labels_must_be_sglangs() -> None:
    exp = PrometheusExporter()
    labels = storage_labels(None, "memory")
    with pytest.raises(ValueError, match=r"missing \['tp_rank'\]"):
        exp.add_read_path(object(), {k: v for k, v in labels.items() if k != "tp_rank"})
    with pytest.raises(ValueError, match=r"unexpected \['rank'\]"):
        exp.add_read_path(object(), {**labels, "rank": "tp0"})


def test_storage_labels_from_a_storage_config() -> None:
    from hicache_sdk.spec import HiCacheStorageConfig

    cfg = HiCacheStorageConfig(tp_rank=3, tp_size=4, pp_rank=1, pp_size=2, dp_rank=2)
    assert storage_labels(cfg, "redis") == {
        "storage_backend": "redis",
        "tp_rank": "3",
        "dp_rank": "2",
        "pp_rank": "1",
        "pp_size": "2",
        "attn_cp_rank": str(getattr(cfg, "attn_cp_rank", 0) or 0),
        "attn_cp_size": str(getattr(cfg, "attn_cp_size", 1) or 1),
    }
