"""The read path's Prometheus families equal SGLang 0.5.23's own (collected only in
``tox -e sglang``): SGLang's ``StorageMetricsCollector`` is built from the installed source
on a private registry, with the storage labels read from SGLang's
``storage_attachment._resolve_metrics_collector``; its counter families, their label names
and their ``reason`` values must equal what our exporter serves for a read path's
``Counters``. Our own families (``hicache_*``) are not SGLang's and are left out."""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

import prometheus_client
import sglang
from sglang.srt.observability import metrics_collector as mc

from hicache_sdk.hiradix import Counters
from hicache_sdk.metrics import lifecycle as lc
from hicache_sdk.metrics.prometheus import PrometheusExporter, storage_labels

SOURCE = Path(sglang.__file__).parent / "srt" / "mem_cache" / "unified_cache" / "storage_attachment.py"


def sglang_storage_label_keys() -> list[str]:
    """The keys of the ``labels`` dict SGLang builds for its storage metrics collector."""
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "_resolve_metrics_collector":
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "labels" for t in node.targets)
                    and isinstance(node.value, ast.Dict)
                ):
                    return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    raise AssertionError(f"no labels dict in {SOURCE}")


def families(registry: Any) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Counter families by sample name (``..._total``): (label names, ``reason`` values)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for fam in registry.collect():
        if fam.type != "counter":
            continue
        for s in fam.samples:
            if not s.name.endswith("_total"):
                continue
            names, reasons = out.setdefault(s.name, (set(), set()))
            names.update(s.labels)
            if "reason" in s.labels:
                reasons.add(s.labels["reason"])
    return {k: (frozenset(a), frozenset(b)) for k, (a, b) in out.items()}


def sglang_families(label_keys: list[str]) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    reg = prometheus_client.CollectorRegistry()

    class Private(mc.StorageMetricsCollector):  # SGLang's DI hooks: its metrics on our registry
        _counter_cls = functools.partial(prometheus_client.Counter, registry=reg)
        _gauge_cls = functools.partial(prometheus_client.Gauge, registry=reg)
        _histogram_cls = functools.partial(prometheus_client.Histogram, registry=reg)

    c = Private(labels={k: "0" for k in label_keys})
    # an unlabelled family exports a sample only once used: log one token through each
    c.log_prefetched_tokens(1)
    c.log_backuped_tokens(1)
    c.log_storage_prefetch_hit_tokens(1)
    c.log_backup_dropped_tokens(1)
    c.log_prefetch_aux_alloc_failed_tokens(1)
    return families(reg)


def test_storage_label_keys_are_sglangs() -> None:
    assert sglang_storage_label_keys() == list(lc.STORAGE_LABELS)


def test_read_path_families_equal_sglangs() -> None:
    theirs = sglang_families(sglang_storage_label_keys())
    exp = PrometheusExporter()
    exp.add_read_path(Counters(), storage_labels(None, "file"))
    ours = {k: v for k, v in families(exp.registry).items() if k.startswith("sglang:")}
    assert ours == theirs
    # and they are the families the issue names, with SGLang's reasons
    assert set(theirs) == {name for name, _ in lc.SGLANG_FAMILIES}
    assert theirs[lc.UNFULFILLED][1] == frozenset(lc.UNFULFILLED_REASONS)
    assert theirs[lc.DEFERRED][1] == frozenset(lc.DEFERRED_REASONS)


def test_not_arising_reasons_are_sglangs() -> None:
    """Every reason documented as not arising in the reference read path is one of SGLang's."""
    assert set(lc.NOT_ARISING) <= set(lc.UNFULFILLED_REASONS)
